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

// deadLetters reads the dead-letter stream from dead-letter sequence from on (1: all of it, as the
// older ones tell what to skip) up to its last when the read began: the dead letters the fold knew
// (all when all, else those up to DLQScanned) and those of events it has yet to fold are skipped; a
// newer one of an event it already folded puts its order in keep.
func (f *folder) deadLetters(ctx context.Context, from uint64, all bool) error {
	r := f.r
	s, err := r.cfg.JS.Stream(ctx, r.cfg.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream %q: %w", r.cfg.DeadLetterStream, err)
	}
	info := s.CachedInfo() // fetched by the lookup
	known, end := f.st.DLQScanned, info.State.LastSeq
	f.mayHaveReplays = info.State.Msgs != end
	if info.State.Msgs > 0 && end >= from {
		err := r.pull(ctx, r.cfg.DeadLetterStream, from, end, 1000, false, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
			h := m.Headers()
			orig, err := strconv.ParseUint(h.Get(processor.HeaderSequence), 10, 64)
			if h.Get(processor.HeaderStream) != r.cfg.Stream || err != nil || orig == 0 {
				return // not a dead letter of the folded stream
			}
			ev, _ := processor.EventOf(h.Get(processor.HeaderSubject), m.Data(), nil, orig, time.Time{}, 0)
			f.skipMu.Lock()
			defer f.skipMu.Unlock()
			if all || md.Sequence.Stream <= known || orig > f.st.Position {
				f.skip[orig] = true
			} else if orig >= f.st.FromSeq && ev.OrderID != "" && !f.skip[orig] {
				f.keep[ev.OrderID] = true // it may have been folded, unknown to the fold then
			}
		}, func(_ int, err error) error { return err })
		if err != nil {
			return err
		}
	}
	r.update(func() { f.st.DLQScanned = max(f.st.DLQScanned, end) })
	return nil
}

// pull calls fn with each message of stream from sequence from up to to, and its metadata, pulling
// batch at a time through an ordered consumer; it ends after to, after the stream's last message,
// or after a pull that brought none. After each pull, after is told how many messages it brought
// and its error (none for a timeout): an error it returns ends the scan.
func (r *Runner) pull(ctx context.Context, stream string, from, to uint64, batch int, headersOnly bool,
	fn func(jetstream.Msg, *jetstream.MsgMetadata), after func(n int, err error) error) error {
	c, err := r.cfg.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: from, HeadersOnly: headersOnly, MaxResetAttempts: orderedResets})
	if err != nil {
		return err
	}
	for {
		b, err := c.Fetch(batch, jetstream.FetchMaxWait(time.Second), jetstream.FetchMaxBytes(stepBytes+int(r.cfg.JS.Conn().MaxPayload())))
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
			fn(m, md)
			if md.Sequence.Stream == to || md.NumPending == 0 {
				return nil // the last one: no need to wait out the fetch
			}
		}
		if err = b.Error(); errors.Is(err, nats.ErrTimeout) {
			err = nil
		}
		if err := after(n, err); err != nil || n == 0 {
			return err
		}
	}
}

// replays reads the headers of events from..to, a step or two ahead of the fold (scanned is how
// far): the original that an event replayed from the dead letters names goes into skip, since the
// replay is folded in its place.
func (f *folder) replays(ctx context.Context, from, to uint64) error {
	if from > to {
		return nil
	}
	err := f.r.pull(ctx, f.r.cfg.Stream, from, to, 5000, true, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		if of := f.r.replayOf(m.Headers()); of > 0 {
			f.skipMu.Lock()
			f.skip[of] = true
			f.skipMu.Unlock()
		}
		f.scanned.Store(md.Sequence.Stream)
	}, func(n int, _ error) error {
		// Two steps ahead of the fold at most: a scan racing through the stream slows producers'
		// publishes to it (the stream serves both), and the fold needs it only a step ahead.
		for ahead := 2 * uint64(f.r.cfg.BatchSize); n > 0 && f.scanned.Load() > f.position()+ahead; {
			if err := sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stream %q: %w", f.r.cfg.Stream, err)
	}
	return nil
}

// replayOf is the original's sequence an event replayed from the dead letters names, 0 for any
// other event. Only this node's own replays are believed (their Nats-Msg-Id begins with
// Config.ReplayMsgID, which no producer's can): docs/rebuild.md, "The steps", 2.
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
