// Command embedprogram embeds orderstore in a Go program of its own: it imports nothing of
// orderstore but the root package. It starts the appliance on a store directory, publishes an
// order's events with nats.go, reads the projected status from the ORDERS bucket, closes, then
// restarts on the same store and reads it again.
//
//	go run . STORE_DIR
package main

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

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: embedprogram STORE_DIR")
	}
	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir = os.Args[1]
	cfg.Server.Port = -1  // a random free port
	cfg.Admin.Listen = "" // no admin listener
	cfg.JetStream.MaxFileStore = 2 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 512 << 20

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// First run: publish, then wait for the projection.
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(app.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range []string{"created", "shipped"} {
		ack, err := js.Publish(ctx, "orders."+ev, []byte(`{"order_id":"A-1001"}`), jetstream.WithMsgID("A-1001-"+ev))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("published orders.%s as seq %d\n", ev, ack.Sequence)
	}
	fmt.Println("first run:", waitStatus(ctx, js, "shipped"))
	nc.Close()
	if err := app.Close(ctx); err != nil {
		log.Fatal(err)
	}

	// Second run on the same store: the projection is still there.
	app, err = orderstore.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	nc, err = nats.Connect("", nats.InProcessServer(app))
	if err != nil {
		log.Fatal(err)
	}
	js, _ = jetstream.New(nc)
	fmt.Println("after restart:", waitStatus(ctx, js, "shipped"))
	nc.Close()
	if err := app.Close(ctx); err != nil {
		log.Fatal(err)
	}
}

// waitStatus polls the ORDERS bucket until order A-1001 has status want.
func waitStatus(ctx context.Context, js jetstream.JetStream, want string) string {
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		log.Fatal(err)
	}
	for {
		if e, err := kv.Get(ctx, "A-1001"); err == nil {
			var o struct {
				Status string `json:"status"`
				Events int    `json:"events"`
			}
			if err := json.Unmarshal(e.Value(), &o); err != nil {
				log.Fatal(err)
			}
			if o.Status == want {
				return fmt.Sprintf("order A-1001 is %s after %d events", o.Status, o.Events)
			}
		}
		select {
		case <-ctx.Done():
			log.Fatalf("order A-1001 never reached %q: %v", want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
