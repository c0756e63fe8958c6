// Package orderstoretest gives a Go test a whole orderstore appliance (the embedded broker with
// ORDER_EVENTS, the dead-letter stream, the ORDERS projection and the running processor) in a few
// tens of milliseconds, stopped by t.Cleanup:
//
//	func TestCheckout(t *testing.T) {
//		app := orderstoretest.Start(t)
//		js := embeddedtest.JetStream(t, app)
//		js.Publish(ctx, "orders.created", []byte(`{"order_id":"A1"}`))
//		...
//	}
//
// Each appliance has its own t.TempDir() store, a random NATS port and no
// admin listener unless an option sets Admin.Listen (e.g. "127.0.0.1:0").
// Set ORDERSTORE_TEST_LOG=debug (or info) to see its log in t.Log.
//
// For a bare broker without the appliance, use package embeddedtest.
package orderstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Config returns the configuration Start begins from: the built-in defaults on t.TempDir(), a
// random port, no admin listener, storage limits for a test machine's disk, and the test logger.
func Config(t testing.TB) orderstore.Config {
	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir = t.TempDir()
	cfg.JetStream.MaxFileStore = 2 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 1 << 30
	cfg.Server.Port = -1
	cfg.Admin.Listen = ""
	cfg.Logger = embeddedtest.Logger(t)
	return cfg
}

// Start starts an appliance for t from [Config] adjusted by opts, and returns it ready (the
// processor consumes). It calls t.Fatal if start-up fails. When the test ends it is closed, and a
// part that failed while the test ran is reported with t.Errorf.
func Start(t testing.TB, opts ...func(*orderstore.Config)) *orderstore.Appliance {
	t.Helper()
	cfg := Config(t)
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("orderstoretest.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(ctx); err != nil {
			t.Errorf("orderstoretest: close: %v", err)
		}
		if err := app.Wait(); err != nil {
			t.Errorf("orderstoretest: appliance failed: %v", err)
		}
	})
	return app
}

// DeclareOrderEvents declares, on nc's server, exactly what the appliance declares with its
// built-in defaults adjusted by opts: the ORDER_EVENTS stream (orders.>), the dead-letter stream,
// the ORDERS projection bucket, its history index (KV_ORDERS_HISTORY) and the order-processor
// durable consumer. It returns the spec declared. Use it to test your own consumers against a bare
// broker (embeddedtest.Start) or any NATS server.
func DeclareOrderEvents(t testing.TB, nc *nats.Conn, opts ...func(*orderstore.Config)) bootstrap.Spec {
	t.Helper()
	cfg := orderstore.DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("orderstoretest.DeclareOrderEvents: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("orderstoretest.DeclareOrderEvents: %v", err)
	}
	spec := cfg.DeclareSpec()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bootstrap.Declare(ctx, js, spec, nil); err != nil {
		t.Fatalf("orderstoretest.DeclareOrderEvents: %v", err)
	}
	return spec
}
