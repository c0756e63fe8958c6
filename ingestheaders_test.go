package orderstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// The headers a producer may not set: nats' own account stamp of a
// service import (Nats-Request-Info), in any spelling, is dropped, a forged
// Nats-Stream-Source and Orderstore-Epoch are replaced; every stored event
// carries this run's epoch, and the stream's metadata lists where each run
// began, across a restart.
func TestIngestOwnsItsHeaders(t *testing.T) {
	var cfg orderstore.Config
	keep := func(c *orderstore.Config) { cfg = *c }
	app := orderstoretest.Start(t, keep)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()

	// The account comes from the subject the publisher's account's
	// import delivers on, never from a header: the ingest service drops
	// Nats-Request-Info in every spelling.
	exact := &nats.Msg{Subject: "orders.created", Data: []byte(`{"order_id":"f-2"}`), Header: nats.Header{
		"Nats-Request-Info":  {`{"acc":"USER1_a"}`, `{"acc":"USER1_victim"}`},
		"Nats-Stream-Source": {"ORDER_EVENTS:xyz 999999"},
		"Orderstore-Epoch":   {"forged"},
	}}
	exact.Header["nats-request-info"] = []string{`{"acc":"USER1_victim"}`} // another spelling
	ack, err := js.PublishMsg(ctx, exact, jetstream.WithMsgID("id-1"))
	if err != nil {
		t.Fatalf("a publish with nats' own headers set: %v", err)
	}
	st, err := js.Stream(ctx, cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != "ANONYMOUS:id-1" {
		t.Errorf("stored Nats-Msg-Id %q, want it scoped to the publisher's real account (ANONYMOUS:id-1)", got)
	}
	if m.Header.Get("Nats-Stream-Source") != "" || m.Header.Get("Nats-Request-Info") != "" || len(m.Header["nats-request-info"]) > 0 {
		t.Errorf("stored headers %v: nats' own headers from a producer must not be stored", m.Header)
	}
	epoch1 := m.Header.Get(orderstore.EpochHeader)
	if epoch1 == "" || epoch1 == "forged" {
		t.Errorf("stored epoch %q, want this run's", epoch1)
	}
	epochs := st.CachedInfo().Config.Metadata["orderstore_epochs"]
	if !strings.HasPrefix(epochs, epoch1+":1") {
		t.Errorf("stream metadata orderstore_epochs = %q, want this run's epoch beginning at 1", epochs)
	}

	// A restart is a new run: a new epoch, beginning after the last event.
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app2 := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	js2 := embeddedtest.JetStream(t, app2)
	ack2, err := js2.Publish(ctx, "orders.created", []byte(`{"order_id":"f-3"}`))
	if err != nil {
		t.Fatal(err)
	}
	st2, err := js2.Stream(ctx, cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := st2.GetMsg(ctx, ack2.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	epoch2 := m2.Header.Get(orderstore.EpochHeader)
	if epoch2 == "" || epoch2 == epoch1 {
		t.Errorf("epoch after a restart %q, want a new one (was %q)", epoch2, epoch1)
	}
	want := epoch1 + ":1," + epoch2 + ":" + itoa(ack.Sequence+1)
	if got := st2.CachedInfo().Config.Metadata["orderstore_epochs"]; got != want {
		t.Errorf("orderstore_epochs after a restart = %q, want %q", got, want)
	}
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Nats-Expected-Last-Msg-Id is scoped as Nats-Msg-Id is: a producer that
// expects the id it published last gets its next event stored, and one
// that expects another is refused.
func TestExpectLastMsgIDScoped(t *testing.T) {
	app := orderstoretest.Start(t)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"e-1"}`), jetstream.WithMsgID("e-1-created")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.paid", []byte(`{"order_id":"e-1"}`), jetstream.WithMsgID("e-1-paid"),
		jetstream.WithExpectLastMsgID("e-1-created")); err != nil {
		t.Fatalf("a publish expecting the producer's own last id: %v", err)
	}
	if _, err := js.Publish(ctx, "orders.shipped", []byte(`{"order_id":"e-1"}`), jetstream.WithMsgID("e-1-shipped"),
		jetstream.WithExpectLastMsgID("e-1-created")); err == nil {
		t.Fatal("a publish expecting an id that is not the last was stored")
	}
}

// A refused Nats-Expected-Last-Msg-Id does not name another producer's
// last id (its account and its own Nats-Msg-Id): ids are scoped by producer.
func TestExpectLastMsgIDNamesNoOtherProducer(t *testing.T) {
	app := orderstoretest.Start(t, securedConfig)
	ctx := context.Background()
	_, p1 := connectAs(t, app, "p1", p1Password)
	_, p2 := connectAs(t, app, "p2", p2Password)
	if _, err := p1.Publish(ctx, "orders.created", []byte(`{"order_id":"e-1"}`), jetstream.WithMsgID("p1-private-id")); err != nil {
		t.Fatal(err)
	}
	_, err := p2.Publish(ctx, "orders.paid", []byte(`{"order_id":"e-1"}`), jetstream.WithExpectLastMsgID("p2-last"))
	if err == nil || strings.Contains(err.Error(), "p1-private-id") || strings.Contains(err.Error(), "_p1") || !strings.Contains(err.Error(), "another producer's") {
		t.Fatalf("p2's publish expecting its last id after p1's: %v; want refused, naming no id of p1's", err)
	}
}
