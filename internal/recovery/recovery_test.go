package recovery

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
)

// nats names a consumer's files as its store_dir was given to it: a
// relative store_dir (the default, ./orderstore-data) gives relative
// paths, which the absolute store directory must still match. (Found by
// hand: with the default store_dir the damaged consumer was not moved
// aside.)
func TestNatsNamedConsumer(t *testing.T) {
	spec := bootstrap.Spec{Stream: jetstream.StreamConfig{Name: "ORDER_EVENTS"}, Consumer: &jetstream.ConsumerConfig{Durable: "order-processor"}}
	for _, tt := range []struct {
		problem string
		want    bool
	}{
		{`Error unmarshalling consumer metafile "orderstore-data/jetstream/ORDERSTORE/streams/ORDER_EVENTS/obs/order-processor/meta.inf": unexpected end of JSON input`, true},
		{`Error unmarshalling consumer metafile "/var/lib/orderstore/jetstream/ORDERSTORE/streams/ORDER_EVENTS/obs/order-processor/meta.inf": unexpected end of JSON input`, true},
		{`Error adding consumer 'ORDERSTORE > ORDER_EVENTS > order-processor': error creating store for consumer: corrupt state file (10104)`, true},
		{`Error unmarshalling consumer metafile "orderstore-data/jetstream/ORDERSTORE/streams/ORDER_EVENTS/obs/order-processor-2/meta.inf": unexpected end of JSON input`, false},
		{`Error adding consumer 'ORDERSTORE > ORDER_EVENTS > order-processor-2': error creating store for consumer: corrupt state file (10104)`, false},
		{`Error unmarshalling consumer metafile "orderstore-data/jetstream/OTHER/streams/ORDER_EVENTS/obs/order-processor/meta.inf": unexpected end of JSON input`, false},
	} {
		c := &Check{Dir: "/abs/orderstore-data", Account: "ORDERSTORE", Spec: spec, problems: []string{tt.problem}}
		if got := c.natsNamedConsumer(); got != tt.want {
			t.Errorf("natsNamedConsumer for %q = %t, want %t", tt.problem, got, tt.want)
		}
	}
}
