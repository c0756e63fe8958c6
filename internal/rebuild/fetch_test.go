package rebuild

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// A fold whose consumer nats will not make fails at once, saying why
// (the stream allows one consumer and another client holds it), rather
// than retrying: it is not nats electing a leader.
func TestFoldThatCannotReadFails(t *testing.T) {
	js := oneConsumerStream(t, 20)
	ctx := context.Background()
	if _, err := js.CreateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	target := &fakeTarget{folded: map[uint64]bool{}, entered: make(chan struct{}), takeover: func(context.Context) error { return nil }}
	r := startFold(t, js, target, 0)
	waitFailedAtTheLimit(t, r)
}

// What counts as nats not answering for a while (the fold goes on from
// its position) and what does not (it fails).
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("stream %q: %w", "EVENTS", context.DeadlineExceeded), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 503}), true},
		{fmt.Errorf("stream %q: %w", "EVENTS", jetstream.ErrServerShutdown), true},                                                          // the consumer's leader stopped
		{fmt.Errorf("stream %q: %w", "EVENTS", &jetstream.APIError{Code: 500, ErrorCode: 10119, Description: "consumer is offline"}), true}, // made on a node that stopped
		{&jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, false},
		{&jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "insufficient resources"}, false},
		{errors.New("the bucket is full"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// blockingTarget folds into nothing; its handler waits at the first event
// until release is closed.
type blockingTarget struct {
	entered, release chan struct{}
	once             sync.Once
}

func (b *blockingTarget) Shadow(context.Context, bool) (processor.Handler, error) {
	return processor.HandlerFunc(func(context.Context, processor.Event) error {
		b.once.Do(func() { close(b.entered); <-b.release })
		return nil
	}), nil
}
func (b *blockingTarget) Durable(context.Context) error             { return nil }
func (b *blockingTarget) Takeover(context.Context, *Takeover) error { return nil }
func (b *blockingTarget) Discard(context.Context) error             { return nil }
func (b *blockingTarget) HighWater(context.Context) (uint64, error) { return 0, nil }

// A fold whose next fetch cannot make its consumer fails, saying why,
// instead of hanging at its position. nats.go's ordered consumer makes a
// new consumer for every fetch and, left to itself, tries without end:
// the fetch never returned, and the rebuild said "folding" for ever (a
// cluster's rebuild sat at 2000 of 6000 for minutes after a node
// stopped). Here, half-way, another client takes the one consumer the
// stream allows.
func TestFoldWhoseFetchCannotMakeItsConsumerFails(t *testing.T) {
	// Three tries: the ordered consumer deletes its last consumer
	// without waiting, so at one consumer a make can fail once before the
	// deletion is done.
	resets := orderedResets
	orderedResets = 3
	t.Cleanup(func() { orderedResets = resets })
	js := oneConsumerStream(t, 100)
	ctx := context.Background()
	target := &blockingTarget{entered: make(chan struct{}), release: make(chan struct{})}
	r := startFold(t, js, target, 10)
	embeddedtest.WaitFor(t, time.Minute, func() error {
		select {
		case <-target.entered:
			return nil
		default:
			st := r.Status()
			return fmt.Errorf("the fold has not begun: %s at %d, %s", st.State, st.Done, st.Error)
		}
	})
	// The first step holds the first batch; the reader has the second
	// queued and fetched the third, and waits to hand it over: its
	// consumer has delivered what it fetched.
	s, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	var held string
	embeddedtest.WaitFor(t, time.Minute, func() error {
		names := s.ConsumerNames(ctx)
		var all []string
		for n := range names.Name() {
			all = append(all, n)
		}
		if len(all) != 1 {
			return fmt.Errorf("consumers %v, want the fold's one", all)
		}
		c, err := s.Consumer(ctx, all[0])
		if err != nil {
			return err
		}
		if ci := c.CachedInfo(); ci.Delivered.Stream < 30 || ci.NumAckPending+int(ci.NumPending) != 100-int(ci.Delivered.Stream) {
			return fmt.Errorf("the fold's consumer delivered up to %d", ci.Delivered.Stream)
		}
		held = all[0]
		return nil
	})
	if err := s.DeleteConsumer(ctx, held); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	close(target.release)
	waitFailedAtTheLimit(t, r)
}

// oneConsumerStream is a stream EVENTS that allows one consumer, with
// events in it, and an empty DLQ.
func oneConsumerStream(t *testing.T, events int) jetstream.JetStream {
	t.Helper()
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{{Name: "EVENTS", Subjects: []string{"orders.>"}, MaxConsumers: 1}, {Name: "DLQ", Subjects: []string{"dlq.>"}}} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range events {
		if _, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i%5)); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// startFold runs a Runner on EVENTS into target and starts a rebuild
// (batch events per step; 0: the default).
func startFold(t *testing.T, js jetstream.JetStream, target Target, batch int) *Runner {
	t.Helper()
	r, err := New(Config{JS: js, Stream: "EVENTS", DeadLetterStream: "DLQ", StatePath: filepath.Join(t.TempDir(), "rebuild.json"),
		Target: target, Pause: (&pauser{}).pause, BatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := r.Start(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitFailedAtTheLimit waits for r's rebuild to fail, naming the stream
// and its consumer limit.
func waitFailedAtTheLimit(t *testing.T, r *Runner) {
	t.Helper()
	embeddedtest.WaitFor(t, time.Minute, func() error {
		st := r.Status()
		if st.State != status.RebuildFailed {
			return fmt.Errorf("rebuild %s at %d of %d, want failed", st.State, st.Done, st.Total)
		}
		if !strings.Contains(st.Error, "EVENTS") || !strings.Contains(st.Error, "maximum consumers") {
			t.Errorf("the failed rebuild's error does not say why: %q", st.Error)
		}
		return nil
	})
}

// A step of the fold holds about stepBytes of events, whatever their size: 50,000 events of
// max_payload (1 MiB by default) would be 50 GB in memory.
func TestFoldStepsBoundedInBytes(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	const events = 100 // 100 MB, three steps and more
	data := fmt.Appendf(nil, `{"order_id":"o-1","pad":"%s"}`, strings.Repeat("x", 1000<<10))
	for range events {
		if _, err := js.Publish(ctx, "orders.paid", data); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, "EVENTS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := &folder{r: &Runner{cfg: Config{JS: js, BatchSize: 50000}}, cons: cons, batches: make(chan fetched)}
	go f.read(ctx)
	for n := 0; n < events; {
		b := <-f.batches
		if b.err != nil {
			t.Fatal(b.err)
		}
		size := 0
		for _, m := range b.msgs {
			size += len(m.Data())
		}
		if size > stepBytes+2<<20 {
			t.Fatalf("a step of %d events holds %d bytes, want about %d at most", len(b.msgs), size, stepBytes)
		}
		n += len(b.msgs)
	}
}
