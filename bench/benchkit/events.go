package benchkit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Types are the event types, an order's first four events' in turn.
var Types = [...]string{"created", "paid", "shipped", "delivered", "cancelled"}

// Orders makes an event sequence: each event picks one of its orders
// uniformly at random (a fixed seed), its type by Type.
type Orders struct {
	r     *rand.Rand
	Count []int32 // events per order so far
	Last  []uint8 // the type of each order's latest event
}

// NewOrders is Orders of orders orders, drawn from the random stream (seed, stream).
func NewOrders(seed, stream uint64, orders int) *Orders {
	return &Orders{r: rand.New(rand.NewPCG(seed, stream)), Count: make([]int32, orders), Last: make([]uint8, orders)}
}

// Next is the next event's order and type.
func (g *Orders) Next() (order int, typ uint8) {
	order = g.r.IntN(len(g.Count))
	typ = g.Type(g.Count[order])
	g.Count[order]++
	g.Last[order] = typ
	return order, typ
}

// Type is the type (an index of Types) of an order's event after c events: created, paid,
// shipped, delivered for the first four; later ones (amendments, returns) paid, shipped, delivered
// (30% each) or cancelled (10%), drawn from g's random stream.
func (g *Orders) Type(c int32) uint8 {
	if c < 4 {
		return uint8(c)
	}
	return uint8(min(g.r.IntN(10)/3, 3)) + 1 // 0-2: paid, 3-5: shipped, 6-8: delivered, 9: cancelled
}

// Distinct is how many orders got at least one event.
func (g *Orders) Distinct() int {
	n := 0
	for _, c := range g.Count {
		if c > 0 {
			n++
		}
	}
	return n
}

// OrderID is order o's id: order-NNNNNN.
func OrderID(o int) string { return fmt.Sprintf("order-%06d", o) }

// EventMsg is an event of order id of type typ on orders.TYPE: {"order_id":ID,"status":TYPE}, with
// a "note" padding it to about size bytes when size > 0 (the projection keeps none of it).
func EventMsg(id, typ string, size int) *nats.Msg {
	data := make([]byte, 0, max(64, size+2))
	data = append(data, `{"order_id":"`...)
	data = append(data, id...)
	data = append(data, `","status":"`...)
	data = append(data, typ...)
	if size > 0 {
		data = append(data, `","note":"`...)
		data = append(data, strings.Repeat("x", max(size-len(data)-2, 0))...)
	}
	data = append(data, `"}`...)
	return &nats.Msg{Subject: "orders." + typ, Data: data}
}

// Retryable is a publish the appliance asks to send again: a 429 (admission sheds load after 2 s in
// line) or no responders (the account's publishes are paused).
func Retryable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		(errors.As(err, &apiErr) && apiErr.Code == 429)
}
