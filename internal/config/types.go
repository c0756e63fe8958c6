package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/internal/duration"
)

// Duration is a time.Duration written in TOML as a string with a unit ("72h", "30s"). A bare number
// is rejected: BurntSushi/toml would otherwise read it as nanoseconds (the etcd trap).
type Duration time.Duration

// UnmarshalText parses a Go duration string such as "72h" or "1m30s".
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return fmt.Errorf("empty duration (write e.g. \"72h\")")
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return fmt.Errorf("%q: missing unit (write e.g. \"%sh\" or \"%ss\")", s, s, s)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (write e.g. \"72h\", \"30s\", \"1m30s\")", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration in the shortest form time.Duration prints.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string { return duration.Format(time.Duration(d)) }

// ByteSize is a size in bytes written in TOML as a string with an IEC unit: "512MiB", "10GiB".
// Units are powers of 1024: B, KiB, MiB, GiB, TiB. SI spellings ("10GB") are rejected with a hint,
// because nats-server reads "GB" as 1024³ while most people read it as 1000³.
type ByteSize int64

// UnmarshalText parses "10GiB", "512MiB", "1024B". "-1" means unlimited where a key allows it.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if s == "-1" {
		*b = -1
		return nil
	}
	if s == "" {
		return fmt.Errorf("empty size (write e.g. \"10GiB\")")
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return fmt.Errorf("%q: missing unit (write e.g. \"%sB\" for bytes; units are B, KiB, MiB, GiB, TiB)", s, s)
	}
	for _, u := range bytesize.Units {
		if !strings.HasSuffix(s, u.Suffix) {
			continue
		}
		num := strings.TrimSpace(strings.TrimSuffix(s, u.Suffix))
		if n := len(num); u.Suffix == "B" && n > 0 && strings.ContainsRune("KMGTk", rune(num[n-1])) {
			si := strings.ToUpper(num[n-1:]) // "10GB", "10KB": SI spelling
			return fmt.Errorf("%q: unit %sB is ambiguous, write %siB (units are powers of 1024: KiB, MiB, GiB, TiB)", s, si, si)
		}
		n, err := strconv.ParseFloat(num, 64)
		if err != nil || !(n >= 0) { // NaN too
			return fmt.Errorf("%q is not a size (write e.g. \"10GiB\", \"512MiB\")", s)
		} else if n*float64(u.Mult) >= 1<<63 {
			return fmt.Errorf("%q is too large: at most 8EiB", s)
		}
		*b = ByteSize(n * float64(u.Mult))
		return nil
	}
	return fmt.Errorf("%q has an unknown unit (write e.g. \"10GiB\"; units are B, KiB, MiB, GiB, TiB)", s)
}

// MarshalText writes the size in the largest unit dividing it exactly, so it parses back the same.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(bytesize.Exact(int64(b))), nil }

// String is the size for people: "10GiB", "1.5GiB".
func (b ByteSize) String() string { return bytesize.Format(int64(b)) }

// SyncPolicy is jetstream.sync_interval: a duration (with durability "interval", fsync in the
// background at that interval), or "always", the durability mode as files before `durability` wrote
// it. The zero value is unset.
type SyncPolicy struct {
	Always   bool
	Interval time.Duration
}

// UnmarshalText parses "always" or a duration string.
func (p *SyncPolicy) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.EqualFold(s, "always") {
		*p = SyncPolicy{Always: true}
		return nil
	}
	var d Duration
	if err := d.UnmarshalText(b); err != nil {
		return fmt.Errorf("%w, or \"always\"", err)
	}
	if d <= 0 {
		return fmt.Errorf("%q must be positive, or \"always\"", s)
	}
	*p = SyncPolicy{Interval: time.Duration(d)}
	return nil
}

// MarshalText writes "always" or the interval.
func (p SyncPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p SyncPolicy) String() string {
	if p.Always {
		return "always"
	}
	if p.Interval == 0 {
		return ""
	}
	return duration.Format(p.Interval)
}
