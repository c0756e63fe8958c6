package validate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// benchSchema is bench/groupcommit's order-created schema, and
// benchEvent a 1 KiB event with 8 items valid against it: where a check's
// time goes (bench/README.md, "Cost of schema validation").
//
//	go test -run '^$' -bench . -benchmem ./internal/validate
const benchSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "amount", "currency", "items", "customer"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1, "maxLength": 256},
    "amount": {"type": "number", "minimum": 0},
    "currency": {"enum": ["EUR", "USD", "GBP", "CHF", "JPY"]},
    "items": {"type": "array", "minItems": 1, "maxItems": 100,
      "items": {"type": "object", "required": ["sku", "qty", "price"],
        "properties": {"sku": {"type": "string", "minLength": 1, "maxLength": 64},
          "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number", "minimum": 0}}}},
    "customer": {"type": "object", "required": ["id", "email"],
      "properties": {"id": {"type": "string", "minLength": 1}, "email": {"type": "string", "format": "email"}}},
    "notes": {"type": "string"}
  },
  "additionalProperties": true
}`

func benchEvent() []byte {
	var items []string
	for j := range 8 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%05d","qty":%d,"price":%d.%02d}`, j*13, 1+j%3, 19+j, j))
	}
	b := fmt.Sprintf(`{"order_id":"o-1","amount":123.45,"currency":"EUR","items":[%s],"customer":{"id":"c-1","email":"c@example.com"},"notes":"`, strings.Join(items, ","))
	return []byte(b + strings.Repeat("n", 1024-len(b)-2) + `"}`)
}

func BenchmarkCheck(b *testing.B) {
	file := filepath.Join(b.TempDir(), "created.json")
	if err := os.WriteFile(file, []byte(benchSchema), 0o600); err != nil {
		b.Fatal(err)
	}
	v, err := Compile(map[string]string{"created": file}, Reject, nil)
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
			if _, err := jsonschema.UnmarshalJSON(bytes.NewReader(ev)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate decoded", func(b *testing.B) {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(ev))
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
