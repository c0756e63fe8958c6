// Package bytesize formats byte counts with IEC units (powers of 1024): the
// one formatter behind config.ByteSize, log lines, errors and the CLI.
package bytesize

import (
	"strconv"
	"strings"
)

// Units are the IEC units, largest first.
var Units = []struct {
	Suffix string
	Mult   int64
}{
	{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1},
}

// Exact prints n with the largest unit that divides it exactly ("10GiB", "1536MiB", "1000B"), so
// that parsing it back gives n. Negative is "-1" (unlimited).
func Exact(n int64) string {
	if n < 0 {
		return "-1"
	}
	for _, u := range Units {
		if n >= u.Mult && n%u.Mult == 0 {
			return strconv.FormatInt(n/u.Mult, 10) + u.Suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Format prints n for people: exact when a unit divides it ("10GiB"), else rounded to one decimal
// of the largest unit below it ("1.5GiB"). Negative is "unlimited".
func Format(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	for _, u := range Units {
		if n < u.Mult {
			continue
		}
		if n%u.Mult == 0 {
			return strconv.FormatInt(n/u.Mult, 10) + u.Suffix
		}
		s := strconv.FormatFloat(float64(n)/float64(u.Mult), 'f', 1, 64)
		return strings.TrimSuffix(s, ".0") + u.Suffix
	}
	return strconv.FormatInt(n, 10) + "B"
}
