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
	dir, err := os.MkdirTemp("", "orderstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir, Port: -1, MaxStore: 10 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
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
	p, err := processor.New(js, cfg.ProcessorConfig(handler))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error)
	go func() { done <- p.Run(runCtx) }()
	select {
	case <-p.Ready(): // consuming
	case err := <-done:
		log.Fatal(err) // the consumer does not exist, ...
	}

	events := []struct{ subject, data string }{
		{"orders.created", `{"order_id":"A"}`},
		{"orders.cancelled", `{"order_id":"A"}`},
		{"orders.cancelled", `{"order_id":"B","status":"fraud"}`},
	}
	for _, e := range events {
		if _, err := js.Publish(ctx, e.subject, []byte(e.data)); err != nil {
			log.Fatalf("publish %s %s: %v", e.subject, e.data, err)
		}
	}

	// Wait until all three are handled (acked or dead-lettered), at most
	// 30s: past that something is broken, and what it printed instead
	// fails the example.
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s := p.Stats()
		if s.Processed+s.DeadLettered >= uint64(len(events)) {
			break
		}
		select {
		case <-tick.C:
		case err := <-done:
			fmt.Println("processor stopped before it handled every event:", err)
			return
		case <-deadline:
			fmt.Printf("after 30s only %d of %d events handled (processed %d, dead-lettered %d)\n",
				s.Processed+s.DeadLettered, len(events), s.Processed, s.DeadLettered)
			stop()
			<-done
			return
		}
	}
	stop()
	if err := <-done; err != nil { // drained: everything handled was acked
		fmt.Println("processor:", err)
	}

	dls, _, err := processor.ListDeadLetters(ctx, js, "ORDER_EVENTS_DLQ", 1, 10)
	if err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	fmt.Println("refunded A:", refunded["A"])
	mu.Unlock()
	fmt.Print("dead letters: ", len(dls))
	for _, d := range dls {
		fmt.Print(" ", d.Subject, " ", d.Error)
	}
	fmt.Println()
	// Output:
	// refunded A: true
	// dead letters: 1 orders.cancelled poison event: no refund for fraud
}
