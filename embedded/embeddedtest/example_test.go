package embeddedtest_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// A test in another project gets a real broker with ORDER_EVENTS declared
// exactly as the appliance declares it.
func ExampleStart() {
	t := &testing.T{} // in a real test: func TestX(t *testing.T) { ... }
	_ = func(t *testing.T) {
		srv := embeddedtest.Start(t)
		nc := embeddedtest.Connect(t, srv)
		orderstoretest.DeclareOrderEvents(t, nc)
		js, _ := jetstream.New(nc)
		if _, err := js.Publish(context.Background(), "orders.created", []byte(`{"order_id":"1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	_ = t
}
