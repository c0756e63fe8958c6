package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 1536: "1.5KiB", 10 << 30: "10GiB", 1536 << 20: "1.5GiB", -1: "unlimited"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExact(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1000: "1000B", 1024: "1KiB", 1536: "1536B", 10 << 30: "10GiB", 1536 << 20: "1536MiB", -1: "-1"} {
		if got := Exact(n); got != want {
			t.Errorf("Exact(%d) = %q, want %q", n, got, want)
		}
	}
}
