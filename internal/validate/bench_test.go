package validate

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// benchSchema is bench/groupcommit's order-created schema, and
// benchEvent a 1 KiB event with 8 items valid against it: where a check's
// time goes (bench/README.md, "Cost of schema validation").
//
//	go test -run '^$' -bench . -benchmem ./internal/validate
const benchSchema = "../../bench/groupcommit/order-created.schema.json"

func benchEvent() []byte {
	var items []string
	for j := range 8 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%05d","qty":%d,"price":%d.%02d}`, j*13, 1+j%3, 19+j, j))
	}
	b := fmt.Sprintf(`{"order_id":"o-1","amount":123.45,"currency":"EUR","items":[%s],"customer":{"id":"c-1","email":"c@example.com"},"notes":"`, strings.Join(items, ","))
	return []byte(b + strings.Repeat("n", 1024-len(b)-2) + `"}`)
}

func BenchmarkCheck(b *testing.B) {
	v, err := Compile(map[string]string{"created": benchSchema}, Reject, nil)
	if err != nil {
		b.Fatal(err)
	}
	ev := benchEvent()
	if len(ev) != 1024 {
		b.Fatalf("the event is %d bytes, want 1024", len(ev))
	}
	b.Run("whole check", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if err := v.Check("orders.created", ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := decode(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate decoded", func(b *testing.B) {
		inst, err := decode(ev)
		if err != nil {
			b.Fatal(err)
		}
		sch := v.schemas["created"]
		for b.Loop() {
			if err := sch.Validate(inst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecode compares the decoder Check uses with the JSON Schema
// library's own (encoding/json).
func BenchmarkDecode(b *testing.B) {
	ev := benchEvent()
	b.Run("jsonschema.UnmarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonschema.UnmarshalJSON(bytes.NewReader(ev)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
