package rebuild

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// deadLetters reads the dead-letter stream from dead-letter sequence from
// on (1: all of it, as the older ones tell what to skip): the dead letters
// the fold knew (all when all, else those up to DLQScanned) and those of
// events it has yet to fold are skipped; a newer one of an event it
// already folded puts its order in keep (see dead).
func (f *folder) deadLetters(ctx context.Context, from uint64, all bool) error {
	s, err := f.r.cfg.JS.Stream(ctx, f.r.cfg.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream %q: %w", f.r.cfg.DeadLetterStream, err)
	}
	known := f.st.DLQScanned
	last, err := f.scanDeadLetters(ctx, s, from, func(dlqSeq, orig uint64, orderID string) {
		f.dead(orig, orderID, all || dlqSeq <= known)
	})
	if err != nil {
		return err
	}
	f.r.update(func() { f.st.DLQScanned = max(f.st.DLQScanned, last) })
	return nil
}

// dead notes that event orig (of orderID) is a dead letter: skipped, or,
// when it may have been folded already (after the fold passed it and
// unknown to it then), its order is kept as it is.
func (f *folder) dead(orig uint64, orderID string, known bool) {
	f.skipMu.Lock()
	defer f.skipMu.Unlock()
	if known || orig > f.st.Position {
		f.skip[orig] = true
		return
	}
	if orig >= f.st.FromSeq && orderID != "" && !f.skip[orig] {
		f.keep[orderID] = true
	}
}

// scanDeadLetters calls fn for each dead letter of the folded stream
// from dead-letter sequence from on, and returns the sequence it read up
// to: the dead-letter stream's last when the scan began.
func (f *folder) scanDeadLetters(ctx context.Context, s jetstream.Stream, from uint64, fn func(dlqSeq, orig uint64, orderID string)) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	end := info.State.LastSeq
	if info.State.Msgs == 0 || end < from {
		return end, nil
	}
	c, err := f.r.cfg.JS.OrderedConsumer(ctx, f.r.cfg.DeadLetterStream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, MaxResetAttempts: orderedResets})
	if err != nil {
		return 0, err
	}
	for {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return 0, err
		}
		n := 0
		var lastSeq uint64
		for m := range b.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			lastSeq = md.Sequence.Stream
			if md.Sequence.Stream > end {
				return end, nil
			}
			h := m.Headers()
			orig, err := strconv.ParseUint(h.Get(processor.HeaderSequence), 10, 64)
			if h.Get(processor.HeaderStream) != f.r.cfg.Stream || err != nil || orig == 0 {
				if md.NumPending == 0 {
					return end, nil
				}
				continue
			}
			ev, _ := processor.EventOf(h.Get(processor.HeaderSubject), m.Data(), nil, orig, time.Time{}, 0)
			fn(md.Sequence.Stream, orig, ev.OrderID)
			if md.NumPending == 0 {
				return end, nil // the last one: no need to wait out the fetch
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return 0, err
		}
		if lastSeq >= end || n == 0 {
			return end, nil
		}
	}
}

// mayHaveReplays reports whether the dead-letter stream ever lost a dead
// letter (its message count is below its last sequence): a replay
// removes the one it replays, so without that there is no replay of this
// node's to find (one cut short before the removal leaves its original a
// dead letter, skipped anyway). True when it cannot tell.
func (f *folder) mayHaveReplays(ctx context.Context) bool {
	s, err := f.r.cfg.JS.Stream(ctx, f.r.cfg.DeadLetterStream)
	if err != nil {
		return true
	}
	info, err := s.Info(ctx)
	if err != nil {
		return true
	}
	return info.State.Msgs != info.State.LastSeq
}

// replays reads the headers of events from..to, a step or two ahead of
// the fold (scanned is how far): the original that an event replayed
// from the dead letters names goes into skip, since the replay is folded
// in its place.
func (f *folder) replays(ctx context.Context, from, to uint64) error {
	if from > to {
		return nil
	}
	c, err := f.r.cfg.JS.OrderedConsumer(ctx, f.r.cfg.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, HeadersOnly: true, MaxResetAttempts: orderedResets})
	if err != nil {
		return fmt.Errorf("stream %q: %w", f.r.cfg.Stream, err)
	}
	for {
		b, err := c.Fetch(5000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range b.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Sequence.Stream > to {
				return nil
			}
			if of := f.r.replayOf(m.Headers()); of > 0 {
				f.skipMu.Lock()
				f.skip[of] = true
				f.skipMu.Unlock()
			}
			f.scanned.Store(md.Sequence.Stream)
			if md.Sequence.Stream == to || md.NumPending == 0 {
				return nil
			}
		}
		if n == 0 {
			return nil
		}
		// Two steps ahead of the fold at most: a scan racing through the
		// stream while producers publish to it slows their publishes
		// (the stream serves both), and the fold needs it only a step
		// ahead.
		for ahead := 2 * uint64(f.r.cfg.BatchSize); f.scanned.Load() > f.position()+ahead; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// replayOf is the original's sequence an event replayed from the dead
// letters names, 0 for any other event. Only this node's own replays
// are believed: their Nats-Msg-Id begins with Config.ReplayMsgID, which
// no producer's can (the ingest service scopes a producer's id with its
// account, and drops a producer's Replay-Of header; an event stored
// before it did may still carry one), nor an edge's replay sourced into
// a hub (whose Replay-Of names a sequence of the edge's stream; the
// hub's own dead letter of the original is what leaves it out there).
func (r *Runner) replayOf(h nats.Header) uint64 {
	if r.cfg.ReplayMsgID == "" || !strings.HasPrefix(h.Get(nats.MsgIdHdr), r.cfg.ReplayMsgID) {
		return 0
	}
	of, err := strconv.ParseUint(h.Get(processor.HeaderReplayOf), 10, 64)
	if err != nil {
		return 0
	}
	return of
}

// waitScan waits until the replay scan passed seq (or ended).
func (f *folder) waitScan(ctx context.Context, seq uint64) error {
	if f.scanDone == nil {
		return nil
	}
	seq = min(seq, f.scanTo)
	for f.scanned.Load() < seq {
		select {
		case <-f.scanDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}
