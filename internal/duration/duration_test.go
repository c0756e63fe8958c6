package duration

import (
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
