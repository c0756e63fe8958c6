package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderstore/orderstore/admin"
)

// An appliance that is still recovering its streams answers its data
// endpoints with 503. status and dlq list must say so and fail, not print
// zeros or "no dead letters" as if that were the answer.
func TestClientCommandsFailOnUnavailable(t *testing.T) {
	// The real admin handler before the broker is up: exactly what a
	// recovering appliance serves.
	hs := httptest.NewServer(admin.New(admin.Config{Stream: "ORDER_EVENTS", DeadLetterStream: "ORDER_EVENTS_DLQ"}))
	defer hs.Close()
	for _, args := range [][]string{
		{"status", "-admin", hs.URL},
		{"status", "-admin", hs.URL, "-json"},
		{"dlq", "list", "-admin", hs.URL},
		{"dlq", "replay", "-admin", hs.URL, "-all"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), args, &out, &errb)
			if code != exitFailure {
				t.Errorf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, exitFailure, out.String(), errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("%v printed a result for a 503:\n%s", args, out.String())
			}
			if s := errb.String(); !strings.Contains(s, "503") || !strings.Contains(s, "hint: orderstore is starting") || strings.Contains(s, "no dead letters") {
				t.Errorf("%v: stderr %q, want the 503 and a hint", args, s)
			}
		})
	}
}
