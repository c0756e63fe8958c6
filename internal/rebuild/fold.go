package rebuild

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// folder is one run of the fold.
type folder struct {
	r      *Runner
	st     *state
	h      processor.Handler
	stream jetstream.Stream
	cons   jetstream.Consumer
	skipMu sync.Mutex      // the replay scan adds to skip while the fold reads it
	skip   map[uint64]bool // dead letters (and replayed originals): not folded
	keep   map[string]bool // orders the takeover keeps as they are (Takeover.Keep)
	// resumed is the position this run began at: what lies below was folded by an earlier run.
	resumed uint64
	// mayHaveReplays: the dead-letter stream lost a dead letter (its message count is below its
	// last sequence) when deadLetters last read it. A replay removes the one it replays, so without
	// that there is no replay of this node's to find (one cut short before the removal leaves its
	// original a dead letter, skipped anyway).
	mayHaveReplays bool

	batches chan fetched // the reader's batches, one fetched ahead of the fold

	// The replay scan runs ahead of the fold up to scanTo: the fold
	// waits until it passed what it folds.
	scanTo   uint64
	scanned  atomic.Uint64
	scanDone chan struct{}

	// Pacing: while producers publish, the fold yields the CPU (see pace).
	lastHead   uint64
	lastHeadAt time.Time
	ingest     float64       // events/s producers stored, last measured
	foldRate   float64       // events per second of the fold's own work
	duty       float64       // the share of the time the fold works (1: flat out)
	rested     time.Duration // slept by yield: not the fold's work
}

type fetched struct {
	msgs []jetstream.Msg
	err  error
}

// catchUp is how close to the stream's head the fold must be to take over; fetchMax the most
// events one pull asks for; stepBytes about the most bytes of events one step holds (a step of
// 50,000 events of max_payload would not fit in memory; a pull always has room for the largest).
const (
	catchUp   = 2000
	fetchMax  = 2000
	stepBytes = 32 << 20
)

// applyParallel chunks of applyChunk orders are applied at once.
const (
	applyParallel = 4
	applyChunk    = 1000
)

// fold runs st's rebuild: it makes or reopens the shadow, folds the stream into it from st's
// position, checkpointing as it goes, and once near the stream's head catches up and takes over.
func (r *Runner) fold(ctx context.Context, st *state) error {
	js := r.cfg.JS
	stream, err := js.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	if !st.Fresh {
		why, err := r.trusted(ctx, st, info.State.LastSeq)
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			why, err = "its shadow is gone (it was never made durable before a power cut, or was deleted)", nil
		}
		if err != nil {
			return err
		}
		if why == "" && st.Version != r.cfg.Version {
			why = fmt.Sprintf("the fold's version changed from %q to %q", st.Version, r.cfg.Version)
		}
		if why != "" {
			r.startOver(st, why)
		}
	}
	fresh := st.Fresh
	h, err := r.cfg.Target.Shadow(ctx, fresh)
	if err != nil {
		return fmt.Errorf("shadow: %w", err)
	}
	if fresh {
		// The new shadow's metadata (nats writes it without fsync)
		// durable before the state file says it exists.
		if err := r.cfg.Target.Durable(ctx); err != nil {
			return fmt.Errorf("making the shadow durable: %w", err)
		}
	}
	f := &folder{r: r, st: st, h: h, stream: stream, skip: map[uint64]bool{}, keep: map[string]bool{}, duty: 1}
	for _, id := range st.Keep {
		f.keep[id] = true
	}
	if st.Position == 0 { // a fresh rebuild: where it begins
		from := max(st.FromSeq, info.State.FirstSeq, 1)
		if !st.FromTime.IsZero() {
			if from, err = seqAtTime(ctx, stream, st.FromTime, info.State); err != nil {
				return fmt.Errorf("from_time %s: %w", st.FromTime.Format(time.RFC3339), err)
			}
		}
		r.update(func() { st.FromSeq, st.Position = from, from-1 })
	}
	r.update(func() { st.Fresh, st.Version, st.Head = false, r.cfg.Version, info.State.LastSeq })
	f.resumed = st.Position
	if err := r.save(st); err != nil {
		return err
	}
	// What the live processor dead-lettered is not folded: the live
	// projection does not hold it, and a replay would add it twice.
	if err := f.deadLetters(ctx, 1, fresh); err != nil {
		return err
	}
	r.cfg.Log.Info("projection rebuild folding", "id", st.ID, "from_seq", st.FromSeq, "position", st.Position, "head", info.State.LastSeq)
	if f.cons, err = js.OrderedConsumer(ctx, r.cfg.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: st.Position + 1, MaxResetAttempts: orderedResets}); err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	// The replay scan and the reader run beside the fold; it stops and joins them before returning.
	gctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after stop
	defer stop()
	// The scan reads every event's headers, so that an order with a replayed event is rebuilt
	// rather than kept as it is; it is skipped when there can be no replay to find
	// (mayHaveReplays). Without it the fold still folds no event twice: a replay whose original it
	// folded keeps its order as it is (step).
	if f.mayHaveReplays {
		f.scanTo, f.scanDone = info.State.LastSeq, make(chan struct{})
		f.scanned.Store(st.Position)
		wg.Go(func() {
			defer close(f.scanDone)
			if err := f.replays(gctx, st.Position+1, f.scanTo); err != nil && gctx.Err() == nil {
				r.cfg.Log.Warn("projection rebuild: reading the stream's replays failed; an order with a replayed event keeps its state", "err", err)
			}
		})
	}
	f.batches = make(chan fetched, 1)
	wg.Go(func() { f.read(gctx) })
	f.lastHead, f.lastHeadAt = info.State.LastSeq, time.Now()
	last := time.Now()
	for {
		t0 := time.Now()
		n, err := f.step(ctx, 0)
		if err != nil {
			return err
		}
		if err := f.pace(ctx, n, time.Since(t0)); err != nil {
			return err
		}
		if time.Since(last) >= r.cfg.Every {
			if err := f.checkpoint(ctx, func() {}); err != nil {
				return err
			}
			last = time.Now()
		}
		if n < r.cfg.BatchSize {
			// Near the head? Then take over.
			si, err := f.stream.Info(ctx)
			if err != nil {
				return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
			}
			r.update(func() { st.Head = si.State.LastSeq })
			if st.Position+catchUp >= si.State.LastSeq {
				return f.catchUpAndTakeOver(ctx)
			}
		}
	}
}

// orderedResets bounds the tries of the fold's ordered consumers to make
// their consumer on nats (nats.go's default has no end: a fetch would hang
// while the cluster cannot place it): docs/rebuild.md, "In a cluster".
var orderedResets = 6 // a var: a test lowers it

// read fetches batches from the stream ahead of the fold until ctx is done or a fetch fails.
func (f *folder) read(ctx context.Context) {
	for ctx.Err() == nil {
		// A step's events in pulls of at most fetchMax: nats serves a pull in one go, and a long
		// one holds up the producers' publishes to the same stream.
		var out fetched
		size, largest := 0, int(f.r.cfg.JS.Conn().MaxPayload())+64<<10 // a message's headers and subject
		for len(out.msgs) < f.r.cfg.BatchSize && size < stepBytes && out.err == nil {
			want := min(fetchMax, f.r.cfg.BatchSize-len(out.msgs))
			b, err := f.cons.Fetch(want, jetstream.FetchMaxWait(250*time.Millisecond), jetstream.FetchMaxBytes(max(stepBytes-size, largest)))
			if err != nil {
				out.err = err
				break
			}
			got, pending := 0, uint64(0)
			for m := range b.Messages() {
				out.msgs = append(out.msgs, m)
				got, size = got+1, size+len(m.Data())+len(m.Subject())
				if md, err := m.Metadata(); err == nil {
					pending = md.NumPending
				}
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				out.err = err
			}
			// At the head for now; a pull that brought fewer with more pending (a loaded machine)
			// does not end the step.
			if got == 0 || got < want && pending == 0 || ctx.Err() != nil {
				break
			}
		}
		select {
		case f.batches <- out:
		case <-ctx.Done():
			return
		}
		if out.err != nil {
			return
		}
	}
}

// seqAtTime is the first sequence stored at or after t (the last sequence + 1 when none is).
func seqAtTime(ctx context.Context, s jetstream.Stream, t time.Time, ss jetstream.StreamState) (uint64, error) {
	lo, hi := max(ss.FirstSeq, 1), ss.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := s.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			hi = mid
			continue
		}
		if err != nil {
			return 0, err
		}
		if m.Time.Before(t) {
			lo = m.Sequence + 1
		} else {
			hi = min(mid, m.Sequence)
		}
	}
	return lo, nil
}

func (f *folder) position() uint64 { return locked(f.r, func() uint64 { return f.st.Position }) }

// step folds the next batch, stopping after sequence upTo (0: no bound).
// It returns how many messages it took.
func (f *folder) step(ctx context.Context, upTo uint64) (int, error) {
	var b fetched
	select {
	case b = <-f.batches:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if len(b.msgs) > 0 {
		if md, err := b.msgs[len(b.msgs)-1].Metadata(); err == nil {
			if err := f.waitScan(ctx, md.Sequence.Stream); err != nil {
				return 0, err
			}
		}
	}
	f.skipMu.Lock() // the replay scan adds to skip meanwhile
	st := f.st
	floor := st.Position
	var orders [][]processor.Event
	var poison, dead uint64
	index, n, lastSeq := map[string]int{}, 0, st.Position
	for _, m := range b.msgs {
		n++
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		seq := md.Sequence.Stream
		if upTo > 0 && seq > upTo {
			// Past the takeover's head (the live processor's): an ordered consumer delivers in
			// order, so every event up to the head was delivered.
			lastSeq = upTo
			break
		}
		lastSeq = seq
		ev, err := processor.EventOf(m.Subject(), m.Data(), m.Headers(), seq, md.Timestamp, floor)
		if err != nil {
			poison++
			continue
		}
		if f.skip[seq] {
			dead++
			continue
		}
		if of := f.r.replayOf(ev.Header); of > 0 && of >= st.FromSeq && (!f.skip[of] || of <= f.resumed) {
			// Replayed from the dead letters after the fold took its original (or before a restart,
			// when it cannot tell): the order is kept as it is.
			f.keep[ev.OrderID] = true
		}
		i, ok := index[ev.OrderID]
		if !ok {
			i = len(orders)
			index[ev.OrderID] = i
			orders = append(orders, nil)
		}
		orders[i] = append(orders[i], ev)
	}
	f.skipMu.Unlock()
	if b.err != nil && ctx.Err() == nil {
		return n, fmt.Errorf("stream %q: %w", f.r.cfg.Stream, b.err)
	}
	f.r.update(func() { f.r.inStep = 0 }) // a failed step's count is void
	if err := f.apply(ctx, orders); err != nil {
		return n, err
	}
	f.r.update(func() {
		st.Position, st.Head = max(st.Position, lastSeq), max(st.Head, lastSeq)
		st.Poison, st.DeadLettered, f.r.inStep = st.Poison+poison, st.DeadLettered+dead, 0
		f.r.sampleLocked(st)
	})
	return n, ctx.Err()
}

// apply folds one batch into the shadow, retrying what fails (the fold is
// idempotent on sequence) for about a minute.
func (f *folder) apply(ctx context.Context, orders [][]processor.Event) error {
	// Chunks of distinct orders, a few at once: the shadow's writes are pipelined without holding
	// more in flight than a connection takes. Paced, one small chunk at a time, each followed by
	// its share of rest (yield), so that producers never wait behind a burst.
	size, parallel := applyChunk, applyParallel
	if f.duty < 1 {
		size, parallel = applyChunk/4, 1
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(orders, size) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			err := f.applyChunk(ctx, chunk)
			if err == nil {
				err = f.yield(ctx, time.Since(t0))
			}
			if err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// applyChunk applies orders, trying again every 2 s, 30 times at most.
func (f *folder) applyChunk(ctx context.Context, orders [][]processor.Event) error {
	var err error
	for attempt := 0; attempt < 30; attempt++ {
		if err = f.applyOnce(ctx, orders); err == nil {
			// Counted as folded in the step under way, so that progress
			// moves within a step (a step's position moves at its end).
			n := 0
			for _, evs := range orders {
				n += len(evs)
			}
			f.r.update(func() { f.r.inStep += uint64(n); f.r.sampleLocked(f.st) })
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.r.cfg.Log.Warn("projection rebuild: a fold step failed; retrying", "err", err)
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	return fmt.Errorf("folding into the shadow: %w", err)
}

// applyOnce applies orders once; an event the shadow already holds
// (processor.ErrDuplicate) counts as applied.
func (f *folder) applyOnce(ctx context.Context, orders [][]processor.Event) error {
	settled := func(err error) bool { return err == nil || errors.Is(err, processor.ErrDuplicate) }
	if bh, ok := f.h.(processor.BatchHandler); ok {
		for i, errs := range bh.HandleBatch(ctx, orders) {
			for j, err := range errs {
				if !settled(err) {
					return fmt.Errorf("event %d of order %q: %w", orders[i][j].Sequence, orders[i][j].OrderID, err)
				}
			}
		}
		return nil
	}
	for _, evs := range orders {
		for _, ev := range evs {
			if err := f.h.Handle(ctx, ev); !settled(err) {
				return fmt.Errorf("event %d of order %q: %w", ev.Sequence, ev.OrderID, err)
			}
		}
	}
	return nil
}

// checkpoint records the position, with the dead letters that arrived meanwhile and what also
// changes in the state (under the lock), once the stream's events and the shadow's writes are
// durable: a position recorded is never past what survives a power cut.
func (f *folder) checkpoint(ctx context.Context, also func()) error {
	r := f.r
	if err := f.deadLetters(ctx, f.st.DLQScanned+1, false); err != nil {
		return err
	}
	if r.cfg.SyncSource != nil {
		if err := r.cfg.SyncSource(ctx); err != nil {
			return fmt.Errorf("making the stream durable: %w", err)
		}
	}
	if err := r.cfg.Target.Durable(ctx); err != nil {
		return fmt.Errorf("making the shadow durable: %w", err)
	}
	// A Cancel accepted so far (under the lock, as this) ends the rebuild: also is not done.
	var err error
	r.update(func() {
		f.st.Keep = slices.Collect(maps.Keys(f.keep))
		if err = ctx.Err(); err == nil {
			also()
		}
	})
	return cmp.Or(err, r.save(f.st))
}
