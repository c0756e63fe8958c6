package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// delivery is an event to handle and settle: a jetstream.Msg nats
// delivered, or a recoveredMsg read back from the stream.
type delivery interface {
	Metadata() (*jetstream.MsgMetadata, error)
	Subject() string
	Data() []byte
	Headers() nats.Header
	Ack() error
	NakWithDelay(delay time.Duration) error
	TermWithReason(reason string) error
}

// item is one delivered event, parsed.
type item struct {
	msg    delivery
	ev     Event
	poison error // the envelope is invalid: dead-letter it
	skip   bool  // no metadata: nothing to handle or settle
	size   int64 // taken from the byte budget
}

// toItem parses m into the Event its handler gets.
func (p *Processor) toItem(m delivery) item {
	md, err := m.Metadata()
	if err != nil {
		p.log.Error("message without metadata", "subject", m.Subject(), "err", err)
		return item{msg: m, skip: true, size: msgSize(m)}
	}
	it := item{msg: m, size: msgSize(m)}
	it.ev, it.poison = EventOf(m.Subject(), m.Data(), m.Headers(), md.Sequence.Stream, md.Timestamp, p.safeFloor())
	it.ev.Delivered = md.NumDelivered
	return it
}

// partition applies the items routed to it, a batch at a time: whatever has arrived, up to size.
//
// Once ctx is canceled (the drain deadline) it handles nothing more: it
// empties in, counting the items in skipped, and leaves them unacked.
func (p *Processor) partition(ctx context.Context, in <-chan item, size int, skipped *atomic.Int64, budget *byteBudget) {
	for first := range in {
		if ctx.Err() != nil {
			skipped.Add(1)
			budget.release(first.size)
			continue
		}
		b := []item{first}
		for len(b) < size && len(in) > 0 { // only this partition receives from in: no wait
			b = append(b, <-in)
		}
		skipped.Add(int64(p.handleBatch(ctx, b)))
		for _, it := range b {
			budget.release(it.size)
		}
	}
}

// handleBatch handles one batch of one partition: poison events are dead-lettered and those out of
// deliveries settled, the rest handled grouped by order, each order's events in stream order, and
// settled. It returns how many it left unhandled because ctx was canceled.
func (p *Processor) handleBatch(ctx context.Context, batch []item) (unhandled int) {
	var dls []deadLettered
	defer func() { p.finishDeadLetters(ctx, dls) }()
	// orders[k] are the events of items[k], one order's; index[id] is its k.
	index := map[string]int{}
	var orders [][]Event
	var items [][]item
	for _, it := range batch {
		switch id := it.ev.OrderID; {
		case it.skip:
			// Nothing to handle or settle.
		case ctx.Err() != nil:
			unhandled++
		case it.ev.Sequence <= p.cfg.SettledThrough:
			if p.settled("ack", it.ev, it.msg.Ack()) {
				p.duplicates.Add(1)
			}
		case it.poison != nil:
			p.deadLetter(ctx, it.msg, it.ev, it.poison, &dls)
		case p.tries(it.ev) > uint64(p.cfg.MaxDeliver):
			// Dead-lettered without handling it again: an event that
			// crashes the process every time must not crash-loop it.
			p.deadLetterUnapplied(ctx, it, fmt.Errorf("delivered %d times without a result (max_deliver %d): the processor stopped or exceeded ack_wait on it",
				it.ev.Delivered, p.cfg.MaxDeliver), &dls)
		default:
			k, ok := index[id]
			if !ok {
				k = len(orders)
				index[id] = k
				orders, items = append(orders, nil), append(items, nil)
			}
			orders[k] = append(orders[k], it.ev)
			items[k] = append(items[k], it)
		}
	}
	if len(orders) == 0 {
		return unhandled
	}
	results := handleAll(ctx, p.cfg.Handler, orders, errUnhandled)
	// The handled events are settled once what their handlers wrote is durable (Config.Sync).
	wrote := func(err error) bool { return err == nil || errors.Is(err, ErrDuplicate) }
	var syncErr error
	if slices.ContainsFunc(results, func(errs []error) bool { return slices.ContainsFunc(errs, wrote) }) {
		if err := p.cfg.Sync(ctx); err != nil {
			syncErr = storeErr{fmt.Errorf("make the batch's writes durable: %w", err)}
		}
	}
	for k, its := range items {
		for j, it := range its {
			switch err := results[k][j]; {
			case err == errUnhandled:
				unhandled++
			case syncErr != nil && wrote(err):
				p.settle(ctx, it, syncErr, &dls)
			default:
				p.settle(ctx, it, err, &dls)
			}
		}
	}
	return unhandled
}

// errUnhandled marks, in handleAll's results, an event left unhandled.
var errUnhandled = errors.New("not handled")

// handleAll runs h on orders: as one batch if h is a BatchHandler (see safeBatch), else on each
// event in turn, each order's in stream order; then, once ctx is canceled, it handles no more:
// their result is unhandled, or ctx's error if that is nil.
func handleAll(ctx context.Context, h Handler, orders [][]Event, unhandled error) [][]error {
	if bh, ok := h.(BatchHandler); ok {
		return safeBatch(ctx, bh, orders)
	}
	res := make([][]error, len(orders))
	for i, evs := range orders {
		res[i] = make([]error, len(evs))
		for j, ev := range evs {
			if ctx.Err() != nil {
				res[i][j] = cmp.Or(unhandled, ctx.Err())
				continue
			}
			res[i][j] = safeHandle(ctx, h, ev) // a panic fails its event only
		}
	}
	return res
}

// safeHandle turns a handler panic into an error: one bad event must not take the appliance down.
func safeHandle(ctx context.Context, h Handler, ev Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h.Handle(ctx, ev)
}

// safeBatch is safeHandle for a BatchHandler; a result of the wrong shape fails every event.
func safeBatch(ctx context.Context, h BatchHandler, orders [][]Event) (res [][]error) {
	failAll := func(err error) [][]error {
		out := make([][]error, len(orders))
		for i, evs := range orders {
			out[i] = fill(make([]error, len(evs)), err)
		}
		return out
	}
	defer func() {
		if r := recover(); r != nil {
			res = failAll(fmt.Errorf("handler panic: %v", r))
		}
	}()
	res = h.HandleBatch(ctx, orders)
	if len(res) != len(orders) {
		return failAll(fmt.Errorf("handler returned %d results for %d orders", len(res), len(orders)))
	}
	for i := range res {
		if len(res[i]) != len(orders[i]) {
			return failAll(fmt.Errorf("handler returned %d results for %d events", len(res[i]), len(orders[i])))
		}
	}
	return res
}
