package processor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/processor"
)

// ownLogic is a library user's handler with state of its own: the
// sequences it applied, per order. It fails some first deliveries, calls
// events with status "bad" poison and panics on status "boom" (every
// delivery, so those run out of deliveries).
type ownLogic struct {
	mu      sync.Mutex
	applied map[string][]uint64
}

func (h *ownLogic) Handle(_ context.Context, ev processor.Event) error {
	switch {
	case ev.Status == "bad":
		return processor.Poison(errors.New("bad status"))
	case ev.Status == "boom":
		panic("boom")
	case ev.Delivered == 1 && ev.Sequence%7 == 0:
		return errors.New("transient: the payment service is down")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Contains(h.applied[ev.OrderID], ev.Sequence) {
		return processor.ErrDuplicate
	}
	h.applied[ev.OrderID] = append(h.applied[ev.OrderID], ev.Sequence)
	return nil
}

// A library user's own handler gets the history index beside its logic
// (processor.WithHistory): the index lists exactly the events the handler
// applied, in stream order, the built-in fold as of any point equals the
// oracle's, and FoldEvents hands the handler's own fold the same events.
// Poison and exhausted events are dead-lettered and indexed nowhere; a
// panic fails only its own event, not the batch it came in.
func TestWithHistoryKeepsTheIndexBesideAHandler(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(20, 20))
	var msgs []*nats.Msg
	wantDead := 0
	for i := range 900 {
		id := fmt.Sprintf("o-%d", r.IntN(60))
		if r.IntN(4) == 0 {
			id = "hot"
		}
		status := []string{"created", "paid", "shipped"}[i%3]
		switch i % 97 {
		case 13:
			status, wantDead = "bad", wantDead+1
		case 61:
			status, wantDead = "boom", wantDead+1
		}
		msgs = append(msgs, event("orders."+status, id, status, ""))
	}
	h := &ownLogic{applied: map[string][]uint64{}}
	p := e.projection(t)
	e.start(t, processor.WithHistory(h, p))
	e.publish(t, msgs)
	e.waitCaughtUp(t, 120*time.Second)

	ctx := context.Background()
	dls, _, err := processor.ListDeadLetters(ctx, e.js, e.cfg.Processor.DeadLetterStream, 1, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != wantDead {
		t.Errorf("%d dead letters, want %d (the poison and panicking events only)", len(dls), wantDead)
	}
	// The handler applied exactly what the oracle folds: every event not
	// dead-lettered, once.
	want := e.oracle(t)
	h.mu.Lock()
	for id, evs := range want {
		var seqs []uint64
		for _, ev := range evs {
			seqs = append(seqs, ev.Seq)
		}
		got := slices.Sorted(slices.Values(h.applied[id]))
		if !slices.Equal(got, seqs) {
			t.Errorf("order %s: the handler applied %v, the oracle folds %v", id, got, seqs)
		}
	}
	if len(h.applied) != len(want) {
		t.Errorf("the handler applied events of %d orders, the oracle %d", len(h.applied), len(want))
	}
	h.mu.Unlock()
	e.checkProjection(t)
	e.checkHistory(t, p, 30, r)

	// FoldEvents hands the handler's own fold the order's events up to a
	// point: those the oracle has up to it.
	s, err := e.js.Stream(ctx, e.cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	hot := want["hot"]
	point := hot[len(hot)/2].Seq
	var folded []uint64
	st, err := p.FoldEvents(ctx, s, "hot", processor.AsOfPoint{Seq: point}, func(ev processor.Event) error {
		folded = append(folded, ev.Sequence)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantSeqs []uint64
	for _, ev := range hot[:len(hot)/2+1] {
		wantSeqs = append(wantSeqs, ev.Seq)
	}
	if !slices.Equal(folded, wantSeqs) || st.Folded != len(wantSeqs) || !st.Complete {
		t.Errorf("fold of hot up to %d: %v (folded %d, complete %v), want %v", point, folded, st.Folded, st.Complete, wantSeqs)
	}
}
