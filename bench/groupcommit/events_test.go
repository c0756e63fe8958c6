package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/orderstoretest"
)

// TestEventsValid: every event of a cell the validated target runs is
// exactly the cell's size and valid against orderCreatedSchema, checked
// by an appliance with that schema (the way the validated target checks
// it, through the public API); the earlier pad events are refused.
func TestEventsValid(t *testing.T) {
	file := filepath.Join(t.TempDir(), "order-created.schema.json")
	if err := os.WriteFile(file, []byte(orderCreatedSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Processor.Enabled = false
		c.Validation = orderstore.ValidationConfig{Schemas: map[string]string{"created": file}, UnknownTypes: "accept"}
	})
	ctx := context.Background()
	for _, size := range []int{256, 512, 1024, 4096} {
		payloads, orders := events(size)
		if !orders {
			t.Fatalf("%d B: no order events", size)
		}
		for i, b := range payloads {
			if len(b) != size {
				t.Fatalf("%d B: event %d is %d bytes", size, i, len(b))
			}
			if _, err := app.Publish(ctx, "orders.created", b); err != nil {
				t.Fatalf("%d B: event %d %s: %v", size, i, b, err)
			}
		}
	}
	payloads, orders := events(128)
	if orders {
		t.Fatalf("128 B: order events of %d bytes", len(payloads[0]))
	}
	var apiErr *jetstream.APIError
	if _, err := app.Publish(ctx, "orders.created", payloads[0]); !errors.As(err, &apiErr) || apiErr.ErrorCode != orderstore.ValidationErrCode {
		t.Fatalf("pad event %s: %v, want refused by the schema", payloads[0], err)
	}
}
