package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	gjs "github.com/google/jsonschema-go/jsonschema"
	kjs "github.com/kaptinlin/jsonschema"
	qjs "github.com/qri-io/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// A checker is one library's compiled schema.
type checker struct {
	// whole: bytes in, nil or an error with the detail the library gives.
	whole func([]byte) error
	// decode and validate: the two halves, where the library separates them.
	decode   func([]byte) (any, error)
	validate func(any) error
}

type lib struct {
	name    string
	compile func(schema []byte) (checker, error)
}

var libs = []lib{
	{"santhosh-v6 (UnmarshalJSON)", santhosh(false)},
	{"santhosh-v6 (jsontext decode)", santhosh(true)},
	{"kaptinlin", kaptinlin},
	{"kaptinlin (jsontext decode+ValidateMap)", kaptinlinMap},
	{"google", google},
	{"qri-io", qri},
}

// ---- santhosh-tekuri/jsonschema/v6, set up as orderstore does.

var printer = message.NewPrinter(language.English)

func santhosh(ownDecode bool) func([]byte) (checker, error) {
	return func(schema []byte) (checker, error) {
		doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema))
		if err != nil {
			return checker{}, err
		}
		c := sjs.NewCompiler()
		c.DefaultDraft(sjs.Draft2020)
		if err := c.AddResource("file:///s.json", doc); err != nil {
			return checker{}, err
		}
		sch, err := c.Compile("file:///s.json")
		if err != nil {
			return checker{}, err
		}
		dec := func(b []byte) (any, error) { return sjs.UnmarshalJSON(bytes.NewReader(b)) }
		if ownDecode {
			dec = decode
		}
		val := func(v any) error {
			err := sch.Validate(v)
			if err == nil {
				return nil
			}
			ve := err.(*sjs.ValidationError)
			for len(ve.Causes) > 0 {
				ve = ve.Causes[0]
			}
			kp := ve.ErrorKind.KeywordPath()
			return fmt.Errorf("keyword=%s instance=/%s keywordLoc=%s/%s msg=%q",
				kp[len(kp)-1], strings.Join(ve.InstanceLocation, "/"), strings.TrimPrefix(ve.SchemaURL, "file:///s.json"), strings.Join(kp, "/"),
				ve.ErrorKind.LocalizedString(printer))
		}
		return checker{
			whole: func(b []byte) error {
				v, err := dec(b)
				if err != nil {
					return err
				}
				return val(v)
			},
			decode: dec, validate: val,
		}, nil
	}
}

// ---- kaptinlin/jsonschema

func kaptinlinCompile(schema []byte) (*kjs.Schema, error) {
	return kjs.NewCompiler().Compile(schema)
}

func kaptinlinErr(r *kjs.EvaluationResult) error {
	if r.IsValid() {
		return nil
	}
	// The first leaf that has errors; its locations are relative to its
	// parent's, so they are joined on the way down.
	inst, eval := "", ""
	for {
		var next *kjs.EvaluationResult
		for _, d := range r.Details {
			if !d.Valid {
				next = d
				break
			}
		}
		if next == nil {
			break
		}
		r = next
		inst += r.InstanceLocation
		eval += r.EvaluationPath
	}
	var kws []string
	for k := range r.Errors {
		kws = append(kws, k)
	}
	sort.Strings(kws)
	if len(kws) == 0 {
		return fmt.Errorf("invalid, no detail")
	}
	e := r.Errors[kws[0]]
	return fmt.Errorf("keyword=%s instance=%s evalPath=%s (leaf schemaLoc=%s) msg=%q", e.Keyword, inst, eval, r.SchemaLocation, e.Error())
}

func kaptinlin(schema []byte) (checker, error) {
	s, err := kaptinlinCompile(schema)
	if err != nil {
		return checker{}, err
	}
	return checker{whole: func(b []byte) error { return kaptinlinErr(s.ValidateJSON(b)) }}, nil
}

func kaptinlinMap(schema []byte) (checker, error) {
	s, err := kaptinlinCompile(schema)
	if err != nil {
		return checker{}, err
	}
	val := func(v any) error { return kaptinlinErr(s.Validate(v)) }
	return checker{
		whole: func(b []byte) error {
			v, err := decode(b)
			if err != nil {
				return err
			}
			return val(v)
		},
		decode: decode, validate: val,
	}, nil
}

// ---- google/jsonschema-go: needs float64 numbers (a json.Number is a
// string to it), so encoding/json into any.

func google(schema []byte) (checker, error) {
	var s gjs.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return checker{}, err
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return checker{}, err
	}
	val := func(v any) error { return rs.Validate(v) }
	return checker{
		whole: func(b []byte) error {
			v, err := decodeFloat(b)
			if err != nil {
				return err
			}
			return val(v)
		},
		decode: decodeFloat, validate: val,
	}, nil
}

// ---- qri-io/jsonschema (draft 2019-09 only)

func qri(schema []byte) (checker, error) {
	s := &qjs.Schema{}
	if err := json.Unmarshal(schema, s); err != nil {
		return checker{}, err
	}
	ctx := context.Background()
	val := func(v any) error {
		st := s.Validate(ctx, v)
		if len(*st.Errs) == 0 {
			return nil
		}
		e := (*st.Errs)[0]
		return fmt.Errorf("n=%d path=%s value=%v msg=%q", len(*st.Errs), e.PropertyPath, e.InvalidValue, e.Message)
	}
	return checker{
		whole: func(b []byte) error {
			v, err := decodeFloat(b)
			if err != nil {
				return err
			}
			return val(v)
		},
		decode: decodeFloat, validate: val,
	}, nil
}
