package orderstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// An order's history, read through the projection's history index
// (processor/history.go): its events, and its state as of any moment.
type (
	// OrderEvent is one event of an order's history.
	OrderEvent = processor.HistoryEvent
	// OrderHistory is a page of an order's history.
	OrderHistory = processor.HistoryPage
	// AsOf is a point in an order's history: a stream sequence, a time, or both.
	AsOf = processor.AsOfPoint
	// OrderAsOf is an order's state as of a point.
	OrderAsOf = processor.AsOfState
)

// ErrNotRetained is matched by [Appliance.OrderAsOf]'s error for a point
// before the first event of the order that the stream still holds.
var ErrNotRetained = processor.ErrNotRetained

// ErrNoHistory is matched by the history calls' error when the appliance keeps no history index:
// jetstream.max_file_store leaves no room for it. (A custom Processor.Handler gets the index too:
// the projection runs beside it, see processor.WithHistory.)
var ErrNoHistory = processor.ErrNoHistory

// OrderEvents returns up to limit (at most 1000) of an order's events, oldest first, from position
// from (0 is its first event), with the position to go on from (0 at the end). Events the stream no
// longer holds are listed with Retained false. On a hub each event's Edge names where it came from.
// An unknown or invalid id matches [ErrNotFound].
func (a *Appliance) OrderEvents(ctx context.Context, id string, from, limit int) (OrderHistory, error) {
	return a.orderEvents(ctx, id, from, limit, false)
}

// OrderEventStates is [Appliance.OrderEvents] with each event's State: the order's state after it,
// by the live projection's fold. It folds every event before from too.
func (a *Appliance) OrderEventStates(ctx context.Context, id string, from, limit int) (OrderHistory, error) {
	return a.orderEvents(ctx, id, from, limit, true)
}

func (a *Appliance) orderEvents(ctx context.Context, id string, from, limit int, states bool) (OrderHistory, error) {
	s, err := a.historyStream(id)
	if err != nil {
		return OrderHistory{}, err
	}
	proj, done := a.reads.For(ctx, id)
	defer done()
	read := proj.History
	if states {
		read = proj.HistoryStates
	}
	page, err := read(ctx, s, id, from, limit)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return OrderHistory{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	if a.cfg.Hub.Enabled() { // an event's edge is its subject's first token (HubLocalPrefix: the hub's own)
		for i, e := range page.Events {
			page.Events[i].Edge = e.Subject[:max(strings.IndexByte(e.Subject, '.'), 0)]
		}
	}
	return page, err
}

// OrderAsOf returns an order's state as of point: the fold of its events up to it, by the live
// projection's code. An order without events up to the point (or an unknown or invalid id) matches
// [ErrNotFound]; a point before the first event the stream still holds matches [ErrNotRetained].
func (a *Appliance) OrderAsOf(ctx context.Context, id string, point AsOf) (OrderAsOf, error) {
	return a.FoldOrderEvents(ctx, id, point, nil)
}

// FoldOrderEvents calls fn with each event of an order up to point, in stream order: the events
// OrderAsOf folds, for a fold of your own code (your Handler's, say). It returns what OrderAsOf
// does, with the same errors.
func (a *Appliance) FoldOrderEvents(ctx context.Context, id string, point AsOf, fn func(Event) error) (OrderAsOf, error) {
	s, err := a.historyStream(id)
	if err != nil {
		return OrderAsOf{}, err
	}
	proj, done := a.reads.For(ctx, id)
	defer done()
	st, err := proj.FoldEvents(ctx, s, id, point, fn)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, fmt.Errorf("order %q had no event as of %s: %w", id, describePoint(point), ErrNotFound)
	}
	return st, err
}

// historyStream is where order id's history is read from, given a history index and a valid id.
func (a *Appliance) historyStream(id string) (jetstream.Stream, error) {
	if a.cfg.historyMaxBytes() == 0 {
		return nil, fmt.Errorf("order %q: %w: jetstream.max_file_store leaves no room for it next to the stream, the dead letters and the projection (raise max_file_store and set processor.history_max_bytes)", id, ErrNoHistory)
	}
	if !processor.ValidOrderID(id) {
		return nil, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	return a.hstream, nil
}

func describePoint(p AsOf) string {
	var parts []string
	if p.Seq > 0 {
		parts = append(parts, fmt.Sprintf("sequence %d", p.Seq))
	}
	if !p.Time.IsZero() {
		parts = append(parts, p.Time.UTC().Format(time.RFC3339Nano))
	}
	return cmp.Or(strings.Join(parts, " and "), "now")
}

// orderDeadLetterScan bounds the most recent dead-letter sequences (replayed ones too)
// OrderDeadLetters reads: the dead-letter stream has no per-order index.
const orderDeadLetterScan = 10_000

// OrderDeadLetters returns up to 100 dead letters of an order, newest first, among the
// 10,000 most recent sequences and within 8 MiB (complete: all dead letters were read).
func (a *Appliance) OrderDeadLetters(ctx context.Context, id string) ([]DeadLetter, bool, error) {
	if !processor.ValidOrderID(id) {
		return nil, false, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	return processor.OrderDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, id, orderDeadLetterScan, 100)
}
