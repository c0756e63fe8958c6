package orderstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
)

// A Go program starts the whole appliance, publishes an order's events
// with nats.go and reads the projected status, all in-process.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "orderstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir = dir
	cfg.JetStream.MaxFileStore = 2 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 512 << 20
	cfg.Server.Port = -1  // a random free port: see app.ClientURL()
	cfg.Admin.Listen = "" // no admin listener

	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)

	nc, err := nats.Connect("", nats.InProcessServer(app))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	js.Publish(ctx, "orders.created", []byte(`{"order_id":"A-1"}`))
	js.Publish(ctx, "orders.shipped", []byte(`{"order_id":"A-1"}`))

	// The processor folds both events into the ORDERS bucket.
	kv, _ := js.KeyValue(ctx, "ORDERS")
	w, _ := kv.Watch(ctx, "A-1")
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil {
			continue // the initial values are delivered
		}
		var o struct {
			Status string `json:"status"`
			Events int    `json:"events"`
		}
		json.Unmarshal(e.Value(), &o)
		if o.Events == 2 {
			fmt.Println("A-1:", o.Status)
			break
		}
	}
	order, _ := app.Order(ctx, "A-1")
	fmt.Println("via the appliance:", order.Status, order.LastSeq)
	fmt.Println("ready:", app.Ready(ctx) == nil)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Println("close:", app.Close(cctx))
	// Output:
	// A-1: shipped
	// via the appliance: shipped 2
	// ready: true
	// close: <nil>
}
