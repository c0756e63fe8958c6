package main

import (
	"strings"
	"testing"
)

func compileAll(t testing.TB) map[string]checker {
	out := map[string]checker{}
	for _, l := range libs {
		c, err := l.compile(mustSchema())
		if err != nil {
			t.Fatalf("%s: compile: %v", l.name, err)
		}
		out[l.name] = c
	}
	return out
}

// TestEvents: the bench event passes, each invalid one fails; prints detail.
func TestEvents(t *testing.T) {
	ev := benchEvent()
	if len(ev) != 1024 {
		t.Fatalf("event is %d bytes", len(ev))
	}
	cs := compileAll(t)
	for _, l := range libs {
		c := cs[l.name]
		if err := c.whole(ev); err != nil {
			t.Errorf("%s: valid event refused: %v", l.name, err)
		}
		for _, name := range []string{"amount -1", "qty 1.5 (item 3)", "currency XXX"} {
			err := c.whole(invalidEvents()[name])
			if err == nil {
				t.Errorf("%s: %s: ACCEPTED (should be refused)", l.name, name)
				continue
			}
			t.Logf("%-40s %-17s %s", l.name, name, trunc(err.Error()))
		}
	}
}

func trunc(s string) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// TestExact: number probes, each library as wired above; the verdicts are
// logged (-v), and a wrong one fails for the library orderstore uses.
func TestExact(t *testing.T) {
	for _, l := range libs {
		for _, p := range probes {
			c, err := l.compile([]byte(p.schema))
			if err != nil {
				t.Logf("%-40s %-38s compile error: %v", l.name, p.name, err)
				continue
			}
			err = c.whole([]byte(p.inst))
			got := err == nil
			verdict := "ok"
			if got != p.valid {
				verdict = "WRONG"
				if strings.HasPrefix(l.name, "santhosh") {
					// The library orderstore uses must compare exactly.
					t.Errorf("%s: %s: valid=%v, want %v", l.name, p.name, got, p.valid)
				}
			}
			t.Logf("%-40s %-38s %-5s (%v)", l.name, p.name, verdict, trunc(errString(err)))
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "valid"
	}
	return err.Error()
}

func BenchmarkWhole(b *testing.B) {
	ev := benchEvent()
	cs := compileAll(b)
	for _, l := range libs {
		c := cs[l.name]
		b.Run(name(l.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.whole(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWholeInvalid(b *testing.B) {
	ev := invalidEvents()["qty 1.5 (item 3)"]
	cs := compileAll(b)
	for _, l := range libs {
		c := cs[l.name]
		b.Run(name(l.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.whole(ev); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	ev := benchEvent()
	cs := compileAll(b)
	for _, l := range libs {
		c := cs[l.name]
		if c.decode == nil {
			continue
		}
		b.Run(name(l.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidate(b *testing.B) {
	ev := benchEvent()
	cs := compileAll(b)
	for _, l := range libs {
		c := cs[l.name]
		if c.validate == nil {
			continue
		}
		inst, err := c.decode(ev)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name(l.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.validate(inst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func name(s string) string {
	r := strings.NewReplacer(" ", "_", "(", "", ")", "", "+", "_")
	return r.Replace(s)
}
