package rebuild

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/orderstore/orderstore/status"
)

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

// Config configures a Runner.
type Config struct {
	JS               jetstream.JetStream
	Stream           string // the stream the live processor folds
	DeadLetterStream string
	// ReplayMsgID begins the Nats-Msg-Id of this node's replays from the dead letters: only an
	// event whose id begins so is believed to be a replay (its Replay-Of header names the event the
	// fold leaves out). "": none is.
	ReplayMsgID string
	StatePath   string // the durable state file
	Target      Target
	Version     string // the fold's version, reported
	// Pause stops the live processor, after it settled what it holds,
	// until resume is called. Nil: there is none.
	Pause func(ctx context.Context) (resume func(), err error)
	// Check refuses a rebuild up front (the storage budget).
	Check func(ctx context.Context) error
	// SyncSource makes the stream's events durable up to what was folded, before a checkpoint or
	// the takeover records a position (nil: nats synced each event).
	SyncSource func(ctx context.Context) error
	Log        *slog.Logger
	// Done is called when a rebuild took over, before its state says done (the appliance records
	// the version the projection is now built with).
	Done func(st *status.Rebuild) error
	// Claim, if set, claims the rebuild with this id for this node before it starts: in a cluster
	// one node rebuilds at a time, and a claim held by another node refuses it (an error wrapping
	// ErrRunning). Release gives the claim back once the rebuild ended: done, canceled or failed
	// (not one left under way, nor one stopped with the appliance: it goes on at the next start,
	// still claimed).
	Claim     func(ctx context.Context, id string) error
	Release   func(ctx context.Context, id string)
	BatchSize int           // events per fold step; default 50000
	Every     time.Duration // between checkpoints; default 2s
	// Pace is a pause after each fold step: tests slow a rebuild down to stop it half-way.
	Pace time.Duration
}

// ErrRunning is returned when a rebuild is asked while one runs.
var ErrRunning = errors.New("a projection rebuild is already under way")

// ErrNotRunning is returned when there is no rebuild to cancel.
var ErrNotRunning = errors.New("no projection rebuild is under way")

// ErrBadRequest is returned for options that cannot be met.
var ErrBadRequest = errors.New("bad rebuild request")

// ErrTakingOver is returned for a cancel during the takeover.
var ErrTakingOver = errors.New("the rebuild is taking over (the live processor is paused while the rebuilt orders are copied in); it cannot be canceled now and ends in moments")

// Runner runs one rebuild at a time: Start asks for one, Run (an appliance
// component) folds it and takes over, Cancel stops it, Status reports it.
type Runner struct {
	cfg  Config
	jobs chan *state // the rebuild Run runs next

	mu       sync.Mutex
	st       *state             // the running or last rebuild; nil: none
	cancel   context.CancelFunc // stops the job under way; nil: none
	canceled bool               // Cancel asked for st to stop
	samples  []sample           // recent (time, events folded), for the rate
	inStep   uint64             // events of the fold step under way applied so far
	starting bool               // a Start is claiming: another waits for it to end
}

// sample is the fold's position at a time (the fold keeps about 10 s of them), for Status's rate.
type sample struct {
	at  time.Time
	pos uint64 // the position plus the step's applied events
}

// sampleLocked records the fold's progress now, for the rate; r.mu held.
func (r *Runner) sampleLocked(st *state) {
	now := time.Now()
	r.samples = append(r.samples, sample{now, st.Position + r.inStep})
	for len(r.samples) > 2 && now.Sub(r.samples[0].at) > 10*time.Second {
		r.samples = r.samples[1:]
	}
}

// New returns a runner with its state file loaded: a rebuild left folding
// goes on when Run starts, one left taking over is finished by FinishTakeover.
func New(cfg Config) (*Runner, error) {
	cfg.BatchSize = cmp.Or(max(cfg.BatchSize, 0), 50000)
	cfg.Every = cmp.Or(max(cfg.Every, 0), 2*time.Second)
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	st, err := readState(cfg.StatePath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return &Runner{cfg: cfg, jobs: make(chan *state, 1), st: st}, nil
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
	if out.State == status.RebuildFolding && out.FromSeq > 0 {
		out.Done += r.inStep // a step's applied events, before its position moves
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
	if locked(r, func() bool {
		busy := r.st.running() || r.starting
		r.starting = r.starting || !busy // one Start at a time claims (Config.Claim)
		return busy
	}) {
		return r.Status(), ErrRunning
	}
	defer r.update(func() { r.starting = false })
	var err error
	if r.cfg.Check != nil {
		err = r.cfg.Check(ctx)
	}
	id := nuid.Next()
	if err == nil && r.cfg.Claim != nil {
		err = r.cfg.Claim(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	st := &state{Rebuild: status.Rebuild{ID: id, State: status.RebuildFolding, Reason: cmp.Or(opts.Reason, "requested"),
		FromSeq: opts.FromSeq, ReplacePartial: opts.ReplacePartial, Version: r.cfg.Version, StartedAt: time.Now().UTC()},
		FromTime: opts.FromTime, Fresh: true}
	r.mu.Lock()
	defer r.mu.Unlock()
	err = ErrRunning
	if !r.st.running() {
		err = r.saveLocked(st)
	}
	if err != nil {
		r.release(id)
		return nil, err
	}
	r.st, r.canceled, r.samples, r.inStep = st, false, nil, 0
	r.queue(st)
	r.cfg.Log.Info("projection rebuild started", "id", st.ID, "reason", st.Reason, "from_seq", st.FromSeq, "from_time", st.FromTime)
	out := st.Rebuild
	return &out, nil
}

// Cancel stops the rebuild under way and drops its shadow; the live projection stays as it was.
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

// Run runs rebuilds until ctx is done: one left under way by the last run at once, then each Start
// asks for. A stop leaves the one under way to the next start. Run returns early only with the
// error of a takeover that kept failing (see job).
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.st.running() && r.st.State == status.RebuildFolding {
		r.queue(r.st)
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

// job runs one rebuild to its end (done, canceled, failed) or until ctx is done (it stays under
// way, for the next start). A takeover that kept failing is its error: the live processor stays
// paused (it would write orders the takeover has yet to copy, and the copy would then overwrite
// what it wrote), so the appliance must fail and start again, and the next start finishes the
// takeover before the processor runs.
func (r *Runner) job(ctx context.Context, st *state) error {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if locked(r, func() bool { r.cancel = cancel; return r.canceled }) {
		cancel()
	}
	err := r.fold(jctx, st)
	// A cluster electing a leader (the stream's, the consumer's, a bucket's) answers no one for
	// seconds: go on from the position reached, for a while.
	for since := time.Now(); err != nil && transient(err) && jctx.Err() == nil && !r.takingOver(st) && time.Since(since) < electionWait; {
		r.cfg.Log.Warn("projection rebuild: nats did not answer (a cluster electing a leader?); going on from the position reached", "id", st.ID, "position", st.Position, "err", err)
		if sleep(jctx, time.Second) != nil {
			continue
		}
		// From the last checkpoint, as a restart would: what the fold did since (its position, the
		// dead letters it read, the orders it keeps) is redone.
		saved, rerr := readState(r.cfg.StatePath)
		if rerr == nil && (saved.ID != st.ID || !saved.running()) {
			rerr = fmt.Errorf("rebuild state %q holds rebuild %s (%s), not %s", r.cfg.StatePath, saved.ID, saved.State, st.ID)
		}
		if rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		r.update(func() { *st = *saved })
		err = r.fold(jctx, st)
	}
	if err == nil {
		if locked(r, func() bool { return st.State == status.RebuildDone }) {
			r.release(st.ID)
		}
		return nil
	}
	canceled := locked(r, func() bool { r.cancel = nil; return r.canceled })
	if errors.As(err, new(errTakeoverLeft)) || r.takingOver(st) {
		if ctx.Err() != nil {
			r.cfg.Log.Info("projection rebuild: stopped with the appliance while taking over; the next start finishes the takeover before the processor runs", "id", st.ID)
			return nil
		}
		r.cfg.Log.Error("projection rebuild: the takeover failed; the processor stays paused and orderstore stops, so that the next start finishes the takeover before the processor runs", "id", st.ID, "err", err)
		return fmt.Errorf("projection rebuild %s: the takeover failed (the next start finishes it before the processor runs): %w", st.ID, err)
	}
	if ctx.Err() != nil && !canceled {
		r.cfg.Log.Info("projection rebuild stopped with the appliance; it goes on at the next start", "id", st.ID, "position", st.Position)
		return nil
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer dcancel()
	derr := r.cfg.Target.Discard(dctx)
	r.mu.Lock()
	st.EndedAt = new(time.Now().UTC())
	if canceled {
		st.State = status.RebuildCanceled
		r.cfg.Log.Info("projection rebuild canceled; the live projection is as it was", "id", st.ID, "position", st.Position)
	} else {
		st.State, st.Error = status.RebuildFailed, err.Error()
		r.cfg.Log.Error("projection rebuild failed; the live projection is as it was", "id", st.ID, "err", err)
	}
	if derr != nil {
		st.Error = errors.Join(errors.New(st.Error), fmt.Errorf("dropping the shadow: %w", derr)).Error()
	}
	if serr := r.saveLocked(st); serr != nil {
		r.cfg.Log.Error("projection rebuild: state", "err", serr)
	}
	r.mu.Unlock()
	r.release(st.ID)
	return nil
}

func readState(path string) (*state, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rebuild state %q: %w", path, err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("rebuild state %q is damaged (%v): move it away to forget the rebuild (its shadow buckets, if any, are then dropped by the next rebuild)", path, err)
	}
	return &st, nil
}

// electionWait bounds how long a fold retries what nats did not answer.
const electionWait = 2 * time.Minute

// transient reports whether err is nats not answering for a while, as in a leader election.
func transient(err error) bool {
	// What nats answers meanwhile: docs/rebuild.md, "In a cluster".
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, jetstream.ErrServerShutdown) ||
		errors.As(err, &api) && (api.Code == 503 || slices.Contains(offline, api.ErrorCode))
}

// offline are nats' "stream is offline" and "consumer is offline" error
// codes, with and without a reason (nats.go names none of them).
var offline = []jetstream.ErrorCode{10118, 10119, 10194, 10195}

// release gives a rebuild's claim back (Config.Release), bounded.
func (r *Runner) release(id string) {
	if r.cfg.Release == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.cfg.Release(ctx, id)
}

// Cleanup drops a shadow no rebuild under way uses (left by a crash after
// a rebuild ended). Call it at start-up.
func (r *Runner) Cleanup(ctx context.Context) error {
	if locked(r, func() bool { return r.st.running() }) {
		return nil
	}
	return r.cfg.Target.Discard(ctx)
}
