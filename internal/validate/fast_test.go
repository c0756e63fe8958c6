package validate

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// compileString compiles schema as Compile does a file, for event type "t".
func compileString(t testing.TB, schema string) (*Validator, error) {
	file := filepath.Join(t.TempDir(), "t.schema.json")
	if err := os.WriteFile(file, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	return Compile(map[string]string{"t": file}, Reject, nil)
}

// verdicts are the fast check's and the library's (decode, then the schema) on ev.
func verdicts(v *Validator, ev []byte) (fastPasses, libraryPasses bool) {
	inst, err := decode(ev)
	libraryPasses = err == nil && v.schemas["t"].Validate(inst) == nil
	return v.fast["t"] != nil && v.fast["t"].valid(ev), libraryPasses
}

// alias is a definition that is another, reached while that one is compiled.
const alias = `{"$ref": "#/$defs/b", "$defs": {"b": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}, "a": {"$ref": "#/$defs/b"}}}`

func TestFastTakesCommonSchemas(t *testing.T) {
	v, err := Compile(map[string]string{"created": benchSchema}, Reject, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := v.fast["created"]; f == nil || !f.valid(benchEvent()) {
		t.Fatalf("bench/groupcommit's schema and event do not take the fast check (compiled: %v)", f != nil)
	}
	node := `{"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}`
	for _, schema := range []string{
		`{"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}, "title": "a string"}`,
		`{"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "#/$defs/a", "$defs": {"a": true}}`,
		`{"properties": {"items": {"items": {"$ref": "#/$defs/item"}}}, "$defs": {"item": {"required": ["sku"]}}}`,
		`{"$ref": "#/$defs/node", "$defs": {"node": ` + node + `}}`, // recursive, a level of the event a turn
	} {
		if v, err := compileString(t, schema); err != nil || v.fast["t"] == nil {
			t.Errorf("%s: not compiled for the fast check (%v)", schema, err)
		}
	}
	for _, schema := range []string{
		`{"$ref": "#/$defs/a", "type": "string", "$defs": {"a": true}}`, // both apply: not taken
		alias, // a is b, compiled while b is
		`{"$ref": "#/$defs/a~1b", "$defs": {"a/b": true}}`,
		`{"$id": "https://example.com/t", "$ref": "#/$defs/a", "$defs": {"a": true}}`,
		`{"$ref": "#/$defs/a", "$defs": {"a": {"$id": "https://example.com/a", "type": "string"}}}`,
		// x's ref resolves against x's $id: to its own a, not the root's
		`{"properties": {"x": {"$id": "https://example.com/x", "$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}}, "$defs": {"a": true}}`,
		`{"anyOf": [{"type": "string"}]}`,
		`{"properties": {"a": {"patternProperties": {"^x": true}}}}`,
		`{"items": {"multipleOf": 2}}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "format": "email"}`,
		`{"enum": [1, "a"]}`,
		`{"const": {"a": 1}}`,
		`{"type": "object", "unknownKeyword": 1}`,
		`{"minProperties": 1}`, // a repeated name would count twice
		`{"properties": {"a": {"properties": {"b": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}}}}`,
	} {
		v, err := compileString(t, schema)
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		if v.fast["t"] != nil || v.Slow()["t"] == "" {
			t.Errorf("%s: compiled for the fast check, which does not take it (or no keyword named: %q)", schema, v.Slow()["t"])
		}
	}
	// Slow names the first keyword refused, as a JSON pointer into the schema.
	for schema, why := range map[string]string{
		`{"anyOf": [{"type": "string"}]}`:                                                           "/anyOf",
		`{"properties": {"a": {"patternProperties": {"^x": true}}}}`:                                "/properties/a/patternProperties",
		`{"type": "array", "items": {"type": "integer", "multipleOf": 2}}`:                          "/items/multipleOf",
		`{"$ref": "#/$defs/a", "type": "string", "$defs": {"a": true}}`:                             "/type",
		`{"$ref": "#/$defs/a~1b", "$defs": {"a/b": true}}`:                                          "/$ref",
		`{"properties": {"a/b~": {"not": true}}}`:                                                   "/properties/a~1b~0/not",
		`{"$ref": "#/$defs/a", "$defs": {"a": {"$id": "https://example.com/a", "type": "string"}}}`: "/$defs/a/$id",
		`{"type": "object", "required": ["a"]}`:                                                     "",
	} {
		v, err := compileString(t, schema)
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		if got, listed := v.Slow()["t"]; got != why || listed != (why != "") {
			t.Errorf("%s: Slow names %q (listed %v), want %q", schema, got, listed, why)
		}
	}
}

// TestFastPassesOnlyWhatTheLibraryPasses: the cases where the two could part, then random schemas
// of the keywords fast takes and events drawn from them (same seed every run).
func TestFastPassesOnlyWhatTheLibraryPasses(t *testing.T) {
	node := `{"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}`
	for _, c := range []struct {
		schema, event string
		fast          bool // whether the fast check passes it (the library does where it does)
	}{
		{`{"minimum": 0}`, `0`, true},
		{`{"minimum": 0}`, `-0`, true},
		{`{"minimum": 0.1}`, `0.1`, true},
		{`{"minimum": 0.1}`, `0.10000000000000001`, false}, // the same float64, a greater number
		{`{"maximum": 0.1}`, `0.10000000000000001`, false},
		{`{"minimum": 9007199254740993}`, `9007199254740992`, false}, // the same float64, less
		{`{"exclusiveMinimum": 1}`, `1`, false},
		{`{"exclusiveMaximum": 1}`, `0.99999999999999999`, false},
		{`{"minimum": 1}`, `1e0`, false},
		{`{"minimum": 1}`, `1e999`, true},
		{`{"maximum": 1}`, `-1e999`, true},
		{`{"type": "integer"}`, `2`, true},
		{`{"type": "integer"}`, `2.0`, false}, // an integer to the library; fast leaves it to it
		{`{"type": "number", "maximum": 100}`, `1e2`, false},
		{`{"minLength": 2}`, `"\u00e9\u00e9"`, true},
		{`{"maxLength": 1}`, `"\ud83d\ude00"`, true}, // one code point
		{`{"maxLength": 1}`, `"é"`, true},
		// After an ASCII name, a string that is not ASCII is counted in characters, not bytes.
		{`{"properties": {"n": {"minLength": 3}}}`, `{"n": "éé"}`, false},
		{`{"properties": {"n": {"minLength": 3}}}`, `{"n": "\u00e9\u00e9"}`, false},
		{`{"properties": {"n": {"minLength": 3}}}`, `{"n": "abc"}`, true},
		{`{"enum": ["a\nb"]}`, `"a\nb"`, true},
		{`{"pattern": "^[A-Z]{3}$"}`, `"EUR"`, true},
		{`{"pattern": "^[A-Z]{3}$"}`, `"eur"`, false},
		{`{"pattern": "^\\p{L}$", "type": "string"}`, `"\u00e9"`, true},
		{`{"pattern": "^a$"}`, `"a\n"`, false},
		{`{"enum": ["EUR", null, true]}`, `true`, true},
		{`{"const": "x"}`, `"y"`, false},
		{`{"required": ["a"]}`, `{"\u0061": 1}`, true},
		{`{"required": ["a", "b"]}`, `{"a": 1}`, false},
		{`{"maxProperties": 1}`, `{"a": 1, "a": 2}`, false}, // a repeated name: the library decides
		{`{"maxProperties": 1}`, `{"a": 1, "\u0061": 2}`, false},
		{`{"minProperties": 2}`, `{"a": 1, "a": 2}`, false}, // the library sees one name
		{`{"properties": {"a": {"type": "string"}}}`, `{"a": 1, "a": "x"}`, false},
		{`{"additionalProperties": false, "properties": {"a": true}}`, `{"a": 1}`, true},
		{`{"additionalProperties": {"type": "string"}, "required": ["b"]}`, `{"b": 1}`, false},
		{`{"items": {"type": "string"}, "maxItems": 1}`, `["x"]`, true},
		{`{"$ref": "#/$defs/n", "$defs": {"n": ` + node + `}}`, `{"kids": [{"kids": [{}]}]}`, true},
		{alias, `{"x": 1}`, false},
		{`{"$ref": "#/$defs/n", "$defs": {"n": ` + node + `}}`, `{"kids": [{"kids": [1]}]}`, false},
		{`{"$ref": "#/$defs/n", "$defs": {"n": ` + node + `}}`, strings.Repeat(`{"kids": [`, 20) + strings.Repeat(`]}`, 20), false},
		{`{"type": "string"}`, `"\ud800"`, false}, // a lone surrogate: not JSON to decode
		{`{"type": "string"}`, `"x" "y"`, false},
		{`true`, strings.Repeat("[", 40) + strings.Repeat("]", 40), false}, // past maxDepth
		{`false`, `1`, false},
	} {
		v, err := compileString(t, c.schema)
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		fast, lib := verdicts(v, []byte(c.event))
		if fast != c.fast || fast && !lib {
			t.Errorf("schema %s, event %s: fast check %v (want %v), library %v", c.schema, c.event, fast, c.fast, lib)
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	var schemas, fastPassed, libraryPassed int
	for range 3000 {
		doc := genSchema(r, 0)
		if m, ok := doc.(map[string]any); ok && r.IntN(4) == 0 {
			m["$schema"] = "https://json-schema.org/draft/2020-12/schema"
		}
		schema, _ := json.Marshal(doc)
		v, err := compileString(t, string(schema))
		if refs := strings.Contains(string(schema), "$ref"); (err != nil || v.fast["t"] == nil) && !refs {
			t.Fatalf("%s: not compiled for the fast check (%v)", schema, err)
		} else if err != nil || v.fast["t"] == nil {
			continue // a loop through $ref: the library's, or one fast leaves to it
		}
		schemas++
		root, _ := doc.(map[string]any)
		genDefs, _ = root["$defs"].(map[string]any)
		for range 20 {
			ev := genEvent(r, doc, 0)
			fast, lib := verdicts(v, []byte(ev))
			if fast && !lib {
				t.Fatalf("schema %s, event %s: the fast check passes what the library refuses", schema, ev)
			}
			fastPassed += map[bool]int{true: 1}[fast]
			libraryPassed += map[bool]int{true: 1}[lib]
		}
	}
	t.Logf("%d schemas, the library passed %d events, the fast check %d of them", schemas, libraryPassed, fastPassed)
	if fastPassed < libraryPassed/2 {
		t.Fatalf("the fast check passed %d of the %d events the library passed: it decides too little", fastPassed, libraryPassed)
	}
}

// numbers are literals that sit on, or a rounding away from, one another.
var numbers = []string{"0", "-0", "1", "-1", "2", "0.1", "0.10000000000000001", "0.30000000000000004", "1.5",
	"100", "9007199254740992", "9007199254740993", "1e2", "2.0", "0.5e1", "1e999", "-1e999", "1e-999"}

var fastStrings = []string{`""`, `"a"`, `"ab"`, `"é"`, `"\u00e9x"`, `"\ud83d\ude00"`, `"EUR"`, `"a\nb"`}

// genDefs are the $defs of the schema genEvent draws from.
var genDefs map[string]any

func genSchema(r *rand.Rand, depth int) any {
	if r.IntN(10) == 0 {
		return r.IntN(4) > 0
	}
	if depth > 0 && r.IntN(12) == 0 { // maybe a loop, maybe with no level of the event a turn
		return map[string]any{"$ref": []string{"#/$defs/d0", "#/$defs/d1"}[r.IntN(2)]}
	}
	s := map[string]any{}
	pick := func(p int) bool { return r.IntN(100) < p }
	if pick(60) {
		types := []any{}
		for _, t := range typeNames {
			if pick(25) {
				types = append(types, t)
			}
		}
		if len(types) > 0 {
			s["type"] = types
		}
		if len(types) == 1 && pick(50) {
			s["type"] = types[0]
		}
	}
	if depth < 3 && pick(40) {
		props := map[string]any{}
		for _, name := range []string{"a", "b", "c"} {
			if pick(50) {
				props[name] = genSchema(r, depth+1)
			}
		}
		s["properties"] = props
	}
	if pick(30) {
		req := []any{}
		for _, name := range []string{"a", "b", "d"} {
			if pick(50) {
				req = append(req, name)
			}
		}
		s["required"] = req
	}
	if depth < 3 && pick(20) {
		s["additionalProperties"] = genSchema(r, depth+1)
	}
	if depth < 3 && pick(30) {
		s["items"] = genSchema(r, depth+1)
	}
	for _, k := range limitNames {
		if pick(10) && k != "minProperties" {
			s[k] = r.IntN(4)
		}
	}
	for _, k := range boundNames {
		if pick(15) {
			s[k] = json.Number(numbers[r.IntN(len(numbers)-3)]) // not past float64's range
		}
	}
	if pick(10) {
		enum := []any{}
		for _, e := range append(fastStrings, "true", "null") {
			if pick(40) {
				var v any
				json.Unmarshal([]byte(e), &v)
				enum = append(enum, v)
			}
		}
		s["enum"] = enum
	} else if pick(5) {
		s["const"] = "a"
	}
	if pick(10) {
		s["pattern"] = []string{"^a", "b$", "^\\p{L}+$", "^[A-Z]{3}$", "."}[r.IntN(5)]
	}
	if pick(10) {
		s["title"] = "t"
	}
	if depth == 0 && pick(30) {
		s["$defs"] = map[string]any{"d0": genSchema(r, 1), "d1": genSchema(r, 1)}
	}
	return s
}

// genEvent draws a JSON text from schema, mostly of its types and names, some names repeated.
func genEvent(r *rand.Rand, schema any, depth int) string {
	s, _ := schema.(map[string]any)
	if ref, ok := s["$ref"].(string); ok {
		s, _ = genDefs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
	}
	kind := typeNames[r.IntN(len(typeNames))]
	if t, ok := s["type"].(string); ok && r.IntN(5) > 0 {
		kind = t
	} else if ts, ok := s["type"].([]any); ok && len(ts) > 0 && r.IntN(5) > 0 {
		kind = ts[r.IntN(len(ts))].(string)
	}
	if depth > 3 {
		kind = "null"
	}
	switch kind {
	case "object":
		var members []string
		props, _ := s["properties"].(map[string]any)
		for _, name := range []string{"a", "b", "c", "d", "a"} {
			if r.IntN(2) == 0 {
				key := fmt.Sprintf("%q", name)
				if r.IntN(5) == 0 {
					key = fmt.Sprintf(`"\u%04x"`, name[0])
				}
				sub := cmpSel[any](props[name] != nil, props[name], s["additionalProperties"])
				members = append(members, key+":"+genEvent(r, sub, depth+1))
			}
		}
		return "{" + strings.Join(members, ",") + "}"
	case "array":
		var items []string
		for range r.IntN(4) {
			items = append(items, genEvent(r, s["items"], depth+1))
		}
		return "[" + strings.Join(items, ",") + "]"
	case "number", "integer":
		return numbers[r.IntN(len(numbers))]
	case "string":
		return fastStrings[r.IntN(len(fastStrings))]
	case "boolean":
		return []string{"true", "false"}[r.IntN(2)]
	}
	return "null"
}

// FuzzFast: whatever the schema and the event, the fast check passes only what the library passes.
//
//	go test -run '^$' -fuzz FuzzFast -fuzztime 5m ./internal/validate
func FuzzFast(f *testing.F) {
	schema, err := os.ReadFile(benchSchema)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(schema), benchEvent())
	f.Add(`{"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "minimum": 1}}}`, []byte(`{"a": 1}`))
	f.Add(`{"items": {"enum": ["x", null]}, "minItems": 1}`, []byte(`["x", null]`))
	f.Add(`{"type": "string", "maxLength": 2}`, []byte(`"\u00e9\u00e9"`))
	f.Add(`{"properties": {"c": {"pattern": "^[A-Z]{3}$"}}}`, []byte(`{"c": "EUR"}`))
	f.Add(`{"$ref": "#/$defs/n", "$defs": {"n": {"properties": {"k": {"items": {"$ref": "#/$defs/n"}}}}}}`, []byte(`{"k": [{"k": []}]}`))
	f.Fuzz(func(t *testing.T, schema string, ev []byte) {
		v, err := compileString(t, schema)
		if err != nil {
			return
		}
		if fast, lib := verdicts(v, ev); fast && !lib {
			t.Fatalf("schema %s, event %q: the fast check passes what the library refuses", schema, ev)
		}
	})
}

// A root $id is what the library resolves "#/$defs/a" against, and the resolved URL may name
// another file (an empty query dropped, file:/ for file:///): its a, not this file's.
func TestFastRefWithRootIDIsTheLibrarys(t *testing.T) {
	dir := t.TempDir()
	other := `{"$defs": {"a": {"type": "string"}}}`
	if err := os.WriteFile(filepath.Join(dir, "other.schema.json"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"other.schema.json?", "file:" + filepath.Join(dir, "other.schema.json")} {
		file := filepath.Join(dir, "t.schema.json")
		schema := `{"$id": "` + id + `", "properties": {"n": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "integer"}}}`
		if err := os.WriteFile(file, []byte(schema), 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := Compile(map[string]string{"t": file}, Reject, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fast, lib := verdicts(v, []byte(`{"n": 1}`)); fast || lib {
			t.Errorf(`%s, event {"n": 1}: fast check %v, library %v; want both false (the other file's a)`, schema, fast, lib)
		}
	}
}

// The fast check reads events itself: on any schema it takes, it passes only what decode (jsontext,
// the library's path) reads. With the schema {}, the two agree on every input here.
func TestFastReadsAsDecodeDoes(t *testing.T) {
	deep := strings.Repeat("[", maxDepth-2) + strings.Repeat("]", maxDepth-2)
	inputs := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e3`, `-1E-2`, `true`, `false`, `null`, ` {"a" : [1, 2.0, "x"] } `,
		`{"a":1,"a":2}`, `"\u00e9\ud83d\ude00"`, `"a\"b\\c\/d\b\f\n\r\t"`, "\"\x7f\"", `"é"`, deep, "[" + deep + "]",
		// refused by both
		``, ` `, `{`, `}`, `[1,]`, `[,1]`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `["a":1]`,
		`01`, `1.`, `.5`, `+1`, `-`, `1e`, `1e+`, `0x10`, `1 2`, `{} {}`, `tru`, `truex`, `nul`, `NaN`, `Infinity`,
		"\"a\x01b\"", "\"\t\"", `"\x"`, `"\u12"`, `"\ud800"`, `"\udc00\ud800"`, "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
		`"unterminated`, `"a\"`, "\xef\xbb\xbf{}", "{}\x00", "[1]]", `{"a":1}}`, strings.Repeat("[", maxDepth+1),
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range 20000 { // mutations of a valid event: a byte changed, dropped or doubled
		ev := benchEvent()
		i := r.IntN(len(ev))
		switch r.IntN(3) {
		case 0:
			ev[i] = "\"\\{}[]:,.-+eE0123456789 \x00\x1f\x80\xffatrufnl"[r.IntN(31)]
		case 1:
			ev = append(ev[:i], ev[i+1:]...)
		default:
			ev = append(ev[:i+1], ev[i:]...)
		}
		inputs = append(inputs, string(ev))
	}
	v, err := compileString(t, `{}`)
	if err != nil || v.fast["t"] == nil {
		t.Fatalf("{} not compiled for the fast check: %v", err)
	}
	for _, in := range inputs {
		_, err := decode([]byte(in))
		if fast := v.fast["t"].valid([]byte(in)); fast != (err == nil) {
			t.Errorf("%q: the fast check reads it %v, decode %v", in, fast, err)
		}
	}
}

// A bound that is not a number, in a part of the schema the library does not compile (a draft-07
// $defs that a ref under a nested $id does not reach), is refused by the fast check's compile, not
// a panic.
func TestFastCompileRefusesABoundThatIsNoNumber(t *testing.T) {
	for _, bad := range []string{`"abc"`, `true`} {
		schema := `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"a":{"$id":"http://example.com/other",` +
			`"$defs":{"x":{}},"properties":{"b":{"$ref":"#/$defs/x"}}}},"$defs":{"x":{"minimum":` + bad + `}}}`
		if v, err := compileString(t, schema); err != nil || v.fast["t"] != nil {
			t.Errorf("%s: %v, fast check %v; want compiled, for the library alone", schema, err, v.fast["t"] != nil)
		}
	}
}

// literal's value of a short number is ParseFloat's.
func TestLiteralValueIsParseFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		s := strconv.FormatInt(r.Int64N(1e15)-5e14, 10)
		if r.IntN(2) == 0 {
			s = strconv.FormatFloat((r.Float64()-0.5)*math.Pow(10, float64(r.IntN(12)-4)), 'f', r.IntN(17), 64)
		}
		want, _ := strconv.ParseFloat(s, 64)
		if _, _, got, ok := literal([]byte(s)); ok && (got != want || math.Signbit(got) != math.Signbit(want)) {
			t.Fatalf("literal(%s) = %v, ParseFloat %v", s, got, want)
		}
	}
}

// shortNumber reads what number reads and values it as literal does, or leaves it to them: over
// every string of up to 6 characters from the grammar's alphabet, and long and random ones.
func TestShortNumberIsNumberAndLiteral(t *testing.T) {
	const alphabet = "-0159.eE+x"
	check := func(s string) {
		t.Helper()
		d := []byte(s + ",")
		w := walk{data: d}
		raw, integer, x, ok := w.shortNumber()
		if !ok {
			if w.pos != 0 {
				t.Fatalf("%q: shortNumber declined but moved to %d", s, w.pos)
			}
			return
		}
		v := walk{data: d}
		wraw, wok := v.number()
		winteger, wexact, wx, wshort := literal(wraw)
		if !wok || !wexact || !wshort || string(raw) != string(wraw) || w.pos != v.pos || integer != winteger ||
			x != wx || math.Signbit(x) != math.Signbit(wx) {
			t.Fatalf("%q: shortNumber %q %v %v at %d; number and literal %q %v %v %v %v %v at %d",
				s, raw, integer, x, w.pos, wraw, wok, winteger, wexact, wx, wshort, v.pos)
		}
	}
	var all func(prefix string, n int)
	all = func(prefix string, n int) {
		if prefix != "" && (prefix[0] == '-' || prefix[0] >= '0' && prefix[0] <= '9') {
			check(prefix)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			all(prefix+string(c), n-1)
		}
	}
	all("", 6)
	r := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		s := strconv.FormatInt(r.Int64N(1e18)>>r.IntN(60), 10)
		if r.IntN(2) == 0 {
			s = strconv.FormatFloat((r.Float64()-0.5)*math.Pow(10, float64(r.IntN(20)-8)), 'f', r.IntN(19), 64)
		}
		check(s)
	}
}

// FuzzFastReads: with the schema {}, the fast check reads what decode reads, and nothing else.
func FuzzFastReads(f *testing.F) {
	f.Add(benchEvent())
	f.Add([]byte(`{"a":[1,-0.5e+3,"\u00e9\n",true,null,{}]}`))
	v, err := compileString(f, `{}`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ev []byte) {
		if _, err := decode(ev); v.fast["t"].valid(ev) != (err == nil) {
			t.Fatalf("%q: the fast check reads it %v, decode %v", ev, !(err == nil), err)
		}
	})
}
