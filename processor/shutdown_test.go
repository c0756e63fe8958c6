package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// When the drain times out, Run cancels the handlers' context and returns
// only once every handler call it made has returned and been settled: an
// embedding program that closes its connection or store after Run must not
// race handlers still at work.
func TestRunWaitsForHandlersAfterDrainTimeout(t *testing.T) {
	e := newEnv(t)
	const events = 8
	var msgs []*nats.Msg
	for i := range events {
		msgs = append(msgs, event("orders.created", fmt.Sprintf("o-%d", i), "", ""))
	}
	e.publish(t, msgs)

	var started, returned atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		started.Add(1)
		defer returned.Add(1)
		<-ctx.Done()
		time.Sleep(300 * time.Millisecond) // cleanup that outlives the cancel
		return nil                         // it finished: the event is applied
	})
	pc := e.processorConfig(h)
	pc.DrainTimeout = 200 * time.Millisecond
	p, err := processor.New(embeddedtest.JetStream(t, e.srv), pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if n := started.Load(); n < 4 {
			return fmt.Errorf("%d handler calls started, want at least 4 blocked at once", n)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of the cancel")
	}
	s, r, st := started.Load(), returned.Load(), p.Stats()
	if r != s {
		t.Errorf("after Run returned, %d of %d handler calls were still running", s-r, s)
	}
	if st.Processed != uint64(s) {
		t.Errorf("after Run returned, Processed = %d, want %d: each handler call returned nil, and must be acked before Run returns", st.Processed, s)
	}
	if st.Running {
		t.Error("Running after Run returned")
	}

	// The server sees exactly those acks; the events never handed to a
	// handler stay unacked for redelivery. Nothing is settled afterwards.
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		c, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
		if err != nil {
			return err
		}
		ci, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if want := events - int(s); ci.NumAckPending != want {
			return fmt.Errorf("ack pending %d, want %d (events %d, acked %d)", ci.NumAckPending, want, events, s)
		}
		return nil
	})
	if after := p.Stats(); after != st {
		t.Errorf("stats changed after Run returned:\n got %+v\nwant %+v", after, st)
	}
	if n := started.Load(); n != s {
		t.Errorf("%d handler calls started after Run returned", n-s)
	}
}

// A handler stuck until its context ends, with more events of its order
// queued than its partition holds: the cancel of Run's ctx is still seen
// (the router does not wait on the full partition), the drain deadline
// cancels the handler, and the event it was cut short on is neither a
// failure nor a dead letter.
func TestRunStopsWithAFullPartition(t *testing.T) {
	e := newEnv(t)
	var msgs []*nats.Msg
	for range 60 { // far more than one partition queues (max_ack_pending 500 / 64)
		msgs = append(msgs, event("orders.paid", "o-stuck", "", ""))
	}
	e.publish(t, msgs)
	var started, returned atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		started.Add(1)
		defer returned.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	pc := e.processorConfig(h)
	pc.DrainTimeout = 200 * time.Millisecond
	p, err := processor.New(embeddedtest.JetStream(t, e.srv), pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		l, err := processor.Lag(context.Background(), e.js, e.cfg.Stream.Name, e.cfg.Processor.Durable)
		if err != nil {
			return err
		}
		if started.Load() != 1 || l.Pending != 0 {
			return fmt.Errorf("%d handler calls, %d events not yet delivered", started.Load(), l.Pending)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of the cancel (drain timeout 200ms)")
	}
	if s, r := started.Load(), returned.Load(); s != 1 || r != 1 {
		t.Errorf("handler calls: %d started, %d returned; want 1 and 1", s, r)
	}
	if st := p.Stats(); st.Failed != 0 || st.DeadLettered != 0 || st.Processed != 0 {
		t.Errorf("stats %+v, want nothing failed, dead-lettered or processed", st)
	}
}

// When the durable is deleted under it, Run returns its error promptly,
// having canceled and waited for a handler that was at work.
func TestRunReturnsWhenTheConsumerIsDeleted(t *testing.T) {
	e := newEnv(t)
	e.publish(t, []*nats.Msg{event("orders.created", "o-1", "", "")})
	var started, returned atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		started.Add(1)
		defer returned.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	p, err := processor.New(embeddedtest.JetStream(t, e.srv), e.processorConfig(h))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if started.Load() != 1 {
			return fmt.Errorf("handler not called yet")
		}
		return nil
	})
	if err := e.js.DeleteConsumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), e.cfg.Processor.Durable) {
			t.Errorf("Run = %v, want an error naming consumer %q", err, e.cfg.Processor.Durable)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of the consumer's deletion")
	}
	if s, r := started.Load(), returned.Load(); s != r {
		t.Errorf("after Run returned, %d of %d handler calls were still running", s-r, s)
	}
}
