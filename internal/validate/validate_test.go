package validate

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const created = `{
  "type": "object",
  "required": ["order_id", "amount"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1},
    "amount": {"type": "number", "minimum": 0},
    "items": {"type": "array", "items": {"type": "object", "required": ["sku"]}}
  }
}`

func TestCheck(t *testing.T) {
	file := write(t, "created.json", created)
	v, err := Compile(map[string]string{"created": file}, Reject, func(subject string, data []byte) error {
		if strings.Contains(string(data), "forbidden") {
			return errors.New("no forbidden words")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		subject, data string
		keyword, ptr  string // "" keyword: accepted
	}{
		{"orders.created", `{"order_id":"1","amount":3}`, "", ""},
		{"orders.created", `{"order_id":"1","amount":-1}`, "minimum", "/amount"},
		{"orders.created", `{"order_id":"1"}`, "required", ""},
		{"orders.created", `{"order_id":"1","amount":1,"items":[{"sku":"a"},{}]}`, "required", "/items/1"},
		{"orders.created", `{"order_id":"1","amount":"x"}`, "type", "/amount"},
		{"orders.created", `not json`, ReasonInvalidJSON, ""},
		{"orders.created", `{"order_id":"1","amount":3} {"order_id":"2","amount":-1}`, ReasonInvalidJSON, ""},
		{"orders.created", "{\"order_id\":\"\xff\",\"amount\":3}", ReasonInvalidJSON, ""},
		{"orders.created", `{"order_id":"\ud800","amount":3}`, ReasonInvalidJSON, ""},
		// A repeated name: its last value is checked, the one the
		// processor reads.
		{"orders.created", `{"order_id":"1","amount":-1,"amount":3}`, "", ""},
		{"orders.created", `{"order_id":"1","amount":3,"amount":-1}`, "minimum", "/amount"},
		{"orders.created", `{"order_id":"1","amount":1,"note":"forbidden"}`, ReasonFunc, ""},
		{"orders.paid", `{"order_id":"1"}`, ReasonUnknownType, ""},
	} {
		err := v.Check(c.subject, []byte(c.data))
		var r *Rejection
		switch {
		case c.keyword == "" && err != nil:
			t.Errorf("%s %s: refused: %v", c.subject, c.data, err)
		case c.keyword == "":
		case !errors.As(err, &r):
			t.Errorf("%s %s: %v, want a rejection by %q", c.subject, c.data, err, c.keyword)
		case r.Keyword != c.keyword || r.Pointer != c.ptr:
			t.Errorf("%s %s: keyword %q at %q (%v), want %q at %q", c.subject, c.data, r.Keyword, r.Pointer, err, c.keyword, c.ptr)
		case c.keyword == "minimum" && (!strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "/amount") || !strings.Contains(err.Error(), `"minimum"`)):
			t.Errorf("the message names no schema, pointer or keyword: %v", err)
		}
	}
	counts := v.Counts()
	if len(counts) == 0 || counts[0].Type != "created" {
		t.Errorf("counts %+v", counts)
	}
	// Types invented by producers share one label.
	for i := range 2000 {
		v.Check("orders.t"+strings.Repeat("x", i%50)+string(rune('a'+i%26)), []byte(`{}`))
	}
	if n := len(v.Counts()); n > maxCountKeys+1 {
		t.Errorf("%d count keys", n)
	}
}

func TestCompileErrors(t *testing.T) {
	syntax := write(t, "bad.json", "{\n  \"type\": \"object\",\n  \"required\": [\"a\",]\n}")
	wrong := write(t, "wrong.json", `{"type": 5}`)
	remote := write(t, "remote.json", `{"$ref": "https://example.com/s.json"}`)
	cycle := write(t, "cycle.json", `{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`)
	_, err := Compile(map[string]string{"a": syntax, "b": wrong, "c": "/nonexistent.json", "d.e": syntax, "f": remote, "g": cycle}, "maybe", nil)
	if err == nil {
		t.Fatal("compiled")
	}
	msg := err.Error()
	for _, w := range []string{
		`validation.schemas.a = "` + syntax + `": line 3, column`,
		`validation.schemas.b = "` + wrong + `": not a valid JSON Schema`, "/type",
		`validation.schemas.c = "/nonexistent.json"`,
		`validation.schemas.d.e: "d.e" is not an event type`,
		`validation.schemas.f`,
		`validation.schemas.g = "` + cycle + `": not a valid JSON Schema`, "reference cycle", // else every event is refused
		`validation.unknown_types "maybe"`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
}

// A schema that refers to itself inside the event (a tree) is no cycle.
func TestCompileRecursiveSchema(t *testing.T) {
	tree := write(t, "tree.json", `{"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}`)
	v, err := Compile(map[string]string{"tree": tree}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Check("orders.tree", []byte(`{"children": [{"children": []}]}`)); err != nil {
		t.Error(err)
	}
	if err := v.Check("orders.tree", []byte(`{"children": [{"children": 1}]}`)); err == nil {
		t.Error("a bad subtree passed")
	}
}

// A '#' in a schema's file name is part of the name: it compiled the part of the file the rest
// named as a fragment (the fast check then passed what the library refused: a review of it).
func TestCompileFileNameWithHash(t *testing.T) {
	for _, name := range []string{"t#%2Fproperties%2Fa", "order #1.json"} {
		file := write(t, name, `{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"], "$defs": {"x": {"$ref": "#/$defs/y"}, "y": true}}`)
		v, err := Compile(map[string]string{"t": file}, "", nil)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		for _, ev := range []string{`1`, `{"a": "x"}`, `{"a": 1, "b": 1}`} {
			if err := v.Check("orders.t", []byte(ev)); err == nil {
				t.Errorf("%q: %s passed, though the schema refuses it", name, ev)
			}
		}
		if err := v.Check("orders.t", []byte(`{"a": "x", "b": 1}`)); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// A schema file, or a file it refers to, that is a FIFO would block a read for ever: check, start
// and a reload hung; it is refused, named.
func TestCompileRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ref := write(t, "ref.json", `{"$ref": "`+fifo+`"}`)
	done := make(chan error, 1)
	go func() {
		_, err := Compile(map[string]string{"a": fifo, "b": ref}, "", nil)
		done <- err
	}()
	select {
	case err := <-done:
		for _, w := range []string{`validation.schemas.a = "` + fifo + `": ` + fifo + " is not a regular file", `validation.schemas.b = "` + ref + `": not a valid JSON Schema: failing loading`} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Compile blocked on a FIFO")
	}
}

func TestDisabled(t *testing.T) {
	var v *Validator
	if v.Enabled() || v.Check("orders.x", []byte("anything")) != nil {
		t.Error("a nil validator checks")
	}
	v, err := Compile(nil, "", nil)
	if err != nil || v.Enabled() {
		t.Errorf("empty: %v %v", v.Enabled(), err)
	}
}

// Numbers the library would compare at a cost that grows with them, or
// panic on (an exponent past ±1e6: the server's read loop with it), are
// refused; those within the bound are compared.
func TestCheckBoundsNumbers(t *testing.T) {
	v, err := Compile(map[string]string{"created": write(t, "created.json", created)}, Reject, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := "1" + strings.Repeat("0", 64)
	for _, c := range []struct {
		amount string
		ok     bool
	}{
		{"1e999", true}, {"-1E-999", false}, {"12.5e+0999", true}, {strings.Repeat("9", 64), true},
		{"1e10000000", false}, {"1e1000", false}, {"1e-0001000", false}, {long, false}, {"-" + long, false},
	} {
		err := v.Check("orders.created", []byte(`{"order_id":"o-1","amount":`+c.amount+`}`))
		var r *Rejection
		switch {
		case c.ok && err != nil:
			t.Errorf("amount %.30s: %v, want it taken", c.amount, err)
		case !c.ok && !errors.As(err, &r):
			t.Errorf("amount %.30s: %v, want a refusal", c.amount, err)
		case !c.ok && c.amount != "-1E-999" && (r.Keyword != ReasonInvalidJSON || !strings.Contains(r.Message, "a number beyond")):
			t.Errorf("amount %.30s: %+v, want invalid_json naming the bound", c.amount, r)
		}
	}
}

// A reload swaps validators while publishes run: a check that loaded the old one before the swap
// and refuses after the counts were carried over is still counted, so the metric never goes back.
func TestInheritCountsKeepsLateRefusals(t *testing.T) {
	file := write(t, "created.json", created)
	old, err := Compile(map[string]string{"created": file}, Reject, nil)
	if err != nil {
		t.Fatal(err)
	}
	old.Check("orders.created", []byte(`{}`))
	v, err := Compile(map[string]string{"created": file}, Reject, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.InheritCounts(old)
	old.Check("orders.created", []byte(`{}`)) // in flight on the old one
	v.Check("orders.paid", []byte(`{}`))
	var n uint64
	for _, c := range v.Counts() {
		n += c.N
	}
	if n != 3 {
		t.Errorf("after the swap the counts hold %d refusals, want 3: %+v", n, v.Counts())
	}
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An event failing deep inside a recursive schema cost memory quadratic in its depth: the schema
// library builds an error at every level, each with a copy of the whole path (5,000 levels in 75
// KB: 670 MB, on the publisher's connection). Many failing values cost much at any depth (1 MiB:
// 260 MB). With nesting and values capped, no event, of any size, costs more than about 1 KB per
// value and schema that checks it: 2 KB here, where each object is checked by a $ref and the tree.
func TestCheckBoundsCost(t *testing.T) {
	tree := write(t, "tree.json", `{"type": "object", "properties": {"order_id": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}`)
	v, err := Compile(map[string]string{"created": tree}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// nest is items inside levels of {"children": [...]}, list n copies of item.
	nest := func(levels int, items string) string {
		return strings.Repeat(`{"children":[`, levels) + items + strings.Repeat(`]}`, levels)
	}
	list := func(item string, n int) string { return strings.Repeat(item+",", n-1) + item }
	mib := func(item string) int { return (1 << 20) / (len(item) + 1) }
	bad := `{"order_id":1}`
	deep := nest(4990, bad)           // the reviewer's event
	levels := (maxDepth - 1) / 2      // nest(levels, bad) is as deep as is checked
	atDepth := nest(levels-1, bad)    // and so is nest(1, atDepth)
	perChain := 2*(levels-1) + 2      // values in atDepth
	const bound = 2 << 10 * maxValues // 2 KB per value
	for _, c := range []struct{ name, event, want string }{
		{"the reviewer's event", deep, "nested deeper than is checked (at most 32 levels)"},
		{"1 MiB of such chains", nest(1, list(deep, mib(deep))), "nested deeper"},
		{"1 MiB of chains within the nesting", nest(1, list(atDepth, mib(atDepth))), "more values than are checked (at most 10000"},
		{"1 MiB of failing values", nest(1, list("1", mib("1"))), "more values"},
		{"chains up to both caps", nest(1, list(atDepth, (maxValues-2)/perChain)), `at /children/0/children/0/`},
		{"failing values up to the cap", nest(1, list("1", maxValues-2)), `at /children/0: keyword "type"`},
		{"failing leaves up to both caps", nest(levels, list(bad, (maxValues-2*levels)/2)), `/order_id: keyword "type"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			n := allocated(func() { err = v.Check("orders.created", []byte(c.event)) })
			var r *Rejection
			if !errors.As(err, &r) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), tree) {
				t.Errorf("%d bytes: %.300v, want a refusal naming %q", len(c.event), err, c.want)
			}
			if n > bound {
				t.Errorf("%d bytes: refusing it allocated %d MB, want at most %d MB", len(c.event), n>>20, bound>>20)
			}
			t.Logf("%d bytes: %d KB allocated", len(c.event), n>>10)
		})
	}
	// At the caps, a valid event is taken; one more level or value is refused.
	for _, c := range []struct {
		event string
		ok    bool
	}{
		{nest(maxDepth/2, ""), true},
		{nest(maxDepth/2, "{}"), false},
		{nest(1, list("{}", maxValues-2)), true},
		{nest(1, list("{}", maxValues-1)), false},
	} {
		if err := v.Check("orders.created", []byte(c.event)); (err == nil) != c.ok {
			t.Errorf("%.60s...: %.200v, want accepted %v", c.event, err, c.ok)
		}
	}
}
