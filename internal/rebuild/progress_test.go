package rebuild

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// holdingTarget folds like fakeTarget, but holds every event of an order
// numbered from hold on until release is closed.
type holdingTarget struct {
	*fakeTarget
	hold    int
	release chan struct{}
}

func (h *holdingTarget) Shadow(ctx context.Context, fresh bool) (processor.Handler, error) {
	inner, _ := h.fakeTarget.Shadow(ctx, fresh)
	return processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		if n, _ := strconv.Atoi(strings.TrimPrefix(ev.OrderID, "o-")); n >= h.hold {
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner.Handle(ctx, ev)
	}), nil
}

// A fold shorter than one step (50,000 events) shows its progress as it
// goes: the orders applied so far count, not only the steps done.
func TestProgressMovesWithinAStep(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	for _, sc := range []jetstream.StreamConfig{{Name: "EVENTS", Subjects: []string{"orders.>"}}, {Name: "DLQ", Subjects: []string{"dlq.>"}}} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	const events = 3000
	for i := range events {
		if _, err := js.PublishAsync("orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	target := &holdingTarget{
		fakeTarget: &fakeTarget{folded: map[uint64]bool{}, entered: make(chan struct{}),
			takeover: func(context.Context) error { return nil }},
		hold: applyChunk, release: make(chan struct{}),
	}
	r, err := New(Config{JS: js, Stream: "EVENTS", DeadLetterStream: "DLQ", BatchSize: events, // one step, however the pulls split it
		StatePath: filepath.Join(t.TempDir(), "rebuild.json"), Target: target, Pause: (&pauser{}).pause})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if _, err := r.Start(ctx, Options{}); err != nil {
		t.Fatal(err)
	}
	// The first chunk of orders (o-0 … o-999) is applied; the rest are
	// held, so the step's position has not moved.
	for {
		st := r.Status()
		if st.Done >= applyChunk {
			if st.Done >= st.Total || st.Position != 0 {
				t.Fatalf("done %d of %d at position %d while the step is held", st.Done, st.Total, st.Position)
			}
			if st.Total != events {
				t.Errorf("total %d, want %d", st.Total, events)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("progress stayed at %d of %d while %d orders were applied", st.Done, st.Total, applyChunk)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(target.release)
	select {
	case <-target.entered:
	case <-ctx.Done():
		t.Fatal("no takeover")
	}
}
