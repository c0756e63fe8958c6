// Package rebuild rebuilds a projection without downtime: it folds the
// stream into a shadow projection while the live processor goes on, and
// once the shadow has caught up, pauses the live processor, folds the last
// events, hands the shadow's state over to the live projection (the
// [Target] decides how) and resumes the live processor.
//
// Its position is durable (a state file, written after the shadow's
// writes were made durable): a rebuild interrupted by a restart, a kill -9
// or a power cut goes on from there, and a takeover interrupted half-way
// is finished at the next start before the processor runs.
package rebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// Target is what a rebuild folds into and hands over to.
type Target interface {
	// Shadow returns the handler folding into the shadow: a fresh,
	// empty one, or (fresh false) the one an interrupted rebuild began.
	Shadow(ctx context.Context, fresh bool) (processor.Handler, error)
	// Durable makes what the shadow's handler wrote durable: a
	// checkpoint names it next.
	Durable(ctx context.Context) error
	// Takeover makes the shadow the live projection, with the live
	// processor paused (or not yet started). It must be idempotent: a
	// crash half-way runs it again at the next start.
	Takeover(ctx context.Context, t *Takeover) error
	// Discard drops the shadow.
	Discard(ctx context.Context) error
	// HighWater is about the highest stream sequence the shadow folded
	// (0: it cannot tell): a resumed rebuild whose shadow is ahead of
	// the stream (a power cut took events the shadow had folded) starts
	// over.
	HighWater(ctx context.Context) (uint64, error)
}

// Takeover is what a takeover is told, and what it reports.
type Takeover struct {
	// From is the first sequence folded: an order with an earlier event
	// is partial, kept as it is unless ReplacePartial.
	From           uint64
	ReplacePartial bool
	// Keep are orders kept as they are whatever the shadow holds (an
	// event of theirs was dead-lettered after the shadow folded it).
	Keep map[string]bool
	// Progress is called as orders are copied.
	Progress func(copied, total uint64)

	Rebuilt, Partial, Conflicts, Untouched uint64
}

// Options are what a rebuild is asked.
type Options struct {
	// FromSeq or FromTime: fold from there instead of the stream's first
	// event. Orders with earlier events are partial (see Takeover).
	FromSeq        uint64
	FromTime       time.Time
	ReplacePartial bool
	// Reason is what status reports ("requested" by default).
	Reason string
}

// Config is a Runner's.
type Config struct {
	JS               jetstream.JetStream
	Stream           string // the stream the live processor folds
	DeadLetterStream string
	// ReplayMsgID begins the Nats-Msg-Id of this node's replays from
	// the dead letters: only an event whose id begins so is believed
	// to be a replay (its Replay-Of header names the event the fold
	// leaves out). "": none is.
	ReplayMsgID string
	StatePath   string // the durable state file
	Target      Target
	Version     string // the fold's version, reported
	// Pause stops the live processor, after it settled what it holds,
	// until resume is called. Nil: there is none.
	Pause func(ctx context.Context) (resume func(), err error)
	// Check refuses a rebuild up front (the storage budget).
	Check func(ctx context.Context) error
	// SyncSource makes the stream's events durable up to what was
	// folded, before a checkpoint or the takeover records a position
	// (nil: nats synced each event).
	SyncSource func(ctx context.Context) error
	Log        *slog.Logger
	// Done is called when a rebuild took over, before its state says
	// done (the appliance records the version the projection is now
	// built with).
	Done      func(st *status.Rebuild) error
	BatchSize int           // events per fold step; default 50000
	Every     time.Duration // between checkpoints; default 2s
	Pace      time.Duration // a pause after each fold step (tests slow a rebuild down to stop it half-way)
	// Yield makes the fold yield the CPU while producers publish (see
	// folder.pace).
	Yield bool
}

// ErrRunning is returned when a rebuild is asked while one runs.
var ErrRunning = errors.New("a projection rebuild is already under way")

// ErrNotRunning is returned when there is no rebuild to cancel.
var ErrNotRunning = errors.New("no projection rebuild is under way")

// ErrBadRequest is returned for options that cannot be met.
var ErrBadRequest = errors.New("bad rebuild request")

// ErrTakingOver is returned for a cancel during the takeover.
var ErrTakingOver = errors.New("the rebuild is taking over (the live processor is paused while the rebuilt orders are copied in); it cannot be canceled now and ends in moments")

// state is the durable state: status plus what a resumed run needs.
type state struct {
	status.Rebuild
	FromTime time.Time `json:"from_time,omitempty"`
	Fresh    bool      `json:"fresh,omitempty"` // the shadow is not made yet
	// DLQScanned: the dead letters up to this sequence of the
	// dead-letter stream were known to the fold (skipped).
	DLQScanned uint64   `json:"dlq_scanned"`
	Keep       []string `json:"keep,omitempty"`
}

// Runner runs one rebuild at a time; Run is its component.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	jobs chan *state

	mu       sync.Mutex
	st       *state // the running or last rebuild; nil: none
	cancel   context.CancelFunc
	canceled bool
	samples  []sample // recent (time, position), for the rate
}

type sample struct {
	at  time.Time
	pos uint64
}

// New returns a runner and loads the state file: a rebuild that was under
// way is Pending.
func New(cfg Config) (*Runner, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 50000
	}
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: cfg, log: cfg.Log, jobs: make(chan *state, 1)}
	data, err := os.ReadFile(cfg.StatePath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("rebuild state %q: %w", cfg.StatePath, err)
	default:
		var st state
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("rebuild state %q is damaged (%v): move it away to forget the rebuild (its shadow buckets, if any, are then dropped by the next rebuild)", cfg.StatePath, err)
		}
		r.st = &st
	}
	return r, nil
}

// Status returns the running or last rebuild; nil when none ran.
func (r *Runner) Status() *status.Rebuild {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == nil {
		return nil
	}
	out := r.st.Rebuild
	if out.Position >= out.FromSeq && out.FromSeq > 0 {
		out.Done = out.Position - out.FromSeq + 1
	}
	if out.Head >= out.FromSeq && out.FromSeq > 0 {
		out.Total = out.Head - out.FromSeq + 1
	}
	out.Done = min(out.Done, out.Total)
	if out.Running() && len(r.samples) >= 2 {
		a, b := r.samples[0], r.samples[len(r.samples)-1]
		if d := b.at.Sub(a.at).Seconds(); d > 0 {
			out.Rate = float64(b.pos-a.pos) / d
		}
		if out.Rate > 0 {
			out.ETASeconds = float64(out.Total-out.Done) / out.Rate
		}
	}
	return &out
}

// TakeoverPending reports whether a takeover was interrupted: it must be
// finished (FinishTakeover) before the live processor starts.
func (r *Runner) TakeoverPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st != nil && r.st.State == status.RebuildTakingOver
}

// FinishTakeover finishes an interrupted takeover (at start-up, before the
// live processor runs).
func (r *Runner) FinishTakeover(ctx context.Context) error {
	r.mu.Lock()
	st := r.st
	r.mu.Unlock()
	if st == nil || st.State != status.RebuildTakingOver {
		return nil
	}
	s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	if last := s.CachedInfo().State.LastSeq; last < st.Position {
		// The shadow folded events the stream lost: copying it would
		// put them in the projection. Start over instead (the recovery
		// check made the live projection forget them).
		r.startOver(st, fmt.Sprintf("the stream ends at %d, below the takeover's position %d: a power cut took events it had folded", last, st.Position))
		return r.save(st)
	}
	r.log.Info("projection rebuild: finishing the takeover a stop interrupted", "id", st.ID)
	return r.takeover(ctx, st)
}

// Start begins a rebuild in the background (Run runs it).
func (r *Runner) Start(ctx context.Context, opts Options) (*status.Rebuild, error) {
	if opts.FromSeq > 0 && !opts.FromTime.IsZero() {
		return nil, fmt.Errorf("%w: give from_seq or from_time, not both", ErrBadRequest)
	}
	if opts.FromSeq > 0 || !opts.FromTime.IsZero() {
		s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
		if err != nil {
			return nil, fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
		}
		ss := s.CachedInfo().State
		if last := ss.LastSeq; opts.FromSeq > last+1 {
			return nil, fmt.Errorf("%w: from_seq %d is past the stream's last sequence (%d)", ErrBadRequest, opts.FromSeq, last)
		}
		// A time after every event would fold nothing and keep every
		// order as it is: surely not what was meant.
		if !opts.FromTime.IsZero() && (ss.Msgs == 0 || opts.FromTime.After(ss.LastTime)) {
			last := "the stream is empty"
			if ss.Msgs > 0 {
				last = "its last event was stored at " + ss.LastTime.UTC().Format(time.RFC3339Nano)
			}
			return nil, fmt.Errorf("%w: from_time %s is after every event of stream %q (%s): nothing would be folded", ErrBadRequest, opts.FromTime.UTC().Format(time.RFC3339Nano), r.cfg.Stream, last)
		}
	}
	r.mu.Lock()
	running := r.st.running()
	r.mu.Unlock()
	if running {
		return r.Status(), ErrRunning
	}
	if r.cfg.Check != nil {
		if err := r.cfg.Check(ctx); err != nil {
			return nil, err
		}
	}
	if opts.Reason == "" {
		opts.Reason = "requested"
	}
	st := &state{Rebuild: status.Rebuild{ID: nuid.Next(), State: status.RebuildFolding, Reason: opts.Reason,
		FromSeq: opts.FromSeq, ReplacePartial: opts.ReplacePartial, Version: r.cfg.Version, StartedAt: time.Now().UTC()},
		FromTime: opts.FromTime, Fresh: true}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.running() {
		return nil, ErrRunning
	}
	if err := r.saveLocked(st); err != nil {
		return nil, err
	}
	r.st, r.canceled, r.samples = st, false, nil
	select {
	case r.jobs <- st:
	default:
	}
	r.log.Info("projection rebuild started", "id", st.ID, "reason", st.Reason, "from_seq", st.FromSeq, "from_time", st.FromTime)
	out := st.Rebuild
	return &out, nil
}

// Cancel stops the rebuild under way and drops its shadow; the live
// projection stays as it was.
func (r *Runner) Cancel() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.st.running():
		return ErrNotRunning
	case r.st.State == status.RebuildTakingOver:
		return ErrTakingOver
	}
	r.canceled = true
	if r.cancel != nil {
		r.cancel()
	}
	return nil
}

// Run runs rebuilds until ctx is done: one left under way by the last
// run at once, then each Start asks for. A stop leaves the one under way
// to the next start.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.st.running() && r.st.State == status.RebuildFolding {
		select {
		case r.jobs <- r.st:
		default:
		}
	}
	r.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-r.jobs:
			if err := r.job(ctx, st); err != nil {
				return err
			}
		}
	}
}

// job runs one rebuild to its end (done, canceled, failed) or until ctx
// is done (it stays under way, for the next start). A takeover that kept
// failing is its error: the live processor stays paused (it would write
// orders the takeover has yet to copy, and the copy would then overwrite
// what it wrote), so the appliance must fail and start again, and the
// next start finishes the takeover before the processor runs.
func (r *Runner) job(ctx context.Context, st *state) error {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	r.cancel = cancel
	canceled := r.canceled
	r.mu.Unlock()
	if canceled {
		cancel()
	}
	err := r.fold(jctx, st)
	if err == nil {
		return nil
	}
	r.mu.Lock()
	canceled = r.canceled
	r.cancel = nil
	r.mu.Unlock()
	var left errTakeoverLeft
	if errors.As(err, &left) || r.takingOver(st) {
		if ctx.Err() != nil {
			r.log.Info("projection rebuild: stopped with the appliance while taking over; the next start finishes the takeover before the processor runs", "id", st.ID)
			return nil
		}
		r.log.Error("projection rebuild: the takeover failed; the processor stays paused and orderstore stops, so that the next start finishes the takeover before the processor runs", "id", st.ID, "err", err)
		return fmt.Errorf("projection rebuild %s: the takeover failed (the next start finishes it before the processor runs): %w", st.ID, err)
	}
	if ctx.Err() != nil && !canceled {
		r.log.Info("projection rebuild stopped with the appliance; it goes on at the next start", "id", st.ID, "position", st.Position)
		return nil
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer dcancel()
	derr := r.cfg.Target.Discard(dctx)
	end := time.Now().UTC()
	r.mu.Lock()
	st.EndedAt = &end
	if canceled {
		st.State = status.RebuildCanceled
		r.log.Info("projection rebuild canceled; the live projection is as it was", "id", st.ID, "position", st.Position)
	} else {
		st.State, st.Error = status.RebuildFailed, err.Error()
		r.log.Error("projection rebuild failed; the live projection is as it was", "id", st.ID, "err", err)
	}
	if derr != nil {
		st.Error = errors.Join(errors.New(st.Error), fmt.Errorf("dropping the shadow: %w", derr)).Error()
	}
	if serr := r.saveLocked(st); serr != nil {
		r.log.Error("projection rebuild: state", "err", serr)
	}
	r.mu.Unlock()
	return nil
}

// takingOver reports whether st's takeover has begun and not ended.
func (r *Runner) takingOver(st *state) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return st.State == status.RebuildTakingOver
}

// save writes st durably.
func (r *Runner) save(st *state) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveLocked(st)
}

func (r *Runner) saveLocked(st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(r.cfg.StatePath, append(data, '\n'), 0o640); err != nil {
		return fmt.Errorf("rebuild state %q: %w", r.cfg.StatePath, err)
	}
	return nil
}

// update changes st under the lock (Status reads it).
func (r *Runner) update(fn func()) {
	r.mu.Lock()
	fn()
	r.mu.Unlock()
}

// folder is one run of the fold.
type folder struct {
	r       *Runner
	st      *state
	h       processor.Handler
	stream  jetstream.Stream
	cons    jetstream.Consumer
	skipMu  sync.Mutex      // the replay scan adds to skip while the fold reads it
	skip    map[uint64]bool // dead letters (and replayed originals): not folded
	keep    map[string]bool
	resumed uint64 // the position this run began at: what lies below was folded by an earlier run

	batches chan fetched // the reader's batches, one fetched ahead of the fold

	// The replay scan runs ahead of the fold up to scanTo: the fold
	// waits until it passed what it folds.
	scanTo   uint64
	scanned  atomic.Uint64
	scanDone chan struct{}

	// Pacing: while producers publish, the fold yields the CPU (see
	// pace).
	lastHead   uint64
	lastHeadAt time.Time
	ingest     float64       // events/s producers stored, last measured
	foldRate   float64       // events per second of the fold's own work
	duty       float64       // the share of the time the fold works (1: flat out)
	rested     time.Duration // slept by yield: not the fold's work
}

// fetched is one batch the reader fetched.
type fetched struct {
	msgs []jetstream.Msg
	err  error
}

// catchUp is how close to the stream's head the fold must be to take
// over; fetchMax the most events one pull asks for.
const (
	catchUp  = 2000
	fetchMax = 2000
)

// applyParallel chunks of applyChunk orders are applied at once.
const (
	applyParallel = 4
	applyChunk    = 1000
)

// startOver makes st a fresh rebuild from its first sequence: its shadow
// cannot be trusted or is gone.
func (r *Runner) startOver(st *state, why string) {
	r.log.Warn("projection rebuild starts over", "id", st.ID, "position", st.Position, "why", why)
	r.update(func() {
		st.State, st.Fresh, st.Error = status.RebuildFolding, true, ""
		if st.FromSeq > 0 {
			st.Position = st.FromSeq - 1
		}
		st.Poison, st.DeadLettered, st.DLQScanned, st.Keep = 0, 0, 0, nil
		st.Copied, st.ToCopy = 0, 0
	})
}

// trusted reports why a resumed rebuild's shadow cannot be trusted ("":
// it can): the stream ends below what it folded, so a power cut took
// events the shadow holds (their sequences will name other events).
func (r *Runner) trusted(ctx context.Context, st *state, last uint64) (string, error) {
	if st.Position > last {
		return fmt.Sprintf("the stream ends at %d, below the rebuild's position %d: a power cut took events it had folded", last, st.Position), nil
	}
	hw, err := r.cfg.Target.HighWater(ctx)
	if err != nil {
		return "", fmt.Errorf("shadow: %w", err)
	}
	if hw > last {
		return fmt.Sprintf("the stream ends at %d, below the shadow's events (up to %d): a power cut took events it had folded", last, hw), nil
	}
	return "", nil
}

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
	if st.Position == 0 {
		if err := f.start(ctx, info.State); err != nil {
			return err
		}
	}
	r.update(func() {
		st.Fresh = false
		st.Head = info.State.LastSeq
	})
	f.resumed = st.Position
	if err := r.save(st); err != nil {
		return err
	}
	// What the live processor dead-lettered is not folded: the live
	// projection does not hold it, and a replay would add it twice.
	if err := f.deadLetters(ctx, fresh); err != nil {
		return err
	}
	r.log.Info("projection rebuild folding", "id", st.ID, "from_seq", st.FromSeq, "position", st.Position, "head", info.State.LastSeq)
	if f.cons, err = js.OrderedConsumer(ctx, r.cfg.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: st.Position + 1}); err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	// The replay scan and the reader run beside the fold, and end with
	// it.
	gctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	// The scan reads every event's headers, so that an order with a
	// replayed event is rebuilt rather than kept as it is. A replay
	// removes the dead letter it replays, so while the dead-letter
	// stream holds every dead letter it ever held (none at all, or
	// none removed: its message count is its last sequence), there is
	// no replay of this node's to find. (A replay cut short before
	// its dead letter was removed needs no scan: its original is still
	// a dead letter.) Without the scan, the fold still folds no event
	// twice: a replay whose original it folded keeps its order as it
	// is (step).
	if f.mayHaveReplays(ctx) {
		f.scanTo, f.scanDone = info.State.LastSeq, make(chan struct{})
		f.scanned.Store(st.Position)
		wg.Go(func() {
			defer close(f.scanDone)
			if err := f.replays(gctx, st.Position+1, f.scanTo); err != nil && gctx.Err() == nil {
				r.log.Warn("projection rebuild: reading the stream's replays failed; an order with a replayed event keeps its state", "err", err)
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
			if err := f.checkpoint(ctx); err != nil {
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

// read fetches batches from the stream ahead of the fold until ctx is
// done or a fetch fails.
func (f *folder) read(ctx context.Context) {
	for ctx.Err() == nil {
		// A step's events in pulls of at most fetchMax: nats serves a
		// pull in one go, and a long one holds up the producers'
		// publishes to the same stream.
		var out fetched
		for len(out.msgs) < f.r.cfg.BatchSize && out.err == nil {
			want := min(fetchMax, f.r.cfg.BatchSize-len(out.msgs))
			b, err := f.cons.Fetch(want, jetstream.FetchMaxWait(250*time.Millisecond))
			if err != nil {
				out.err = err
				break
			}
			got := 0
			for m := range b.Messages() {
				out.msgs = append(out.msgs, m)
				got++
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				out.err = err
			}
			if got < want || ctx.Err() != nil {
				break // at the head for now
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

// pace yields the CPU while producers publish: the fold then works the
// share of the time that keeps it foldAhead times as fast as the
// producers and minGain events a second faster at least (so that it
// still catches up, and soon when they publish little), and at least
// minDuty. Without producers it runs flat out.
func (f *folder) pace(ctx context.Context, n int, work time.Duration) error {
	r := f.r
	work -= f.rested
	f.rested = 0
	if n > 0 && work > 0 {
		rate := float64(n) / work.Seconds()
		if f.foldRate == 0 {
			f.foldRate = rate
		}
		f.foldRate = 0.8*f.foldRate + 0.2*rate
	}
	if since := time.Since(f.lastHeadAt); since >= time.Second {
		if si, err := f.stream.Info(ctx); err == nil {
			head := si.State.LastSeq
			f.ingest = float64(head-min(head, f.lastHead)) / since.Seconds()
			f.lastHead, f.lastHeadAt = head, time.Now()
			r.update(func() { f.st.Head = max(f.st.Head, head) })
		}
	}
	f.duty = 1
	if f.ingest >= minIngestToPace && f.foldRate > 0 && r.cfg.Yield {
		target := max(foldAhead*f.ingest, f.ingest+minGain)
		f.duty = min(max(target/f.foldRate, minDuty), 1)
	}
	r.update(func() { f.st.Paced = f.duty < 1 })
	if r.cfg.Pace <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.cfg.Pace):
		return nil
	}
}

// yield sleeps after work so that the fold works the duty share of the
// time (apply calls it after each chunk while paced).
func (f *folder) yield(ctx context.Context, work time.Duration) error {
	if f.duty >= 1 {
		return nil
	}
	rest := time.Duration(float64(work) * (1/f.duty - 1))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rest):
		f.rested += rest
		return nil
	}
}

// minIngestToPace is the producers' rate (events/s) from which the fold
// yields the CPU; minDuty the least share of the time it works then, and
// foldAhead how much faster than the producers it folds: it gains
// (foldAhead-1) times their rate on the head each second. What the fold
// takes the producers lose (bench/rebuild on 2 cores, 32 synchronous
// producers): folding twice their rate, at least a tenth of the time,
// left them 0.60 of their rate; 1.25 times, at least 2 %, 0.81. Alone,
// foldAhead would make a rebuild beside a trickle of producers crawl
// (1.25 times 200 events/s gains 50 a second): minGain keeps it gaining
// at least 1,000 a second.
const (
	minIngestToPace = 100
	minDuty         = 0.02
	foldAhead       = 1.25
	minGain         = 1000
)

// start sets where a fresh rebuild begins.
func (f *folder) start(ctx context.Context, ss jetstream.StreamState) error {
	st := f.st
	from := max(st.FromSeq, ss.FirstSeq, 1)
	if !st.FromTime.IsZero() {
		var err error
		if from, err = seqAtTime(ctx, f.stream, st.FromTime, ss); err != nil {
			return fmt.Errorf("from_time %s: %w", st.FromTime.Format(time.RFC3339), err)
		}
	}
	f.r.update(func() {
		st.FromSeq = from
		st.Position = from - 1
	})
	return nil
}

// seqAtTime is the first sequence stored at or after t (the last
// sequence + 1 when none is).
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

// deadLetters reads the dead-letter stream: dead letters the fold knew
// (all when all, else those up to DLQScanned) are skipped; newer ones of
// an event already folded put its order in keep.
func (f *folder) deadLetters(ctx context.Context, all bool) error {
	s, err := f.r.cfg.JS.Stream(ctx, f.r.cfg.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream %q: %w", f.r.cfg.DeadLetterStream, err)
	}
	// Every dead letter is read: the older ones tell what to skip.
	known := f.st.DLQScanned
	last, err := f.scanDeadLetters(ctx, s, 1, func(dlqSeq, orig uint64, orderID string) {
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

// mayHaveReplays reports whether the dead-letter stream ever lost a dead
// letter (a replay removes the one it replays); true when it cannot tell.
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

// scanDeadLetters calls fn for each dead letter of the folded stream
// from dead-letter sequence from on, and returns the last sequence read.
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
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
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

// replays reads the headers of events from..to: an event replayed from
// the dead letters names its original, which is not folded (it was a
// dead letter; the replay is folded in its place).
func (f *folder) replays(ctx context.Context, from, to uint64) error {
	if from > to {
		return nil
	}
	c, err := f.r.cfg.JS.OrderedConsumer(ctx, f.r.cfg.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, HeadersOnly: true})
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

// position is the last sequence the fold folded.
func (f *folder) position() uint64 {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	return f.st.Position
}

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
	f.skipMu.Lock()
	defer f.skipMu.Unlock()
	st := f.st
	floor := st.Position
	var (
		orders  [][]processor.Event
		index   = map[string]int{}
		n       int
		lastSeq = st.Position
		poison  uint64
		dead    uint64
	)
	for _, m := range b.msgs {
		n++
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		seq := md.Sequence.Stream
		if upTo > 0 && seq > upTo {
			// Past the takeover's head (the live processor's): an
			// ordered consumer delivers in order, so every event up to
			// the head was delivered.
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
			// Replayed from the dead letters after the fold took its
			// original (or before a restart, when it cannot tell):
			// the order is kept as it is.
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
	if b.err != nil && ctx.Err() == nil {
		return n, fmt.Errorf("stream %q: %w", f.r.cfg.Stream, b.err)
	}
	f.skipMu.Unlock()
	err := f.apply(ctx, orders)
	f.skipMu.Lock()
	if err != nil {
		return n, err
	}
	f.r.update(func() {
		st.Position = max(st.Position, lastSeq)
		st.Poison += poison
		st.DeadLettered += dead
		st.Head = max(st.Head, lastSeq)
		now := time.Now()
		f.r.samples = append(f.r.samples, sample{now, st.Position})
		for len(f.r.samples) > 2 && now.Sub(f.r.samples[0].at) > 10*time.Second {
			f.r.samples = f.r.samples[1:]
		}
	})
	return n, ctx.Err()
}

// apply folds one batch into the shadow, retrying what fails (the fold is
// idempotent on sequence) for about a minute.
func (f *folder) apply(ctx context.Context, orders [][]processor.Event) error {
	if len(orders) <= applyChunk && f.duty >= 1 {
		return f.applyChunk(ctx, orders)
	}
	if f.duty < 1 {
		// Paced: one small chunk at a time, each followed by its
		// share of rest, so that producers never wait behind a burst.
		for from := 0; from < len(orders); from += applyChunk / 4 {
			t0 := time.Now()
			if err := f.applyChunk(ctx, orders[from:min(from+applyChunk/4, len(orders))]); err != nil {
				return err
			}
			if err := f.yield(ctx, time.Since(t0)); err != nil {
				return err
			}
		}
		return nil
	}
	// Chunks of distinct orders, a few at once: the shadow's writes are
	// pipelined without holding more in flight than a connection takes.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, applyParallel)
	var wg sync.WaitGroup
	for from := 0; from < len(orders); from += applyChunk {
		chunk := orders[from:min(from+applyChunk, len(orders))]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f.applyChunk(ctx, chunk); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (f *folder) applyChunk(ctx context.Context, orders [][]processor.Event) error {
	if len(orders) == 0 {
		return nil
	}
	var last error
	for attempt := 0; attempt < 30; attempt++ {
		failed := f.applyOnce(ctx, orders)
		if failed == nil {
			return nil
		}
		last = failed
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.r.log.Warn("projection rebuild: a fold step failed; retrying", "err", failed)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return fmt.Errorf("folding into the shadow: %w", last)
}

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

// durable makes the stream's events and the shadow's writes durable: a
// position recorded next is never past what survives a power cut.
func (r *Runner) durable(ctx context.Context) error {
	if r.cfg.SyncSource != nil {
		if err := r.cfg.SyncSource(ctx); err != nil {
			return fmt.Errorf("making the stream durable: %w", err)
		}
	}
	if err := r.cfg.Target.Durable(ctx); err != nil {
		return fmt.Errorf("making the shadow durable: %w", err)
	}
	return nil
}

// checkpoint makes the shadow durable and then records the position, with
// the dead letters that arrived meanwhile.
func (f *folder) checkpoint(ctx context.Context) error {
	if err := f.newDeadLetters(ctx); err != nil {
		return err
	}
	if err := f.r.durable(ctx); err != nil {
		return err
	}
	f.r.update(func() { f.st.Keep = keys(f.keep) })
	return f.r.save(f.st)
}

// newDeadLetters reads the dead letters since the last read.
func (f *folder) newDeadLetters(ctx context.Context) error {
	s, err := f.r.cfg.JS.Stream(ctx, f.r.cfg.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream %q: %w", f.r.cfg.DeadLetterStream, err)
	}
	last, err := f.scanDeadLetters(ctx, s, f.st.DLQScanned+1, func(_, orig uint64, orderID string) {
		f.dead(orig, orderID, false)
	})
	if err != nil {
		return err
	}
	f.r.update(func() { f.st.DLQScanned = max(f.st.DLQScanned, last) })
	return nil
}

// catchUpAndTakeOver pauses the live processor, folds up to the stream's
// head as it is then, and takes over.
func (f *folder) catchUpAndTakeOver(ctx context.Context) error {
	r, st := f.r, f.st
	resume := func() {}
	if r.cfg.Pause != nil {
		var err error
		if resume, err = r.cfg.Pause(ctx); err != nil {
			return fmt.Errorf("pausing the live processor: %w", err)
		}
	}
	defer func() {
		// Once the takeover has begun, the processor runs again only
		// after it ended: what it applied now, the takeover's copy
		// (finished by the next start) would overwrite.
		if !r.takingOver(st) {
			resume()
		}
	}()
	si, err := f.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	head := si.State.LastSeq
	r.update(func() { st.Head = head })
	for st.Position < head {
		n, err := f.step(ctx, head)
		if err != nil {
			return err
		}
		if n == 0 {
			// Nothing delivered: is anything left up to head?
			m, err := f.stream.GetMsg(ctx, st.Position+1, jetstream.WithGetMsgSubject(">"))
			if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence > head {
				r.update(func() { st.Position = head })
				break
			}
			if err != nil {
				return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
			}
		}
	}
	if err := f.newDeadLetters(ctx); err != nil {
		return err
	}
	if err := r.durable(ctx); err != nil {
		return err
	}
	r.update(func() {
		st.State = status.RebuildTakingOver
		st.Position = head
		st.Keep = keys(f.keep)
	})
	if err := r.save(st); err != nil {
		return err
	}
	// A takeover that fails is tried again (the live processor stays
	// paused) for a while, then left to the next start.
	var terr error
	for attempt := 0; attempt < takeoverTries; attempt++ {
		if terr = r.takeover(ctx, st); terr == nil || ctx.Err() != nil {
			return terr
		}
		if attempt == takeoverTries-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * takeoverBackoff):
		}
	}
	return errTakeoverLeft{terr}
}

// A takeover is tried takeoverTries times, the n-th retry after n times
// takeoverBackoff (about 45 s in all), before the rebuild gives up on it.
var (
	takeoverTries   = 10
	takeoverBackoff = time.Second
)

// errTakeoverLeft is a takeover that kept failing: it stays under way,
// for the next start to finish, and its shadow is kept.
type errTakeoverLeft struct{ error }

// takeover runs the Target's takeover for st and records its end. A
// failure leaves st taking over: the next start finishes it.
func (r *Runner) takeover(ctx context.Context, st *state) error {
	keep := map[string]bool{}
	for _, id := range st.Keep {
		keep[id] = true
	}
	t := &Takeover{From: st.FromSeq, ReplacePartial: st.ReplacePartial, Keep: keep,
		Progress: func(copied, total uint64) { r.update(func() { st.Copied, st.ToCopy = copied, total }) }}
	r.log.Info("projection rebuild taking over", "id", st.ID, "position", st.Position, "kept", len(keep))
	if err := r.cfg.Target.Takeover(ctx, t); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Not canceled, not failed: the live projection may be half
		// copied. Retried at the next start; report it.
		r.update(func() { st.Error = "takeover: " + err.Error() + " (retried at the next start)" })
		_ = r.save(st)
		return fmt.Errorf("takeover: %w", err)
	}
	// Recorded (the version the projection is now built with) before
	// anyone is told it is done.
	if r.cfg.Done != nil {
		r.mu.Lock()
		done := st.Rebuild
		r.mu.Unlock()
		if err := r.cfg.Done(&done); err != nil {
			r.log.Error("projection rebuild: recording its end", "err", err)
		}
	}
	end := time.Now().UTC()
	r.update(func() {
		st.State, st.EndedAt, st.Error = status.RebuildDone, &end, ""
		st.Rebuilt, st.Partial, st.Conflicts, st.Untouched = t.Rebuilt, t.Partial, t.Conflicts, t.Untouched
		st.Keep = nil
	})
	r.log.Info("projection rebuild done", "id", st.ID, "position", st.Position, "rebuilt", t.Rebuilt, "partial_kept", t.Partial,
		"conflicts_kept", t.Conflicts, "untouched", t.Untouched, "poison", st.Poison, "dead_letters", st.DeadLettered)
	if err := r.save(st); err != nil {
		return err
	}
	// Dropped once its end is recorded (a crash before: the next start
	// drops it, Cleanup).
	if err := r.cfg.Target.Discard(ctx); err != nil {
		r.log.Warn("projection rebuild: dropping the shadow", "err", err)
	}
	return nil
}

// Cleanup drops a shadow no rebuild under way uses (left by a crash after
// a rebuild ended). Call it at start-up.
func (r *Runner) Cleanup(ctx context.Context) error {
	r.mu.Lock()
	running := r.st.running()
	r.mu.Unlock()
	if running {
		return nil
	}
	return r.cfg.Target.Discard(ctx)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (s *state) running() bool { return s != nil && s.Rebuild.Running() }
