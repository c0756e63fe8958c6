package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/processor"
)

// A program runs its own handler with the processor's delivery, retry,
// dead-letter and shutdown machinery.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "orderstore-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir, Port: -1, MaxStore: 10 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	nc, _ := nats.Connect("", nats.InProcessServer(srv))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	// ORDER_EVENTS, its dead-letter stream and a durable "refunds".
	cfg := orderstore.DefaultConfig()
	cfg.Processor.Durable = "refunds"
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		log.Fatal(err)
	}

	var mu sync.Mutex
	refunded := map[string]bool{}
	handler := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		if ev.Type != "cancelled" {
			return nil // acked, nothing to do
		}
		if ev.Status == "fraud" {
			return processor.Poison(errors.New("no refund for fraud")) // dead-lettered at once
		}
		mu.Lock()
		defer mu.Unlock()
		refunded[ev.OrderID] = true // idempotent: a redelivery refunds nothing twice
		return nil
	})
	// Delivery, retries and dead letters as the appliance configures them.
	p, err := processor.New(js, cfg.ProcessorSpec(handler))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- p.Run(runCtx) }()
	select {
	case <-p.Ready(): // consuming
	case err := <-done:
		log.Fatal(err) // the consumer does not exist, ...
	}

	js.Publish(ctx, "orders.created", []byte(`{"order_id":"A"}`))
	js.Publish(ctx, "orders.cancelled", []byte(`{"order_id":"A"}`))
	js.Publish(ctx, "orders.cancelled", []byte(`{"order_id":"B","status":"fraud"}`))
	for p.Stats().Processed+p.Stats().DeadLettered < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done // drained: everything handled was acked

	dls, _, _ := processor.ListDeadLetters(ctx, js, "ORDER_EVENTS_DLQ", 1, 10)
	fmt.Println("refunded A:", refunded["A"])
	fmt.Println("dead letters:", len(dls), dls[0].Subject, dls[0].Error)
	// Output:
	// refunded A: true
	// dead letters: 1 orders.cancelled poison event: no refund for fraud
}
