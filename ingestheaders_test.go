package orderstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
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
		"Nats-Request-Info":  {`{"acc":"USER_a"}`, `{"acc":"USER_victim"}`},
		"Nats-Stream-Source": {"ORDER_EVENTS:xyz 999999"},
		"Orderstore-Epoch":   {"forged"},
	}}
	exact.Header["nats-request-info"] = []string{`{"acc":"USER_victim"}`} // another spelling
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

// A producer's event keeps no header that a reader takes for nats' or orderstore's word on it:
// what a direct get adds (Nats-Subject, Nats-Time-Stamp, ...: nats.go reads the first of each,
// the stored one), a delivery's status (Status, Description: a pull consumer takes an event
// without payload for nats' own status message, "409 Consumer Deleted" stopping the processor's
// pull), and orderstore's own (Orderstore-*: a dead letter's). Each is dropped at ingest: the
// history and as-of read the event where it is, the empty event is dead-lettered and the processor
// goes on, and the dead letter says what orderstore found, not what the producer wrote.
func TestIngestDropsHeadersReadersTrust(t *testing.T) {
	app := orderstoretest.Start(t)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	created, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Data: []byte(`{"order_id":"fh-1"}`), Header: nats.Header{
		"Nats-Subject": {"orders.cancelled"}, "Nats-Time-Stamp": {"2001-01-01T00:00:00Z"}, "Nats-Sequence": {"1"}, "Nats-Stream": {"ELSEWHERE"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Header: nats.Header{
		"Status": {"409"}, "Description": {"Consumer Deleted"},
		"Orderstore-Trimmed": {"payload 1 bytes"}, "Orderstore-Original-Source": {"ORDER_EVENTS:x 1"}, "orderstore-poison": {"true"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"fh-2"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, err := app.Order(ctx, "fh-2"); err != nil {
			return fmt.Errorf("the valid event after the forged ones: %w (stats %+v)", err, app.Stats())
		}
		if st := app.Stats(); st.DeadLettered != 1 {
			return fmt.Errorf("dead-lettered %d, want the empty event's 1 (stats %+v)", st.DeadLettered, st)
		}
		return nil
	})
	page, err := app.OrderEvents(ctx, "fh-1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 {
		t.Fatalf("history of fh-1: %+v, want its one event", page)
	}
	if ev := page.Events[0]; ev.Subject != "orders.created" || ev.Type != "created" || ev.Sequence != created.Sequence || ev.Time.Year() < 2020 {
		t.Errorf("history of fh-1: %s %s #%d at %s, want orders.created #%d now (not the producer's headers)", ev.Subject, ev.Type, ev.Sequence, ev.Time, created.Sequence)
	}
	live, err := app.Order(ctx, "fh-1")
	if err != nil {
		t.Fatal(err)
	}
	asOf, err := app.OrderAsOf(ctx, "fh-1", orderstore.AsOf{})
	if err != nil {
		t.Fatal(err)
	}
	if asOf.Order.Status != live.Status {
		t.Errorf("fh-1 as of now: %q, the projection: %q", asOf.Order.Status, live.Status)
	}
	dls, _, err := app.DeadLetters(ctx, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v, want 1", dls)
	}
	if d := dls[0]; d.Trimmed != "" || !d.Poison || d.Header.Get("Status") != "" || d.Header.Get("Orderstore-Original-Source") != "" || len(d.Header["orderstore-poison"]) > 0 {
		t.Errorf("dead letter of the empty event: trimmed %q, poison %v, headers %v; want none of the producer's Orderstore-* or Status", d.Trimmed, d.Poison, d.Header)
	}
	if _, err := app.ReplayDeadLetter(ctx, dls[0].Sequence); err != nil {
		t.Errorf("replay of the empty event's dead letter: %v", err)
	}
}

// nats-server's own clients publish into the stream for whoever configures them: a stream's
// RePublish, the stream's ack to a publish whose reply subject is one of the stream's. Admission
// took them for orderstore's own connection: the anonymous client's republish was stored with
// the id of dead letter 1's replay and kept its Orderstore-Replay-Of (that replay was then
// answered "duplicate" and the dead letter deleted unreplayed), and an ack was stored as an event.
// Both are refused now, unanswered: nothing is stored, and the replay replays.
func TestIngestRefusesInternalPublishers(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx := context.Background()
	dlq := app.Config().Processor.DeadLetterStream
	js := embeddedtest.JetStream(t, app) // anonymous, in the stream's account
	h := nats.Header{processor.HeaderSubject: {"orders.created"}, processor.HeaderSequence: {"1"}}
	dl, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq." + dlq + ".orders.created", Header: h, Data: []byte(`{"order_id":"dead"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SIDE", Subjects: []string{"side.*"},
		RePublish: &jetstream.RePublish{Source: "side.*", Destination: "orders.{{wildcard(1)}}"}}); err != nil {
		t.Fatal(err)
	}
	replayID := processor.ReplayMsgIDPrefix(dlq) + strconv.FormatUint(dl.Sequence, 10)
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "side.created", Data: []byte(`{"order_id":"forged"}`),
		Header: nats.Header{"Nats-Msg-Id": {replayID}, processor.HeaderReplayOf: {"1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().PublishMsg(&nats.Msg{Subject: "orders.created", Reply: "orders.acked", Data: []byte(`{"order_id":"plain"}`)}); err != nil {
		t.Fatal(err)
	}
	// The durable guard answers on orderstore's own connection, to the reply the client named.
	if err := js.Conn().PublishRequest("$JS.API.CONSUMER.DELETE."+app.Config().Stream.Name+"."+app.Config().Processor.Durable, "orders.guarded", nil); err != nil {
		t.Fatal(err)
	}
	// The plain event is stored; the republish, its ack and the guard's answer are refused (or,
	// before, stored).
	var msgs uint64
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		st, err := integrityGetStatus(app)
		if err != nil {
			return err
		}
		if msgs, _ = integrityMsgs(t, js); msgs < 4 && st.Guard["refused"] < 3 {
			return fmt.Errorf("%d events stored, %d refused: want 1 and 3", msgs, st.Guard["refused"])
		}
		return nil
	})
	s, err := js.Stream(ctx, app.Config().Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= msgs; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != `{"order_id":"plain"}` {
			t.Errorf("event %d: %s with headers %v, want only the plain publish stored", seq, m.Data, m.Header)
		}
	}
	seq, err := app.ReplayDeadLetter(ctx, dl.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"order_id":"dead"}` || m.Header.Get(processor.HeaderReplayOf) != "1" || m.Header.Get("Nats-Msg-Id") != "ORDERSTORE:"+replayID {
		t.Errorf("dead letter %d replayed as event %d: %s with headers %v, want its own payload and replay headers", dl.Sequence, seq, m.Data, m.Header)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error { _, err := app.Order(ctx, "dead"); return err })
}
