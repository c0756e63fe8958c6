package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// decode parses an event into the values the JSON Schema library validates (what its UnmarshalJSON
// gives: map[string]any, []any, string, json.Number, bool, nil), with jsontext's single-pass
// tokenizer instead of encoding/json's scan-then-decode: a third of a check's time went to decoding
// (bench/README.md, "Cost of schema validation"). As encoding/json does, a repeated name keeps its
// last value; unlike it, invalid UTF-8 is refused (JSON text is UTF-8: RFC 8259, section 8.1), as
// is anything after the one value, and nesting or values past maxDepth or maxValues.
func decode(data []byte) (any, error) {
	d := decoders.Get().(*jsontext.Decoder)
	defer func() {
		d.Reset(emptyReader)
		decoders.Put(d)
	}()
	// A bytes.Buffer is parsed in place (a bytes.Reader would be copied).
	d.Reset(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true))
	values := 0
	v, err := decodeValue(d, &values)
	if err == nil {
		if _, err = d.ReadToken(); err == io.EOF {
			return v, nil
		} else if err == nil {
			err = errors.New("another value after the event's")
		}
	}
	// jsontext's errors name the place: "invalid character 'x' at start of value after offset 7".
	if s, ok := strings.CutPrefix(err.Error(), "jsontext: "); ok {
		err = errors.New(s)
	}
	return nil, err
}

// errNumberRange refuses a number the JSON Schema library would compare exactly at a cost
// that grows with its digits and exponent (math/big), or not at all (past ±1e6 it panicked):
// RFC 8259, section 6, lets an implementation limit the range and precision it takes.
var errNumberRange = errors.New("a number beyond what is compared (at most 64 characters, exponent within ±999)")

// maxDepth and maxValues bound what checking an event costs, whatever its size (max_payload may
// be 64 MiB) and shape. The JSON Schema library allocates for each value it checks and, where a
// check fails, an error with the value's whole path at each level: a value failing 5,000 levels
// down a tree schema cost 670 MB, 1 MiB of failing numbers 260 MB. Within both: about 1 KB per
// value for each schema that checks it (TestCheckBoundsCost).
const maxDepth, maxValues = 32, 10_000

var (
	errTooDeep = fmt.Errorf("arrays and objects nested deeper than is checked (at most %d levels)", maxDepth)
	errTooMany = fmt.Errorf("more values than are checked (at most %d objects, arrays, strings, numbers, booleans and nulls)", maxValues)
)

func comparable(n string) bool {
	e := strings.IndexAny(n, "eE")
	return len(n) <= 64 && (e < 0 || len(strings.TrimLeft(n[e+1:], "+-0")) <= 3)
}

var (
	decoders    = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyReader) }}
	emptyReader = bytes.NewReader(nil)
)

// decodeValue decodes one value; values counts the values decoded so far.
func decodeValue(d *jsontext.Decoder, values *int) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if *values++; *values > maxValues {
		return nil, fmt.Errorf("%w, after offset %d", errTooMany, d.InputOffset())
	} else if d.StackDepth() > maxDepth {
		return nil, fmt.Errorf("%w, after offset %d", errTooDeep, d.InputOffset())
	}
	switch tok.Kind() {
	case '{':
		obj := map[string]any{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			if name.Kind() != '"' {
				return nil, fmt.Errorf("an object name is a %v", name.Kind())
			}
			key := name.String()
			v, err := decodeValue(d, values)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		_, err = d.ReadToken() // the '}'
		return obj, err
	case '[':
		arr := []any{}
		for d.PeekKind() != ']' {
			v, err := decodeValue(d, values)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = d.ReadToken() // the ']'
		return arr, err
	case '"':
		return tok.String(), nil
	case '0':
		if n := tok.String(); !comparable(n) {
			return nil, fmt.Errorf("%w: %.24s", errNumberRange, n)
		}
		return json.Number(tok.String()), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected %v", tok.Kind())
}
