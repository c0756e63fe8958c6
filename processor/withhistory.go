package processor

import (
	"context"
	"errors"
	"fmt"
)

// WithHistory returns a Handler that applies each event to h and then, once h has applied it, to p,
// which keeps each order's state and history index beside h's own ([Projection.History],
// [Projection.AsOf], [Projection.FoldEvents]; docs/processor.md, "With your own
// Processor.Handler"). The appliance wraps a custom Processor.Handler so.
//
// h decides, as that doc says; an event h applied whose index write fails is retried (h must be
// idempotent on ev.Sequence, as every Handler). What p records is therefore a subset of what h
// applied, and it answers [AppliedChecker] for h where h cannot.
//
// Before an event out of deliveries is dead-lettered, h's own [Withholder] (else [AppliedChecker])
// is asked; with neither, p withholds it, and a later delivery is indexed as a dead letter. An
// event is never both applied and a dead letter as far as h implements [Withholder].
func WithHistory(h Handler, p *Projection) Handler { return &withHistory{h: h, p: p} }

type withHistory struct {
	h Handler
	p *Projection
}

func (w *withHistory) Handle(ctx context.Context, ev Event) error {
	return w.HandleBatch(ctx, [][]Event{{ev}})[0][0]
}

// HandleBatch runs h on the batch (its own HandleBatch if it has one, else each event in turn, each
// order's in stream order), then indexes the events h applied.
func (w *withHistory) HandleBatch(ctx context.Context, orders [][]Event) [][]error {
	res := handleAll(ctx, w.h, orders, nil)
	// The events h applied, by order, for the projection (an order with
	// none costs it nothing); where each is in its order.
	index := make([][]Event, len(orders))
	at := make([][]int, len(orders))
	for i, evs := range orders {
		for j, ev := range evs {
			if res[i][j] == nil || errors.Is(res[i][j], ErrDuplicate) {
				index[i] = append(index[i], ev)
				at[i] = append(at[i], j)
			}
		}
	}
	for i, perrs := range w.p.HandleBatch(ctx, index) {
		for k, perr := range perrs {
			switch j := at[i][k]; {
			case perr == nil:
				res[i][j] = nil // new to the index: applied
			case errors.Is(perr, ErrDuplicate):
				// Indexed before: h's answer stands.
			default:
				res[i][j] = fmt.Errorf("history index: %w", perr)
			}
		}
	}
	return res
}

// Withhold asks h or p as [WithHistory] says. An event h applied is
// indexed before the answer, so that the history lists it.
func (w *withHistory) Withhold(ctx context.Context, ev Event) (bool, error) {
	switch h := w.h.(type) {
	case Withholder:
		return w.indexIfApplied(ctx, ev, h.Withhold)
	case AppliedChecker:
		return w.indexIfApplied(ctx, ev, h.Applied)
	}
	// p's record decides, by compare-and-set: a later delivery h applies
	// is then refused by the index and dead-lettered too.
	return w.p.Withhold(ctx, ev)
}

// Applied asks h (an [AppliedChecker]); else p's index answers (it holds only what h applied).
func (w *withHistory) Applied(ctx context.Context, ev Event) (bool, error) {
	if ac, ok := w.h.(AppliedChecker); ok {
		return w.indexIfApplied(ctx, ev, ac.Applied)
	}
	return w.p.Applied(ctx, ev)
}

// indexIfApplied asks check whether h applied ev, and if so indexes it.
func (w *withHistory) indexIfApplied(ctx context.Context, ev Event, check func(context.Context, Event) (bool, error)) (bool, error) {
	applied, err := check(ctx, ev)
	if err != nil || !applied {
		return applied, err
	}
	if err := w.p.Handle(ctx, ev); err != nil && !errors.Is(err, ErrDuplicate) {
		return true, fmt.Errorf("history index: %w", err)
	}
	return true, nil
}
