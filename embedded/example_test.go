package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
)

func ExampleStart() {
	dir, err := os.MkdirTemp("", "orderstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir, Port: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDER_EVENTS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}
	ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"12345"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored in", ack.Stream, "at sequence", ack.Sequence)
	// Output: stored in ORDER_EVENTS at sequence 1
}
