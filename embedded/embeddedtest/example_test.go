package embeddedtest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
)

// In a test, a broker with ORDER_EVENTS declared exactly as the appliance
// declares it takes three lines:
//
//	func TestOrders(t *testing.T) {
//		srv := embeddedtest.Start(t)
//		nc := embeddedtest.Connect(t, srv)
//		orderstoretest.DeclareOrderEvents(t, nc)
//		...
//	}
//
// Where there is no testing.TB (a TestMain that shares one broker across a
// package's tests, an example like this one), start the broker Start would
// through package embedded: a fresh store directory, a random port and
// Start's storage limits; then declare what DeclareOrderEvents declares.
// Close the broker and remove its directory when done.
func Example_withoutTestingT() {
	dir, err := os.MkdirTemp("", "embeddedtest-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{
		StoreDir:  dir,
		Port:      -1, // random: read it back with srv.ClientURL()
		MaxMemory: 64 << 20,
		MaxStore:  10 << 30, // the appliance's limit, so its streams' reservations fit
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close() // runs before os.RemoveAll: the store is closed first

	// Over TCP, as a test handed srv.ClientURL() would connect.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	// What orderstoretest.DeclareOrderEvents declares: the appliance's
	// built-in defaults.
	res, err := bootstrap.Declare(ctx, js, orderstore.DefaultConfig().DeclareSpec(), nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range res.Created {
		fmt.Println("declared", c)
	}

	ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"1"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored in", ack.Stream, "at sequence", ack.Sequence)
	st, err := js.Stream(ctx, ack.Stream)
	if err != nil {
		log.Fatal(err)
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read back %s: %s\n", m.Subject, m.Data)
	// Output:
	// declared stream "KV_ORDERS_HISTORY"
	// declared stream "ORDER_EVENTS"
	// declared stream "ORDER_EVENTS_DLQ"
	// declared kv bucket "ORDERS"
	// declared consumer "order-processor" on stream "ORDER_EVENTS"
	// stored in ORDER_EVENTS at sequence 1
	// read back orders.created: {"order_id":"1"}
}
