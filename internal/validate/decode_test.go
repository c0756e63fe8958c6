package validate

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var decodeSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-1.5e+300`, `"x"`, ` {"a" : [1, 2.0, "3", null, {"b": false}]} `,
	`{"a":1,"a":2}`, `{"order_id":"o-\u00e9\ud83d\ude00","n":12345678901234567890123}`,
	`{"a":1}x`, `{"a":1} {"b":2}`, `{"a":}`, `{"a":1,}`, `[1,]`, `{1:2}`, `"\x"`, `01`, `1.`, `-`, `+1`, `NaN`,
	`{"a":"\ud800"}`, "\"\xff\"", `[`, `{"a"`, ``, ` `, `nul`, `[[[[[[[[[[]]]]]]]]]]`, "{\"a\":1}\n",
}

// decode gives what the JSON Schema library's own UnmarshalJSON gives, for
// every input both take; what one refuses the other refuses, except
// invalid UTF-8, which decode alone refuses.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add(benchEvent())
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		got, gerr := decode(data)
		switch {
		case werr != nil && gerr != nil:
		case werr == nil && gerr == nil:
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: decode gives %#v, UnmarshalJSON %#v", data, got, want)
			}
		case werr == nil && (notUTF8(data) || errors.Is(gerr, errNumberRange) || errors.Is(gerr, errTooDeep) || errors.Is(gerr, errTooMany)):
			// Refused by decode alone: JSON text is UTF-8, numbers, nesting and values are bounded.
		default:
			t.Fatalf("%q: UnmarshalJSON: %v; decode: %v", data, werr, gerr)
		}
	})
}

func TestDecodeAgreesOnSeeds(t *testing.T) {
	for _, s := range decodeSeeds {
		want, werr := jsonschema.UnmarshalJSON(strings.NewReader(s))
		got, gerr := decode([]byte(s))
		if (werr == nil) != (gerr == nil) && !(werr == nil && notUTF8([]byte(s))) {
			t.Errorf("%q: UnmarshalJSON: %v; decode: %v", s, werr, gerr)
		}
		if werr == nil && gerr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q: decode gives %#v, UnmarshalJSON %#v", s, got, want)
		}
	}
}

// surrogate is a \u escape of a UTF-16 surrogate (D800-DFFF), which
// encoding/json takes as U+FFFD when it is not half of a pair, and
// jsontext refuses as invalid UTF-8.
var surrogate = regexp.MustCompile(`\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)

// notUTF8 reports input that decode alone refuses: invalid UTF-8, or an
// escaped surrogate (a pair too: this only excuses a refusal).
func notUTF8(data []byte) bool { return !utf8.Valid(data) || surrogate.Match(data) }
