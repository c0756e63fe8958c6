package processor

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// noteDelivered sees the stream sequence of each first delivery, in stream order (the consume
// callback runs one at a time). A jump past the highest seen means events were not delivered to
// this processor: those below the stream's first sequence were removed by its limits before it saw
// them; the others went to another consumer on the same durable, which an Exclusive processor reads
// back from the stream and hands to emit, to be applied before seq.
func (p *Processor) noteDelivered(seq uint64, emit func(delivery) bool) {
	prev := p.highestSeen.Load()
	if seq <= prev {
		return
	}
	p.highestSeen.Store(seq)
	if seq == prev+1 {
		return
	}
	ctx := context.Background() // each request bounded by the client's timeout
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		p.log.Warn("cannot tell whether events were removed unprocessed", "stream", p.cfg.Stream, "err", err)
		return
	}
	first := s.CachedInfo().State.FirstSeq
	if last := min(seq-1, first-1); last > prev {
		n := last - prev
		p.removedUnseen.Add(n)
		p.log.Warn("events removed by the stream's limits before the processor saw them: they are not in the projection",
			"stream", p.cfg.Stream, "removed", n, "first_seq", prev+1, "last_seq", last,
			"hint", "raise stream.max_bytes, max_msgs or max_age, or keep the processor up and caught up")
	}
	if p.cfg.Exclusive {
		p.takenElsewhere(ctx, max(prev+1, first), seq, emit)
	}
}

// seqRange is the stream sequences [from, upTo).
type seqRange struct{ from, upTo uint64 }

// maxGaps bounds the ranges a Shared processor keeps to check; past it the oldest are merged (a
// range may span events applied here too: they are checked like the others).
const maxGaps = 4096

// addGap notes [from, upTo) to check; the ranges stay in order.
func (p *Processor) addGap(from, upTo uint64) {
	if from >= upTo {
		return
	}
	p.gapsMu.Lock()
	defer p.gapsMu.Unlock()
	if n := len(p.gaps); n > 0 && p.gaps[n-1].upTo == from {
		p.gaps[n-1].upTo = upTo
		return
	}
	i, _ := slices.BinarySearchFunc(p.gaps, from, func(g seqRange, from uint64) int { return cmp.Compare(g.from, from) })
	p.gaps = slices.Insert(p.gaps, i, seqRange{from, upTo})
	if len(p.gaps) > maxGaps {
		p.gaps[1].from = p.gaps[0].from
		p.gaps = p.gaps[1:]
	}
}

// checkGaps reads back what a Shared processor's siblings were delivered, once the ack floor passed
// it, and hands to emit the events the handler has not applied: taken by someone else after all.
func (p *Processor) checkGaps(ctx context.Context, floor uint64, emit func(delivery) bool) {
	ac, ok := p.cfg.Handler.(AppliedChecker)
	p.gapsMu.Lock()
	var due []seqRange
	for len(p.gaps) > 0 && p.gaps[0].upTo-1 <= floor {
		due = append(due, p.gaps[0])
		p.gaps = p.gaps[1:]
	}
	p.gapsMu.Unlock()
	if !ok {
		return
	}
	for i, g := range due {
		if next, err := p.unapplied(ctx, ac, g, emit); err != nil {
			p.log.Warn("cannot check the events a sibling processor was delivered; will retry", "from_seq", next, "to_seq", g.upTo-1, "err", err)
			p.gapsMu.Lock()
			p.gaps = append(append([]seqRange{{next, g.upTo}}, due[i+1:]...), p.gaps...)
			p.gapsMu.Unlock()
			return
		}
	}
}

// unapplied reads the events of g from the stream and hands those the handler has not applied
// (poison events are skipped: they are dead letters, never applied), all of them if ac is nil, to
// emit as recovered events, one at a time: emit waits for room in Run's byte budget, so memory
// stays bounded however many there are. On an error, or once emit refuses one (Run is returning),
// it returns the sequence to go on from.
func (p *Processor) unapplied(ctx context.Context, ac AppliedChecker, g seqRange, emit func(delivery) bool) (uint64, error) {
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return g.from, err
	}
	var n, firstSeq uint64
	defer func() {
		if n > 0 {
			p.log.Error("events were taken from the processor's durable by another client: read back from the stream to apply them",
				"stream", p.cfg.Stream, "consumer", p.cfg.Durable, "events", n, "first_seq", firstSeq, "before_seq", g.upTo)
		}
	}()
	for next := max(g.from, s.CachedInfo().State.FirstSeq); next < g.upTo; {
		m, err := s.GetMsg(ctx, next, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence >= g.upTo {
			break // nothing more (deleted events are skipped by the subject filter)
		}
		if err != nil {
			return next, err
		}
		keep := ac == nil
		if !keep {
			if ev, poison := EventOf(m.Subject, m.Data, m.Header, m.Sequence, m.Time, 0); poison == nil {
				applied, err := ac.Applied(ctx, ev)
				if err != nil {
					return next, err
				}
				keep = !applied
			}
		}
		if keep {
			// Pending (see safeFloor) before it is handed out; counted in
			// Stats.Recovered once applied.
			p.recMu.Lock()
			p.recPending[m.Sequence] = struct{}{}
			p.recMu.Unlock()
			if !emit(&recoveredMsg{m: m, p: p}) {
				p.recoveredDone(m.Sequence)
				return next, errors.New("the processor stopped")
			}
			n, firstSeq = n+1, cmp.Or(firstSeq, m.Sequence)
		}
		next = m.Sequence + 1
	}
	return g.upTo, nil
}

// safeFloor is the ack floor events are handed out with: the consumer's, below any recovered event.
func (p *Processor) safeFloor() uint64 {
	f := p.ackFloor.Load()
	p.recMu.Lock()
	defer p.recMu.Unlock()
	for seq := range p.recPending {
		f = min(f, seq-1) // a stream sequence is at least 1
	}
	return f
}

// recoveredDone forgets seq as recovered, once it is settled.
func (p *Processor) recoveredDone(seq uint64) {
	p.recMu.Lock()
	delete(p.recPending, seq)
	p.recMu.Unlock()
}

// takenElsewhere handles the events in [from, upTo) that another client was delivered: a Shared
// processor checks them once the ack floor passes them (checkGaps); another hands those the stream
// still holds (deleted events are skipped) to emit as recovered events.
func (p *Processor) takenElsewhere(ctx context.Context, from, upTo uint64, emit func(delivery) bool) {
	if p.cfg.Shared {
		p.addGap(from, upTo)
		return
	}
	if next, err := p.unapplied(ctx, nil, seqRange{from, upTo}, emit); err != nil {
		p.log.Error("events taken from the processor's durable by another client could not be read back: they are missing from the projection",
			"stream", p.cfg.Stream, "from_seq", next, "to_seq", upTo-1, "err", err)
	}
}

// checkTaken is the floor watcher's part of Exclusive: events nak'ed that
// the ack floor passed without being delivered here again, and the last
// events delivered elsewhere with nothing after them, are read back.
func (p *Processor) checkTaken(ctx context.Context, info *jetstream.ConsumerInfo) {
	enqueue := p.requeue.Load()
	if !p.cfg.Exclusive || enqueue == nil {
		return
	}
	floor := info.AckFloor.Stream
	var passed []uint64
	p.recMu.Lock()
	for seq := range p.awaiting {
		if seq <= floor {
			passed = append(passed, seq)
			delete(p.awaiting, seq)
		}
	}
	p.recMu.Unlock()
	for _, seq := range passed {
		p.takenElsewhere(ctx, seq, seq+1, *enqueue)
	}
	// Nothing pending or awaiting an ack, yet delivered past what this
	// processor saw: the tail went to someone else.
	if prev := p.highestSeen.Load(); info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > prev {
		p.highestSeen.Store(info.Delivered.Stream)
		p.takenElsewhere(ctx, prev+1, info.Delivered.Stream+1, *enqueue)
	}
	if p.cfg.Shared {
		p.checkGaps(ctx, floor, *enqueue)
	}
}

// recoveredMsg is an event read back from the stream: settled already in the consumer (by whoever
// took it), so its acks are no-ops, while a nak delivers it again after the delay, with its
// delivery count one higher, as nats would (and max_deliver dead-letters it in the end).
type recoveredMsg struct {
	m           *jetstream.RawStreamMsg
	p           *Processor
	redelivered atomic.Uint64
}

func (r *recoveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: r.m.Sequence}, NumDelivered: 1 + r.redelivered.Load(),
		Timestamp: r.m.Time, Stream: r.p.cfg.Stream, Consumer: r.p.cfg.Durable}, nil
}

func (r *recoveredMsg) Data() []byte         { return r.m.Data }
func (r *recoveredMsg) Headers() nats.Header { return r.m.Header }
func (r *recoveredMsg) Subject() string      { return r.m.Subject }

// Ack and TermWithReason settle a recovered event: the processor calls
// them once what it wrote is durable, so the floor it hands out may pass it.
func (r *recoveredMsg) Ack() error                  { r.p.recoveredDone(r.m.Sequence); return nil }
func (r *recoveredMsg) TermWithReason(string) error { r.p.recoveredDone(r.m.Sequence); return nil }

// NakWithDelay delivers r again once d has passed (see retries).
func (r *recoveredMsg) NakWithDelay(d time.Duration) error {
	rs := &r.p.retries
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.arm(&retry{r: r, due: time.Now().Add(d)})
	return nil
}

// redeliver hands r to the running Run once more, one delivery higher.
func (r *recoveredMsg) redeliver() {
	enqueue := r.p.requeue.Load()
	if enqueue == nil {
		return // Run is returning: the event stays missing
	}
	r.redelivered.Add(1)
	(*enqueue)(r)
}

// retries are the recovered events nak'ed and waiting out their delay, a timer each. Run owns
// the timers: as it returns, stop stops those not yet due and waits for those firing; the
// next Run's start arms them again (one that fell due meanwhile fires at once, not dropped).
type retries struct {
	mu      sync.Mutex
	pending map[*retry]struct{} // armed
	held    []*retry            // stopped by the last Run's return
	firing  sync.WaitGroup      // one per armed timer, done once stopped or fired
}

// retry is one nak'ed recovered event and when it is due.
type retry struct {
	r     *recoveredMsg
	due   time.Time
	timer *time.Timer
}

// arm starts e's timer; rs.mu is held.
func (rs *retries) arm(e *retry) {
	rs.pending[e] = struct{}{}
	rs.firing.Add(1)
	e.timer = time.AfterFunc(time.Until(e.due), func() {
		defer rs.firing.Done()
		rs.mu.Lock()
		delete(rs.pending, e)
		rs.mu.Unlock()
		e.r.redeliver()
	})
}

// start arms the retries the last Run held (those due by now fire at once).
func (rs *retries) start() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, e := range rs.held {
		rs.arm(e)
	}
	rs.held = nil
}

// stop holds retries not yet due for the next Run and waits for those firing: none runs after.
func (rs *retries) stop() {
	rs.mu.Lock()
	for e := range rs.pending {
		if e.timer.Stop() {
			delete(rs.pending, e)
			rs.held = append(rs.held, e)
			rs.firing.Done()
		}
	}
	rs.mu.Unlock()
	rs.firing.Wait()
}
