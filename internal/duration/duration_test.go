package duration

import (
	"strings"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		168 * time.Hour:                 "168h",
		90 * time.Second:                "1m30s",
		5 * time.Minute:                 "5m",
		time.Hour + 30*time.Minute:      "1h30m",
		2 * time.Second:                 "2s",
		1500 * time.Millisecond:         "1.5s",
		0:                               "0s",
		time.Hour + time.Second:         "1h0m1s",
		-2 * time.Minute:                "-2m",
		72*time.Hour + 30*time.Second:   "72h0m30s",
		250 * time.Millisecond:          "250ms",
		3*time.Hour + 5*time.Minute:     "3h5m",
		10*time.Minute + 30*time.Second: "10m30s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"90m": 90 * time.Minute, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "1.5h": 90 * time.Minute} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1h", "0d", "-3d", "1.5d", "d", "yesterday", "99999999d"} {
		if _, err := ParseAge(in); err == nil || !strings.Contains(err.Error(), "want a positive duration") {
			t.Errorf("ParseAge(%q): %v, want an error", in, err)
		}
	}
}
