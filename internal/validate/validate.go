// Package validate checks events against JSON Schemas (draft 2020-12 by default) at ingest: one
// schema file per event type (the subject's last token), what to do with a type that has none, and
// a program's own check. A refused event names the schema, the JSON pointer of the failing value
// and the schema keyword that failed.
package validate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Unknown-type policies.
const (
	Accept = "accept" // an event of a type without a schema is stored
	Reject = "reject" // it is refused
)

// Reasons a rejection is counted under besides a schema keyword.
const (
	ReasonInvalidJSON = "invalid_json" // the payload is not JSON
	ReasonUnknownType = "unknown_type" // no schema for its type, with unknown_types = "reject"
	ReasonFunc        = "func"         // the program's own check refused it
)

// Rejection is an event refused: its type, the schema file, where in the event and which keyword.
type Rejection struct {
	Type    string // event type (the subject's last token)
	Schema  string // schema file ("" for unknown types and the program's check)
	Pointer string // JSON pointer of the failing value in the event ("" for the whole)
	Keyword string // the schema keyword that failed, or a Reason*
	Message string
}

func (r *Rejection) Error() string {
	switch r.Keyword {
	case ReasonUnknownType:
		return fmt.Sprintf("event type %q has no schema and validation.unknown_types is \"reject\"", r.Type)
	case ReasonFunc:
		return fmt.Sprintf("event type %q refused by the program's check: %s", r.Type, r.Message)
	case ReasonInvalidJSON:
		return fmt.Sprintf("event type %q does not match schema %q: not JSON: %s", r.Type, r.Schema, r.Message)
	}
	return fmt.Sprintf("event type %q does not match schema %q: at %s: keyword %q: %s", r.Type, r.Schema, cmp.Or(r.Pointer, "(the event)"), r.Keyword, r.Message)
}

// Count is how many events of a type were refused for a reason.
type Count struct {
	Type, Reason string
	N            uint64
}

// Validator checks events. The zero value and nil accept everything.
type Validator struct {
	schemas map[string]*jsonschema.Schema
	fast    map[string]*fast  // nil where compileFast does not take the schema
	slow    map[string]string // where it does not: the first keyword it refused
	files   map[string]string
	reject  bool
	fn      func(subject string, data []byte) error
	counts  *counts // shared with the validators it replaced and replaces (InheritCounts)
}

type counts struct {
	mu sync.Mutex
	m  map[[2]string]uint64
}

// maxCountKeys bounds the distinct (type, reason) pairs counted: a producer inventing event types
// must not grow the metrics without end (types without a schema are counted as "other").
const maxCountKeys = 1000

// Compile loads and compiles the schema of each event type (file paths), with unknownTypes Accept
// ("" too) or Reject, and fn, if set, as a last check. Every problem is reported at once, each
// naming its event type, file and, where it has one, the position in the file.
func Compile(schemas map[string]string, unknownTypes string, fn func(subject string, data []byte) error) (*Validator, error) {
	v := &Validator{schemas: map[string]*jsonschema.Schema{}, fast: map[string]*fast{}, slow: map[string]string{}, files: map[string]string{}, fn: fn, counts: &counts{m: map[[2]string]uint64{}}}
	var errs []error
	switch unknownTypes {
	case "", Accept:
	case Reject:
		v.reject = true
	default:
		errs = append(errs, fmt.Errorf("validation.unknown_types %q: must be %q or %q", unknownTypes, Accept, Reject))
	}
	for _, typ := range slices.Sorted(maps.Keys(schemas)) {
		file := schemas[typ]
		key := fmt.Sprintf("validation.schemas.%s", typ)
		if typ == "" || strings.ContainsAny(typ, ".*> \t") {
			errs = append(errs, fmt.Errorf("%s: %q is not an event type (a subject's last token, without '.', '*', '>' or spaces)", key, typ))
			continue
		}
		sch, f, why, err := compileFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s = %q: %w", key, file, err))
			continue
		}
		v.schemas[typ], v.fast[typ], v.files[typ] = sch, f, file
		if why != "" {
			v.slow[typ] = why
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

// compileFile compiles one schema file, and for a check on tokens where it can; a JSON syntax error
// names its line and column.
func compileFile(file string) (*jsonschema.Schema, *fast, string, error) {
	if err := regular(file); err != nil {
		return nil, nil, "", err
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, "", err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			line, col := position(src, se.Offset)
			return nil, nil, "", fmt.Errorf("line %d, column %d: not JSON: %v", line, col, se)
		}
		return nil, nil, "", fmt.Errorf("not JSON: %w", err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, nil, "", err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Only local files: a schema that names a URL is refused, not fetched.
	c.UseLoader(jsonschema.SchemeURLLoader{"file": fileLoader{}})
	// As a URL: a '#' in a file name would otherwise start a fragment (the part compiled).
	loc := (&url.URL{Scheme: "file", Path: abs}).String()
	if err := c.AddResource(loc, doc); err != nil {
		return nil, nil, "", err
	}
	sch, err := c.Compile(loc)
	for _, inst := range []any{nil, map[string]any{}, []any{}} {
		// A $ref cycle that reads nothing of the event ({"$ref": "#"}) compiles, then refuses every
		// event.
		if ve := (*jsonschema.ValidationError)(nil); err == nil && errors.As(sch.Validate(inst), &ve) {
			err = refCycle(ve)
		}
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("not a valid JSON Schema: %s", strings.ReplaceAll(err.Error(), loc, "the file"))
	}
	f, why := compileFast(doc)
	return sch, f, why, nil
}

// refCycle is the $ref cycle among ve's causes, or nil.
func refCycle(ve *jsonschema.ValidationError) error {
	if _, ok := ve.ErrorKind.(*kind.RefCycle); ok {
		return ve
	}
	for _, c := range ve.Causes {
		if err := refCycle(c); err != nil {
			return err
		}
	}
	return nil
}

// fileLoader loads a $ref's file, if it is a regular file.
type fileLoader struct{ jsonschema.FileLoader }

func (l fileLoader) Load(url string) (any, error) {
	path, err := l.ToFile(url)
	if err = cmp.Or(err, regular(path)); err != nil {
		return nil, err
	}
	return l.FileLoader.Load(url)
}

// regular refuses what is not a regular file: reading a FIFO or a device could block start,
// check or a reload for ever.
func regular(path string) error {
	fi, err := os.Stat(path)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	return err
}

// position is the 1-based line and column of byte offset off in src.
func position(src []byte, off int64) (line, col int) {
	off = min(max(off, 1), int64(len(src)))
	before := src[:off-1]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off-1) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// Enabled reports whether v checks anything.
func (v *Validator) Enabled() bool {
	return v != nil && (len(v.schemas) > 0 || v.reject || v.fn != nil)
}

// Check validates one event on subject. A refusal is a *Rejection, and
// counted. data is never changed.
func (v *Validator) Check(subject string, data []byte) (err error) {
	if !v.Enabled() {
		return nil
	}
	typ := subject[strings.LastIndexByte(subject, '.')+1:]
	defer func() { // a panic in a check must not take the server (its client's read loop) down
		if r := recover(); r != nil {
			err = v.refused(&Rejection{Type: typ, Schema: v.files[typ], Keyword: "schema", Message: fmt.Sprint("the check failed: ", r)})
		}
	}()
	sch, ok := v.schemas[typ]
	switch f := v.fast[typ]; {
	case ok && f != nil && f.valid(data):
	case ok:
		inst, err := decode(data)
		if err != nil {
			return v.refused(&Rejection{Type: typ, Schema: v.files[typ], Keyword: ReasonInvalidJSON, Message: err.Error()})
		}
		if err := sch.Validate(inst); err != nil {
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) {
				return v.refused(&Rejection{Type: typ, Schema: v.files[typ], Keyword: "schema", Message: err.Error()})
			}
			return v.refused(rejection(typ, v.files[typ], ve))
		}
	case v.reject:
		return v.refused(&Rejection{Type: typ, Keyword: ReasonUnknownType})
	}
	if v.fn != nil {
		if err := v.fn(subject, data); err != nil {
			return v.refused(&Rejection{Type: typ, Keyword: ReasonFunc, Message: err.Error()})
		}
	}
	return nil
}

var printer = message.NewPrinter(language.English)

// rejection describes the first leaf cause of ve: the most precise place and keyword.
func rejection(typ, file string, ve *jsonschema.ValidationError) *Rejection {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	r := &Rejection{Type: typ, Schema: file, Keyword: "schema", Message: ve.ErrorKind.LocalizedString(printer)}
	if kp := ve.ErrorKind.KeywordPath(); len(kp) > 0 {
		r.Keyword = kp[len(kp)-1]
	}
	for _, tok := range ve.InstanceLocation {
		r.Pointer += "/" + strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
	}
	if len(r.Message) > 512 {
		r.Message = r.Message[:512] + "..."
	}
	return r
}

func (v *Validator) refused(r *Rejection) error {
	typ := r.Type
	if _, ok := v.schemas[typ]; !ok {
		typ = "other" // no schema: a producer's invention must not make a label
	}
	c := v.counts
	c.mu.Lock()
	k := [2]string{typ, r.Keyword}
	if _, ok := c.m[k]; ok || len(c.m) < maxCountKeys {
		c.m[k]++
	} else {
		c.m[[2]string{"other", "other"}]++
	}
	c.mu.Unlock()
	return r
}

// Counts returns the refusals so far, per type and reason, sorted.
func (v *Validator) Counts() []Count {
	if v == nil || v.counts == nil {
		return nil
	}
	v.counts.mu.Lock()
	defer v.counts.mu.Unlock()
	out := make([]Count, 0, len(v.counts.m))
	for k, n := range v.counts.m {
		out = append(out, Count{Type: k[0], Reason: k[1], N: n})
	}
	slices.SortFunc(out, func(a, b Count) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Reason, b.Reason)) })
	return out
}

// Schemas returns each event type's schema file.
func (v *Validator) Schemas() map[string]string {
	if v == nil {
		return nil
	}
	return maps.Clone(v.files)
}

// Slow returns, for each event type whose schema the library alone checks (about 16 times the
// fast check's cost: docs/processor.md, "Schemas"), the JSON pointer of the first keyword the
// fast check does not take.
func (v *Validator) Slow() map[string]string {
	if v == nil {
		return nil
	}
	return maps.Clone(v.slow)
}

// UnknownTypes is the unknown-type policy: Accept or Reject.
func (v *Validator) UnknownTypes() string {
	if v != nil && v.reject {
		return Reject
	}
	return Accept
}

// HasFunc reports whether a program's own check is set.
func (v *Validator) HasFunc() bool { return v != nil && v.fn != nil }

// InheritCounts makes v count on from old's refusal counts (a reload keeps them): the two share
// them, so that a refusal old counts after the swap, for a check that began before it, is kept.
func (v *Validator) InheritCounts(old *Validator) {
	if v != nil && old != nil && old.counts != nil {
		v.counts = old.counts
	}
}
