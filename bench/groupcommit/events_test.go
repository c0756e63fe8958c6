package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/orderstore/orderstore/internal/validate"
)

// TestEventsValid: every event of a cell the validated target runs is
// exactly the cell's size and valid against orderCreatedSchema, checked
// the way ingest checks it; the earlier pad events are refused.
func TestEventsValid(t *testing.T) {
	file := filepath.Join(t.TempDir(), "order-created.schema.json")
	if err := os.WriteFile(file, []byte(orderCreatedSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := validate.Compile(map[string]string{"created": file}, validate.Accept, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{256, 512, 1024, 4096} {
		payloads, orders := events(size)
		if !orders {
			t.Fatalf("%d B: no order events", size)
		}
		for i, b := range payloads {
			if len(b) != size {
				t.Fatalf("%d B: event %d is %d bytes", size, i, len(b))
			}
			if err := v.Check("orders.created", b); err != nil {
				t.Fatalf("%d B: event %d %s: %v", size, i, b, err)
			}
		}
	}
	payloads, orders := events(128)
	if orders {
		t.Fatalf("128 B: order events of %d bytes", len(payloads[0]))
	}
	if err := v.Check("orders.created", payloads[0]); err == nil {
		t.Fatalf("pad event %s passed the schema", payloads[0])
	}
}
