//go:build linux

package powerloss_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
)

// A duplicate's ack vouches for its original as an ack does: when a run
// wrote the original and never synced it (its round's sync failed; a
// crash or nats restarted on the store after a failed write leave the same),
// the next run reads it back from the page cache, and the producer's retry
// with the same Nats-Msg-Id is answered "duplicate". A power cut right
// after that ack must not take the event.
func TestGroupCommitDuplicateAckSurvivesPowerCut(t *testing.T) {
	p := mount(t, Journal)
	store := filepath.Join(p.Mountpoint(), "store")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() (*embedded.Server, jetstream.JetStream) {
		t.Helper()
		srv, err := embedded.Start(ctx, embedded.Config{StoreDir: store, Port: -1, GroupCommit: true})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			srv.Close()
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return srv, js
	}

	s1, js := start()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage}); err != nil {
		s1.Close()
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"1"}`), jetstream.WithMsgID("order-1")); err != nil {
		s1.Close()
		t.Fatal(err)
	}
	s1.NATSServer().InjectGroupCommitFault(errors.New("input/output error (injected)"))
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"2"}`), jetstream.WithMsgID("order-2")); err == nil {
		s1.Close()
		t.Fatal("a publish was acked after its sync failed")
	}
	s1.Close()

	s2, js := start()
	ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"2"}`), jetstream.WithMsgID("order-2"))
	if err != nil || !ack.Duplicate {
		s2.Close()
		t.Fatalf("the retry after the restart: %+v, %v; want a duplicate's ack", ack, err)
	}
	p.Cut()
	s2.Close()
	restore(t, p)

	s3, js := start()
	defer s3.Close()
	st, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetMsg(ctx, ack.Sequence); err != nil || string(m.Data) != `{"order_id":"2"}` {
		t.Fatalf("after the power cut, sequence %d (acknowledged as a duplicate): %v, %v; want the event", ack.Sequence, m, err)
	}
}
