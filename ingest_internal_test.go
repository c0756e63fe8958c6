package orderstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// nats gives each request through a service import a reply subject of 6
// random characters in one space per exporting account; when a second
// request in flight gets the same one, nats routes that subject to the
// second producer from then on. The ingest service must not send the
// first publish's answer there (the second producer would take another
// event's ack for its own): the first gets none, the second its own, and
// the collision is counted. Two requests with one reply subject stand in
// for nats' collision.
func TestIngestReplyCollision(t *testing.T) {
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDER_EVENTS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	// Group commit's sync held until both requests are in flight, so that
	// the first one's answer cannot go out before the second arrives.
	release := make(chan struct{})
	var syncs atomic.Int64
	stats := &commitStats{batchHist: newHistogram(batchBuckets)}
	cfg := ingestConfig{Subjects: []string{"orders.>"}, Prefix: ingestPrefix, Stream: "ORDER_EVENTS", Stats: stats,
		Sync: func(ctx context.Context) error {
			syncs.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	inc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer inc.Close()
	in, err := startIngest(inc, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())

	answers := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("producer.reply", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range 2 {
		if err := nc.PublishRequest(ingestPrefix+StreamAccount+".orders.created", "producer.reply", fmt.Appendf(nil, `{"order_id":"c-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Both stored by the stream and waiting for a sync, neither answered.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.inFlight != 2 || len(in.pending) != 0 || syncs.Load() == 0 {
			return fmt.Errorf("%d in flight, %d waiting for the stream, %d syncs, %d answers", in.inFlight, len(in.pending), syncs.Load(), len(answers))
		}
		return nil
	})
	close(release)
	var got []*nats.Msg
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for {
			select {
			case m := <-answers:
				got = append(got, m)
				continue
			default:
			}
			break
		}
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.inFlight != 0 {
			return fmt.Errorf("%d still in flight, %d answers so far", in.inFlight, len(got))
		}
		return nil
	})
	// Anything sent after the last release would be on its way: a round
	// trip through the server orders it before this flush's answer.
	if err := inc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for len(answers) > 0 {
		got = append(got, <-answers)
	}
	if len(got) != 1 {
		t.Fatalf("%d answers on the shared reply subject, want 1 (the later publish's own): the earlier one's ack would be taken as the later one's", len(got))
	}
	var ack struct {
		Stream string `json:"stream"`
		Seq    uint64 `json:"seq"`
	}
	if err := json.Unmarshal(got[0].Data, &ack); err != nil || ack.Seq != 2 {
		t.Fatalf("the answer is %q, want the ack of the second publish (seq 2)", got[0].Data)
	}
	if n := in.collided.Load(); n != 1 {
		t.Fatalf("collisions counted: %d, want 1", n)
	}
}
