// Package main compares Go JSON Schema validators on the orderstore
// order-created schema and a 1 KiB event (see README.md).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

func main() {}

func mustSchema() []byte {
	b, err := os.ReadFile("../groupcommit/order-created.schema.json")
	if err != nil {
		panic(err)
	}
	return b
}

// benchEvent is internal/validate's benchEvent: 1 KiB, 8 items, padded notes.
func benchEvent() []byte {
	var items []string
	for j := range 8 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%05d","qty":%d,"price":%d.%02d}`, j*13, 1+j%3, 19+j, j))
	}
	b := fmt.Sprintf(`{"order_id":"o-1","amount":123.45,"currency":"EUR","items":[%s],"customer":{"id":"c-1","email":"c@example.com"},"notes":"`, strings.Join(items, ","))
	return []byte(b + strings.Repeat("n", 1024-len(b)-2) + `"}`)
}

// invalidEvents: the bench event with one fault each.
func invalidEvents() map[string][]byte {
	ev := string(benchEvent())
	rep := func(old, new string) []byte {
		if !strings.Contains(ev, old) {
			panic(old)
		}
		return []byte(strings.Replace(ev, old, new, 1))
	}
	return map[string][]byte{
		"amount -1":        rep(`"amount":123.45`, `"amount":-1`),
		"qty 1.5 (item 3)": rep(`{"sku":"SKU-00039","qty":1`, `{"sku":"SKU-00039","qty":1.5`),
		"currency XXX":     rep(`"currency":"EUR"`, `"currency":"XXX"`),
	}
}

// Exactness probes: small schemas where float64 gives the wrong answer.
type probe struct {
	name, schema, inst string
	valid              bool
}

var probes = []probe{
	{"1e400 >= 0 (valid)", `{"type":"number","minimum":0}`, `1e400`, true},
	{"-1e400 >= 0 (invalid)", `{"type":"number","minimum":0}`, `-1e400`, false},
	{"2^53+1 <= 2^53 (invalid)", `{"type":"integer","maximum":9007199254740992}`, `9007199254740993`, false},
	{"1.0000000000000001 integer (invalid)", `{"type":"integer"}`, `1.0000000000000001`, false},
	{"enum 2^53+1 vs 2^53 (invalid)", `{"enum":[9007199254740992]}`, `9007199254740993`, false},
}

// decode is a copy of orderstore internal/validate decode (jsontext,
// json.Number for numbers).
func decode(data []byte) (any, error) {
	d := decoders.Get().(*jsontext.Decoder)
	defer func() {
		d.Reset(emptyReader)
		decoders.Put(d)
	}()
	d.Reset(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true))
	v, err := decodeValue(d)
	if err == nil {
		if _, err = d.ReadToken(); err == io.EOF {
			return v, nil
		} else if err == nil {
			err = errors.New("another value after the event's")
		}
	}
	return nil, errors.New(strings.TrimPrefix(err.Error(), "jsontext: "))
}

var (
	decoders    = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyReader) }}
	emptyReader = bytes.NewReader(nil)
)

func decodeValue(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		obj := map[string]any{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return obj, nil
	case '[':
		arr := []any{}
		for d.PeekKind() != ']' {
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return arr, nil
	case '"':
		return tok.String(), nil
	case '0':
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

// decodeFloat is plain encoding/json into any (float64 numbers).
func decodeFloat(data []byte) (any, error) {
	var v any
	err := json.Unmarshal(data, &v)
	return v, err
}
