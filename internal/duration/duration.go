// Package duration formats durations the way orderstore's config file,
// logs and messages write them: "168h", "1m30s", not "168h0m0s".
package duration

import (
	"fmt"
	"strconv"
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

// ParseAge reads an age: a Go duration ("90m", "36h") or whole days ("7d"), positive.
func ParseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 && days <= 100*365 {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%.20q: want a positive duration such as 90m, 36h or 7d", s)
}
