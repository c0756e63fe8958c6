package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// orderstore order ID [-events | -as-of WHEN] against a running instance.
func TestOrderCommand(t *testing.T) {
	a := startInProcess(t, "")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	var seqs []uint64
	for i, typ := range []string{"created", "paid", "shipped"} {
		ack, err := js.Publish(ctx, "orders."+typ, []byte(fmt.Sprintf(`{"order_id":"A/1","status":"st-%d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	cli := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(ctx, append([]string{"order"}, append(args, "-admin", a.adminURL)...), &out, &errb)
		return code, out.String(), errb.String()
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if code, out, errs := cli("A/1"); code != 0 || !strings.Contains(out, "st-2") {
			return fmt.Errorf("exit %d: %s %s", code, out, errs)
		}
		return nil
	})
	code, out, errs := cli("A/1", "-events", "-states", "-limit", "2")
	if code != 0 || !strings.Contains(out, "created") || !strings.Contains(out, "st-1") || strings.Contains(out, "shipped") ||
		!strings.Contains(errs, "more: orderstore order -events -from 2 A/1") {
		t.Errorf("order -events -limit 2: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, `{"order_id":"A/1","status":"st-0"}`) {
		t.Errorf("order -events: the payload is not shown compact:\n%s", out)
	}
	code, out, errs = cli("-events", "-all", "-limit", "1", "A/1")
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, "shipped") {
		t.Errorf("order -events -all: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = cli("A/1", "-as-of", fmt.Sprint(seqs[1]))
	if code != 0 || !strings.Contains(out, "st-1") || !strings.Contains(out, "the fold of 2 events") || strings.Contains(out, "INCOMPLETE") {
		t.Errorf("order -as-of %d: exit %d\n%s\n%s", seqs[1], code, out, errs)
	}
	code, _, errs = cli("A/1", "-as-of", "1999-01-01T00:00:00Z")
	if code != exitFailure || !strings.Contains(errs, "404") || !strings.Contains(errs, "had no event as of") {
		t.Errorf("order -as-of before it existed: exit %d %s", code, errs)
	}
	for _, bad := range [][]string{{}, {"A/1", "-as-of", "yesterday"}, {"A/1", "-events", "-as-of", "3"}, {"A/1", "-limit", "0", "-events"}, {"A/1", "B/2"}} {
		if code, _, _ := cli(bad...); code != exitUsage {
			t.Errorf("order %q: exit %d, want %d", bad, code, exitUsage)
		}
	}
	if code, _, errs := cli("nobody", "-events"); code != exitFailure || !strings.Contains(errs, "not found") {
		t.Errorf("order nobody -events: exit %d %s", code, errs)
	}
	// A producer's status is shown, never acted on by the terminal (TestClipIsSafeForATerminal).
	if _, err := js.Publish(ctx, "orders.paid", []byte(`{"order_id":"H/1","status":"\u001b]52;c;aGk=\u0007"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		code, out, errs := cli("H/1")
		if code != 0 || !strings.Contains(out, `\x1b]52;c;aGk=\a`) || strings.ContainsAny(out, "\x1b\x07") {
			return fmt.Errorf("order H/1: exit %d, status not escaped: %q %s", code, out, errs)
		}
		return nil
	})
}

// orderstore orders [-status S] [-stale] [-older-than D] against a running
// instance.
func TestOrdersCommand(t *testing.T) {
	a := startInProcess(t, "[processor.stale_after]\npaid = \"1ms\"\n")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for i := range 5 {
		typ := "created"
		if i%2 == 1 {
			typ = "paid"
		}
		if _, err := js.Publish(ctx, "orders."+typ, []byte(fmt.Sprintf(`{"order_id":"o-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	cli := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(ctx, append([]string{"orders"}, append(args, "-admin", a.adminURL)...), &out, &errb)
		return code, out.String(), errb.String()
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if code, out, errs := cli(); code != 0 || strings.Count(out, "\n") != 6 {
			return fmt.Errorf("exit %d: %s %s", code, out, errs)
		}
		return nil
	})
	code, out, errs := cli("-status", "paid", "-limit", "1")
	if code != 0 || !strings.Contains(out, "o-1") || strings.Contains(out, "o-3") || !strings.Contains(errs, "more: orderstore orders -cursor ") {
		t.Errorf("orders -status paid -limit 1: exit %d\n%s\n%s", code, out, errs)
	}
	// paid's stale_after is 1ms: poll until o-3, paid last, is older.
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		code, out, errs := cli("-stale", "-all", "-limit", "1", "-newest")
		if code != 0 || strings.Count(out, "\n") != 3 || strings.Index(out, "o-3") > strings.Index(out, "o-1") || strings.Count(out, "stale") != 2 {
			return fmt.Errorf("orders -stale -all -newest: exit %d\n%s\n%s", code, out, errs)
		}
		return nil
	})
	code, _, errs = cli("-older-than", "7d")
	if code != 0 || !strings.Contains(errs, "no orders listed") {
		t.Errorf("orders -older-than 7d: exit %d %s", code, errs)
	}
	code, out, _ = cli("-status", "created", "-json")
	if code != 0 || !strings.Contains(out, `"order_id": "o-4"`) {
		t.Errorf("orders -json: exit %d %s", code, out)
	}
	if code, _, errs := cli("-older-than", "soon"); code != exitUsage || !strings.Contains(errs, "-older-than \"soon\": want a positive duration such as 90m, 36h or 7d") {
		t.Errorf("orders -older-than soon: exit %d %s", code, errs)
	}
	var sout, serr strings.Builder
	run(ctx, []string{"status", "-admin", a.adminURL}, &sout, &serr)
	if !regexp.MustCompile(`\n  by status +created 3, paid 2 \(2 stale\); 2 stale in all \(orderstore orders -stale\)\n`).MatchString(sout.String()) {
		t.Errorf("orderstore status lacks the counts by status:\n%s%s", sout.String(), serr.String())
	}
	for _, bad := range [][]string{{"o-1"}, {"-limit", "0"}, {"-limit", "5000"}} {
		if code, _, _ := cli(bad...); code != exitUsage {
			t.Errorf("orders %q: exit %d, want %d", bad, code, exitUsage)
		}
	}
}

// What a producer wrote is shown, never acted on by the terminal: control
// characters and escape sequences come out as Go escapes, and a cut never
// splits a character.
func TestClipIsSafeForATerminal(t *testing.T) {
	for in, want := range map[string]string{
		"paid":                  "paid",
		"\x1b]52;c;aGk=\x07":    `\x1b]52;c;aGk=\a`,
		"line\rover":            `line\rover`,
		"tab\there":             `tab\there`,
		"bad \xff byte":         `bad \xff byte`,
		"ünïcödé, fine":         "ünïcödé, fine",
		strings.Repeat("é", 30): strings.Repeat("é", 20) + "…",
	} {
		if got := clip(in, 40); got != want {
			t.Errorf("clip(%q) = %q, want %q", in, got, want)
		}
	}
	// So is an event's payload in `order ID -events` and `dlq list` (raw bytes, data_base64).
	for in, want := range map[string]string{
		"{\"a\":\n1}":                         `{"a": 1}`,
		"\x1b]52;c;aGk=\x07":                  `\x1b]52;c;aGk=\a`,
		"\u009b31m" + strings.Repeat("é", 40): `\u009b31m` + strings.Repeat("é", 25) + "…",
	} {
		if got := preview([]byte(in)); got != want {
			t.Errorf("preview(%q) = %q, want %q", in, got, want)
		}
	}
}

// An order of a store past a million events prints its sequences whole:
// "last_seq 1200000", not the float64 JSON decodes into (1.2e+06).
func TestPrintOrderShowsSequencesWhole(t *testing.T) {
	var o map[string]any
	if err := json.Unmarshal([]byte(`{"order_id":"o-1","events":3000000,"last_seq":1200000,"as_of":{"events":2000000,"last_seq":98765432101,"complete":false,"not_retained":1000000}}`), &o); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	printOrder(&out, o, false)
	for _, want := range []string{`\nevents +3000000\n`, `\nlast_seq +1200000\n`, `the fold of 2000000 events up to sequence 98765432101; INCOMPLETE: 1000000 events no longer retained, 0 older`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("printOrder lacks %s:\n%s", want, out.String())
		}
	}
}
