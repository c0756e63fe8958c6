// Package duration formats durations the way orderstore's config file,
// logs and messages write them: "168h", "1m30s", not "168h0m0s".
package duration

import (
	"strings"
	"time"
)

// Format prints d as time.Duration does, without a trailing zero minute
// or second: "168h" rather than "168h0m0s", "5m" rather than "5m0s".
func Format(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
