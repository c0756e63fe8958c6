package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// Config.Sync runs after a batch's handlers and dead-lettering and before
// any of its events is acked or terminated: while it fails nothing is
// settled (the consumer's ack floor stays, no dead letter is terminated),
// and once it succeeds everything is.
func TestSyncBeforeSettling(t *testing.T) {
	e := newEnv(t)
	var msgs []*nats.Msg
	for i := range 50 {
		msgs = append(msgs, event("orders.created", fmt.Sprintf("o-%d", i), "", ""))
	}
	msgs = append(msgs, &nats.Msg{Subject: "orders.created", Data: []byte("not json")})
	e.publish(t, msgs)

	var failing atomic.Bool
	failing.Store(true)
	var applied atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		applied.Add(1)
		return nil
	})
	pc := e.processorConfig(h)
	pc.Backoff = []time.Duration{50 * time.Millisecond}
	pc.MaxDeliver = 1000 // keep retrying while the sync fails
	pc.Sync = func(context.Context) error {
		if failing.Load() {
			return errors.New("disk says no")
		}
		return nil
	}
	p, err := processor.New(embeddedtest.JetStream(t, e.srv), pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
	if err != nil {
		t.Fatal(err)
	}
	// Handled, and redelivered after the failed syncs, yet never settled.
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if n := applied.Load(); n < 150 {
			return fmt.Errorf("%d handler calls", n)
		}
		return nil
	})
	ci, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ci.AckFloor.Stream != 0 || p.Stats().Processed != 0 || p.Stats().DeadLettered != 0 {
		t.Fatalf("settled while the sync fails: ack floor %d, stats %+v", ci.AckFloor.Stream, p.Stats())
	}
	failing.Store(false)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		ci, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if ci.AckFloor.Stream != 51 {
			return fmt.Errorf("ack floor %d, stats %+v", ci.AckFloor.Stream, p.Stats())
		}
		return nil
	})
	if s := p.Stats(); s.Processed != 50 || s.DeadLettered != 1 {
		t.Errorf("stats %+v, want 50 processed and 1 dead-lettered", s)
	}
	dl, err := e.js.Stream(context.Background(), e.cfg.Processor.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := dl.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("%d dead letters stored, want 1 (the copy is deduplicated across retries)", n)
	}
}
