package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deadLetterUnapplied dead-letters an event that ran out of deliveries (cause says how), unless the
// handler applied it after all (an earlier delivery, here or at a sibling, cut short after its
// write; a write whose ack timed out): then it is acked. The handler is asked as [Withholder] says.
func (p *Processor) deadLetterUnapplied(ctx context.Context, it item, cause error, dls *[]deadLettered) {
	var applied bool
	var err error
	ac, isChecker := p.cfg.Handler.(AppliedChecker)
	if w, ok := p.cfg.Handler.(Withholder); ok {
		applied, err = w.Withhold(ctx, it.ev)
		if err != nil && isChecker {
			// The mark cannot be written (a full projection bucket, where
			// nobody can apply the event either): asked instead.
			p.log.Warn("cannot withhold an event out of deliveries in its order's record; dead-lettered if it was not applied", "seq", it.ev.Sequence, "err", err)
			applied, err = ac.Applied(ctx, it.ev)
		}
	} else if isChecker {
		applied, err = ac.Applied(ctx, it.ev)
	}
	why := "cannot tell whether an event out of deliveries was applied, will retry"
	if err == nil && applied {
		why, err = "cannot make an applied event's effect durable, will retry", p.cfg.Sync(ctx)
	}
	if err != nil {
		p.failed.Add(1)
		p.log.Warn(why, "seq", it.ev.Sequence, "err", err)
		p.settled("nak", it.ev, it.msg.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
		return
	}
	if !applied {
		p.deadLetter(ctx, it.msg, it.ev, cause, dls)
	} else if p.settled("ack", it.ev, it.msg.Ack()) {
		p.duplicates.Add(1)
	}
}

// settle acks, naks or dead-letters a handled event by its handler's err, and counts it.
func (p *Processor) settle(ctx context.Context, it item, err error, dls *[]deadLettered) {
	m, ev := it.msg, it.ev
	switch {
	case err == nil:
		if !p.settled("ack", ev, m.Ack()) {
			return
		}
		p.processed.Add(1)
		if _, ok := m.(*recoveredMsg); ok {
			p.recovered.Add(1) // read back, and applied here
		}
		for cur := p.lastApplied.Load(); ev.Sequence > cur && !p.lastApplied.CompareAndSwap(cur, ev.Sequence); cur = p.lastApplied.Load() {
		}
	case errors.Is(err, ErrWithheld):
		// Dead-lettered elsewhere (or that dead letter failed and this delivery is its retry): the
		// dead letter again, which the dead-letter stream stores once, then the ack.
		p.deadLetter(ctx, m, ev, err, dls)
	case errors.Is(err, ErrDuplicate):
		if p.settled("ack", ev, m.Ack()) {
			p.duplicates.Add(1)
		}
	case ctx.Err() != nil:
		// The drain deadline canceled the handler: not the event's fault,
		// so no failure and no dead letter; redelivered at once.
		p.log.Warn("event cut short by the drain timeout, will be redelivered", "seq", ev.Sequence, "err", err)
		p.settled("nak", ev, m.NakWithDelay(0))
	case errors.Is(err, ErrPoison):
		p.deadLetter(ctx, m, ev, err, dls)
	case !p.storeFailed(ev, err) && p.tries(ev) >= uint64(p.cfg.MaxDeliver):
		p.deadLetterUnapplied(ctx, it, fmt.Errorf("failed %d deliveries: %w", ev.Delivered, err), dls)
	default:
		p.failed.Add(1)
		delay := p.cfg.Backoff[max(min(int(ev.Delivered)-1, len(p.cfg.Backoff)-1), 0)]
		p.log.Warn("event failed, will retry", "seq", ev.Sequence, "subject", ev.Subject, "order_id", ev.OrderID,
			"delivery", ev.Delivered, "retry_in", delay.String(), "err", err)
		p.settled("nak", ev, m.NakWithDelay(delay))
	}
}

// storeFailed reports whether a handler's err is the store's, not ev's (noted: such deliveries
// do not count against max_deliver, tries): a store that cannot write (503: a full disk, nats
// restarted by the store guard; a limit reached is the operator's to raise: dead-lettered), and,
// for orderstore's own store calls (storeErr), no connection or no answer in time. A handler's
// own timeout (a service it calls) is ev's failure. The server tells a limit from a failure by
// the description only (both are 503 with err_code 10077, "{err}": the store's error text).
func (p *Processor) storeFailed(ev Event, err error) bool {
	var api *jetstream.APIError
	if !(errors.As(err, &api) && api.Code == 503 && !strings.Contains(api.Description, "maximum")) && !(errors.As(err, new(storeErr)) && slices.ContainsFunc([]error{nats.ErrTimeout, context.DeadlineExceeded,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse, nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrConnectionClosed}, func(e error) bool { return errors.Is(err, e) })) {
		return false
	}
	p.recMu.Lock()
	p.storeFails[ev.Sequence]++
	p.recMu.Unlock()
	return true
}

// storeErr is an error of orderstore's own store calls: the projection's and Config.Sync's.
type storeErr struct{ error }

func (e storeErr) Unwrap() error { return e.error }

// tries counts ev's deliveries against max_deliver, less those the store failed (storeFailure).
func (p *Processor) tries(ev Event) uint64 {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	return ev.Delivered - min(p.storeFails[ev.Sequence], ev.Delivered)
}

// settled reports whether an ack, nak or term (op) of ev was sent. A failure is logged and counted
// in AckErrors: the event stays unacked and the server redelivers it after ack_wait.
func (p *Processor) settled(op string, ev Event, err error) bool {
	p.recMu.Lock()
	if p.cfg.Exclusive {
		// Nak'ed, awaited: delivered here again, or taken by another client if the ack floor
		// passes it first (checkTaken); settled otherwise, no more (a redelivery may be
		// delivered before a nak is noted). A recovered event's naks are retries instead.
		delete(p.awaiting, ev.Sequence)
		if _, recovering := p.recPending[ev.Sequence]; op == "nak" && !recovering {
			p.awaiting[ev.Sequence] = struct{}{}
		}
	}
	if op != "nak" && err == nil {
		delete(p.storeFails, ev.Sequence) // settled: its deliveries are counted no more
	}
	p.recMu.Unlock()
	if err != nil {
		p.ackErrors.Add(1)
		p.log.Warn(op+" failed, the event will be redelivered after ack_wait", "seq", ev.Sequence, "subject", ev.Subject, "err", err)
	}
	return err == nil
}
