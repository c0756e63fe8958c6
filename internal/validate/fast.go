package validate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// fast is a schema of the common keywords below (draft 2020-12; local $refs, no combinators)
// checked as the event is read, building nothing: 1.1 µs for bench/groupcommit's 1 KiB event where
// the library's check costs 23 (bench/README.md, "The fast check reads the event itself").
// It only ever passes an event: where it does not (an invalid event, a number it cannot compare
// exactly, a bound of decode), the library decides, with its verdict and error.
// TestFastPassesOnlyWhatTheLibraryPasses and FuzzFast hold it to that.
type fast struct {
	never             bool                // the schema false
	types             uint8               // 1 << the index in typeNames of each; 0 for any
	props             map[string]fastProp // properties, and required names
	few               []namedProp         // the same, looked up in turn, where there are at most 8
	required          uint64              // the bits of the required names
	additional, items *fast               // nil for any
	limits            [6]int              // of limitNames; -1 for none
	bounds            [4]*bound           // of boundNames
	enum              []any               // strings, booleans and nil only; nil for any
	pattern           *regexp.Regexp      // compiled as the library does (Go's regexp); nil for none
}

type fastProp struct {
	s   *fast // nil: additionalProperties applies
	bit uint64
}

type namedProp struct {
	name string
	fastProp
}

func (s *fast) prop(name []byte) fastProp {
	for _, p := range s.few {
		if p.name == string(name) {
			return p.fastProp
		}
	}
	if len(s.props) > 8 {
		return s.props[string(name)]
	}
	return fastProp{}
}

// bound is a minimum or maximum; exact as literal says.
type bound struct {
	f     float64
	exact bool
}

const tNull, tBoolean, tObject, tArray, tNumber, tInteger, tString = 1, 2, 4, 8, 16, 32, 64 // typeNames

var (
	typeNames  = []string{"null", "boolean", "object", "array", "number", "integer", "string"}
	limitNames = []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
	boundNames = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
	// Keywords that assert nothing as schemas are compiled here: format is not asserted in draft
	// 2020-12, and $defs is only reached through $ref.
	annotations = []string{"$comment", "$defs", "title", "description", "default", "examples",
		"deprecated", "readOnly", "writeOnly", "format"}
	anything = newFast()
)

func newFast() *fast {
	return &fast{props: map[string]fastProp{}, limits: [6]int{-1, -1, -1, -1, -1, -1}}
}

// compileFast compiles doc (as jsonschema.UnmarshalJSON gives it), or returns nil and the JSON
// pointer of the first keyword (in the order of names) or value it does not take; the walk stops
// there.
func compileFast(doc any) (f *fast, why string) {
	defer func() { // a schema the library took must not crash check, start-up or a reload here
		if r := recover(); r != nil {
			f, why = nil, fmt.Sprint("/ (", r, ")")
		}
	}()
	c := fastCompiler{root: doc, defs: map[string]*fast{}, open: map[*fast]int{}}
	s := c.compile(doc, true, 0, "")
	return s, cmpSel(s == nil, cmp.Or(c.why, "/"), "")
}

// fastCompiler resolves "$ref": "#/$defs/<name>" (alone beside annotations) to the root's $defs,
// each compiled once. depth counts the properties, additionalProperties and items entered: a ref
// back to a definition being compiled (open) is taken only from deeper, so that each turn of the
// loop reads a level of the event.
type fastCompiler struct {
	root any
	defs map[string]*fast
	open map[*fast]int // the depth each was entered at
	why  string        // the first keyword refused
}

func (c *fastCompiler) ref(ref any, depth int) *fast {
	str, _ := ref.(string)
	name, isLocal := strings.CutPrefix(str, "#/$defs/")
	root, _ := c.root.(map[string]any)
	defs, _ := root["$defs"].(map[string]any)
	def, found := defs[name]
	s := c.defs[name]
	switch entered, open := c.open[s]; {
	// A root $id is where the library resolves the ref from, which may name another file.
	case !isLocal || !found || root["$id"] != nil || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != "":
		return nil
	case s == nil:
		s = newFast()
		c.defs[name], c.open[s] = s, depth
		d := c.compile(def, false, depth, "/$defs/"+name)
		delete(c.open, s)
		if _, alias := c.open[d]; d == nil || alias { // nil, or another definition not compiled yet
			return nil
		}
		*s = *d
	case open && depth <= entered:
		return nil
	}
	return s
}

func (c *fastCompiler) compile(doc any, root bool, depth int, path string) *fast {
	s, ok := newFast(), true
	obj, isObj := doc.(map[string]any)
	if b, isBool := doc.(bool); isBool || !isObj {
		s.never = !b
		return cmpSel(isBool, s, nil)
	}
	if ref, isRef := obj["$ref"]; isRef {
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ok = c.keep(ok, k == "$ref" || slices.Contains(annotations, k) || root && k == "$schema" && draft2020(obj[k]), path, k)
		}
		if !ok {
			return nil
		}
		r := c.ref(ref, depth)
		c.keep(ok, r != nil, path, "$ref")
		return r
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v, was := obj[k], ok
		n, _ := v.(json.Number)
		switch a, isArr := v.([]any); k {
		case "$schema":
			ok = ok && root && draft2020(v)
		case "$id":
			ok = ok && root // another resource: a $ref within it resolves against it
		case "type":
			for _, t := range cmpSel(isArr, a, []any{v}) {
				name, _ := t.(string)
				i := slices.Index(typeNames, name)
				ok, s.types = ok && i >= 0, s.types|1<<max(i, 0)
			}
		case "properties":
			m, isMap := v.(map[string]any)
			ok = ok && isMap
			for _, name := range slices.Sorted(maps.Keys(m)) { // in order: the first refused is named
				p := s.props[name]
				p.s = c.compile(m[name], false, depth+1, path+"/properties/"+escapeToken(name))
				if s.props[name], ok = p, ok && p.s != nil; !ok {
					break
				}
			}
		case "required":
			ok = ok && len(a) <= 64
			for i, e := range a {
				name, isStr := e.(string)
				p := s.props[name]
				p.bit, s.required, ok = 1<<i, s.required|1<<i, ok && isStr
				s.props[name] = p
			}
		case "pattern":
			str, _ := v.(string)
			re, err := regexp.Compile(str)
			s.pattern, ok = re, ok && err == nil
		case "additionalProperties", "items":
			sub := c.compile(v, false, depth+1, path+"/"+k)
			ok = ok && sub != nil
			*cmpSel(k == "items", &s.items, &s.additional) = sub
		case "enum", "const":
			ok = ok && s.enum == nil && (isArr || k == "const")
			s.enum = cmpSel(k == "const", []any{v}, a)
			for _, e := range s.enum {
				_, isStr := e.(string)
				_, isBool := e.(bool)
				ok = ok && (isStr || isBool || e == nil)
			}
		default:
			if i := slices.Index(limitNames, k); i >= 0 {
				l, err := strconv.Atoi(string(n))
				s.limits[i], ok = l, ok && err == nil && l >= 0 && k != "minProperties"
			} else if i := slices.Index(boundNames, k); i >= 0 {
				f, err := strconv.ParseFloat(string(n), 64)
				_, exact, _, _ := literal([]byte(n))
				s.bounds[i], ok = &bound{f, exact}, ok && err == nil
			} else {
				ok = ok && slices.Contains(annotations, k)
			}
		}
		if !c.keep(was, ok, path, k) {
			return nil // the walk stops at the first keyword refused
		}
	}
	for name, p := range s.props {
		if len(s.props) <= 8 {
			s.few = append(s.few, namedProp{name, p})
		}
	}
	return s
}

// keep returns was && ok, noting path/k as the first keyword refused where ok turned it false.
func (c *fastCompiler) keep(was, ok bool, path, k string) bool {
	if was && !ok && c.why == "" {
		c.why = path + "/" + escapeToken(k)
	}
	return was && ok
}

// escapeToken writes a name as a JSON pointer's token.
var escapeToken = strings.NewReplacer("~", "~0", "/", "~1").Replace

func draft2020(v any) bool {
	return v == "https://json-schema.org/draft/2020-12/schema" || v == "https://json-schema.org/draft/2020-12/schema#"
}

func cmpSel[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

// literal tells of a number as written whether it is an integer (no fraction or exponent) and
// whether it is exact: at most 64 characters, no exponent and at most 15 significant digits, so
// that two exact numbers are equal where their float64s are. Where it has at most 15 digits and no
// exponent (short), x is its value: ParseFloat's, since its digits and the power of ten are exact
// float64s and their quotient is correctly rounded.
func literal(n []byte) (integer, exact bool, x float64, short bool) {
	first, last, digits, frac := -1, 0, 0, 0 // the first and last nonzero digit's place, the digits
	var m int64
	integer = true
	for _, c := range n {
		switch {
		case c > '0' && c <= '9':
			first, last = cmpSel(first < 0, digits, first), digits
			fallthrough
		case c == '0':
			digits, m, frac = digits+1, m*10+int64(c-'0'), frac+cmpSel(integer, 0, 1)
		case c == '.':
			integer = false
		case c == 'e' || c == 'E':
			return false, false, 0, false
		}
	}
	exact = len(n) <= 64 && last-first < 15
	if digits > 15 {
		return integer, exact, 0, false
	}
	x = float64(m) / pow10[frac]
	return integer, exact, cmpSel(len(n) > 0 && n[0] == '-', -x, x), true
}

var pow10 = [16]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// valid reports that data is one JSON value that s passes and decode takes; false means only that
// the library must decide. It reads data itself, as strictly as decode's jsontext (RFC 8259, UTF-8
// only, a repeated name checked each time, as the walk counts it: it does not take minProperties).
func (s *fast) valid(data []byte) bool {
	w := walk{data: data}
	return s.value(&w) && w.peek() == 0 && w.pos == len(data)
}

// walk reads an event for fast: data at pos, within depth objects and arrays.
type walk struct {
	data          []byte
	pos, depth, n int    // n: the values read
	buf           []byte // a string with escapes, unquoted
	ascii         bool   // the last string read is ASCII
}

// peek skips whitespace and returns the byte at pos, 0 at the end.
func (w *walk) peek() byte {
	for ; w.pos < len(w.data); w.pos++ {
		if c := w.data[w.pos]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// runes counts the characters of str, the last string read.
func (w *walk) runes(str []byte) int {
	if w.ascii {
		return len(str)
	}
	return utf8.RuneCount(str)
}

// str reads the string at pos (its quote) and returns it unquoted.
func (w *walk) str() ([]byte, bool) {
	d, i := w.data, w.pos+1
	// One pass, 8 bytes at a time, to the first quote, backslash, control or non-ASCII byte: the
	// end of most strings.
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	j := i
	for ; j+8 <= len(d); j += 8 {
		x := binary.LittleEndian.Uint64(d[j:])
		q, b := x^ones*'"', x^ones*'\\'
		if ((x-ones*0x20)&^x|(q-ones)&^q|(b-ones)&^b|x)&highs != 0 {
			break
		}
	}
	for ; j < len(d) && d[j] != '\\' && d[j] >= 0x20 && d[j] < 0x80; j++ {
		if d[j] == '"' {
			w.pos, w.ascii = j+1, true
			return d[i:j], true
		}
	}
	w.ascii = false
	if end := bytes.IndexByte(d[i:], '"') + i; end >= i {
		if esc, ok := text(d[i:end]); !esc {
			w.pos = end + 1
			return d[i:end], ok
		}
	}
	for ; i < len(d) && d[i] != '"'; i++ { // escapes: the quote that ends it
		i += cmpSel(d[i] == '\\', 1, 0)
	}
	if i >= len(d) {
		return nil, false
	}
	raw := d[w.pos : i+1]
	w.pos = i + 1
	var err error
	w.buf, err = jsontext.AppendUnquote(w.buf[:0], raw)
	return w.buf, err == nil
}

// text reports whether s holds a '\\' (esc) and, if not, that it holds no control character and
// is UTF-8.
func text(s []byte) (esc, ok bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 { // 8 bytes at a time while each is printable ASCII but '\\'
		x := binary.LittleEndian.Uint64(s[i:])
		if b := x ^ ones*'\\'; ((x-ones*0x20)&^x|(b-ones)&^b|x)&highs != 0 {
			break
		}
	}
	ascii := true
	for _, c := range s[i:] {
		if c == '\\' || c < 0x20 {
			return c == '\\', false
		}
		ascii = ascii && c < 0x80
	}
	return false, ascii || utf8.Valid(s[i:])
}

// shortNumber reads and values the number at pos in one pass, as number and literal do, where it
// has at most 15 digits and no exponent (most numbers); else it moves nothing and returns !ok.
func (w *walk) shortNumber() (raw []byte, integer bool, x float64, ok bool) {
	d, i := w.data, w.pos
	neg := d[i] == '-'
	i += cmpSel(neg, 1, 0)
	var m int64
	start, dot := i, -1
	for ; i < len(d); i++ {
		switch c := d[i]; {
		case c >= '0' && c <= '9':
			m = m*10 + int64(c-'0')
		case c == '.' && dot < 0:
			dot = i
		default:
			goto end
		}
	}
end:
	frac := cmpSel(dot < 0, 0, i-dot-1)
	digits := i - start - cmpSel(dot < 0, 0, 1)
	if digits == 0 || digits > 15 || dot == start || frac == 0 && dot >= 0 ||
		d[start] == '0' && i > start+1 && d[start+1] != '.' || i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		return nil, false, 0, false // to number and literal: their errors, exponents, long numbers
	}
	x = float64(m) / pow10[frac]
	raw, w.pos = d[w.pos:i], i
	return raw, dot < 0, cmpSel(neg, -x, x), true
}

// number reads the number at pos, by RFC 8259's grammar.
func (w *walk) number() ([]byte, bool) {
	d, i := w.data, w.pos
	digits := func() bool {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > j
	}
	i += cmpSel(d[i] == '-', 1, 0)
	ok := i < len(d) && d[i] == '0'
	if ok {
		i++
	} else {
		ok = digits()
	}
	if ok && i < len(d) && d[i] == '.' {
		i++
		ok = digits()
	}
	if ok && i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		i += cmpSel(i < len(d) && (d[i] == '+' || d[i] == '-'), 1, 0)
		ok = digits()
	}
	raw := d[w.pos:i]
	w.pos = i
	return raw, ok
}

// value reads one value and reports whether s passes it, within decode's bounds.
func (s *fast) value(w *walk) bool {
	if w.n++; s.never || w.n >= maxValues || w.depth >= maxDepth-1 {
		return false
	}
	n, c := 0, w.peek()
	switch c {
	case '{', '[':
		if !s.is(cmpSel[uint8](c == '{', tObject, tArray)) || s.enum != nil {
			return false
		}
		end := c + 2 // '}' or ']'
		w.pos++
		w.depth++
		var found uint64
		for next := w.peek(); next != end; next = w.peek() {
			if n > 0 && next != ',' {
				return false
			}
			w.pos += cmpSel(n > 0, 1, 0)
			sub := s.items
			if c == '{' {
				if w.peek() != '"' {
					return false
				}
				name, ok := w.str()
				if p := s.prop(name); !ok || w.peek() != ':' {
					return false
				} else {
					sub, found = cmpSel(p.s == nil, s.additional, p.s), found|p.bit
				}
				w.pos++
			}
			if !cmpSel(sub == nil, anything, sub).value(w) {
				return false
			}
			n++
		}
		w.pos++
		w.depth--
		return found&s.required == s.required && s.within(n, cmpSel(c == '{', 4, 2))
	case '"':
		str, ok := w.str()
		return ok && s.is(tString) && (s.limits[0] < 0 && s.limits[1] < 0 || s.within(w.runes(str), 0)) && (s.enum == nil || s.in(string(str))) &&
			(s.pattern == nil || s.pattern.Match(str))
	case 't', 'f', 'n':
		for i, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(w.data[w.pos:], []byte(lit)) {
				w.pos += len(lit)
				return cmpSel(i == 2, s.is(tNull) && s.in(nil), s.is(tBoolean) && s.in(i == 0))
			}
		}
		return false
	}
	if c != '-' && (c < '0' || c > '9') {
		return false
	}
	raw, integer, x, ok := w.shortNumber()
	exact, short := ok, ok
	if !ok {
		raw, ok = w.number()
		integer, exact, x, short = literal(raw)
	}
	if !ok || !exact && !comparable(string(raw)) || s.enum != nil || !s.is(tNumber) && !(s.is(tInteger) && integer) {
		return false
	}
	if !short && s.bounds != [4]*bound{} {
		x, _ = strconv.ParseFloat(string(raw), 64) // ±Inf or 0 past the range: still in its order
	}
	for i, b := range s.bounds {
		if b != nil && !b.holds(x, exact, i%2 == 0, i >= 2) {
			return false
		}
	}
	return true
}

func (s *fast) is(t uint8) bool { return s.types == 0 || s.types&t != 0 }

func (s *fast) in(v any) bool { return s.enum == nil || slices.Contains(s.enum, v) }

// within reports that n is within the limits at i and i+1 (a minimum and a maximum).
func (s *fast) within(n, i int) bool {
	return n >= s.limits[i] && (s.limits[i+1] < 0 || n <= s.limits[i+1])
}

// holds reports that x is within b (a minimum where min; strictly where strict). Rounding to
// float64 keeps order, so unequal floats decide; equal ones only where both numbers are exact.
func (b *bound) holds(x float64, exact, min, strict bool) bool {
	if x == b.f {
		return !strict && exact && b.exact
	}
	return (x > b.f) == min
}
