package rebuild

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/status"
)

// TakeoverPending reports whether a takeover was interrupted: it must be
// finished (FinishTakeover) before the live processor starts.
func (r *Runner) TakeoverPending() bool {
	return locked(r, func() bool { return r.st != nil && r.st.State == status.RebuildTakingOver })
}

// FinishTakeover finishes an interrupted takeover (at start-up, before the live processor runs).
func (r *Runner) FinishTakeover(ctx context.Context) error {
	st := locked(r, func() *state { return r.st })
	if st == nil || st.State != status.RebuildTakingOver {
		return nil
	}
	s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	if last := s.CachedInfo().State.LastSeq; last < st.Position {
		// The shadow folded events the stream lost: copying it would put them in the projection.
		// Start over instead (the recovery check made the live projection forget them).
		r.startOver(st, fmt.Sprintf("the stream ends at %d, below the takeover's position %d: a power cut took events it had folded", last, st.Position))
		return r.save(st)
	}
	r.cfg.Log.Info("projection rebuild: finishing the takeover a stop interrupted", "id", st.ID)
	if err := r.takeover(ctx, st); err != nil {
		return err
	}
	if r.Status().State == status.RebuildDone { // else started over (its shadow lost): Run folds it
		r.release(st.ID)
	}
	return nil
}

func (r *Runner) takingOver(st *state) bool {
	return locked(r, func() bool { return st.State == status.RebuildTakingOver })
}

// catchUpAndTakeOver pauses the live processor, folds up to the stream's head then, and takes over.
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
		// Once the takeover has begun, the processor runs again only after it ended: what it
		// applied now, the takeover's copy (finished by the next start) would overwrite.
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
	if err := f.checkpoint(ctx, func() { st.State, st.Position = status.RebuildTakingOver, head }); err != nil {
		return err
	}
	// A takeover that fails is tried again (the live processor stays
	// paused) for a while, then left to the next start.
	terr := r.takeover(ctx, st)
	for retry := 1; retry < takeoverTries && terr != nil && ctx.Err() == nil; retry++ {
		if err := sleep(ctx, time.Duration(retry)*takeoverBackoff); err != nil {
			return err
		}
		terr = r.takeover(ctx, st)
	}
	if terr == nil || ctx.Err() != nil {
		return terr
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

// takeover runs the Target's takeover for st and records its end. A failure leaves st taking over,
// to be tried again (catchUpAndTakeOver's retries, then FinishTakeover at the next start); a
// shadow lost starts st over.
func (r *Runner) takeover(ctx context.Context, st *state) error {
	keep := map[string]bool{}
	for _, id := range st.Keep {
		keep[id] = true
	}
	s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.cfg.Stream, err)
	}
	// Events the stream's limits removed meanwhile, perhaps before the fold read them: an order
	// with an event below the stream's first is partial too.
	t := &Takeover{From: max(st.FromSeq, s.CachedInfo().State.FirstSeq), ReplacePartial: st.ReplacePartial, Keep: keep,
		Progress: func(copied, total uint64) { r.update(func() { st.Copied, st.ToCopy = copied, total }) }}
	r.cfg.Log.Info("projection rebuild taking over", "id", st.ID, "position", st.Position, "kept", len(keep))
	if err := r.cfg.Target.Takeover(ctx, t); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrShadowLost) {
			// Not done with nothing copied (the live projection as it was, or half copied): Run
			// folds it again from the start.
			r.startOver(st, err.Error()+", while taking over: a power cut took its metadata (meta.inf) or files, or it was deleted")
			if err := r.save(st); err != nil {
				return err
			}
			r.queue(st)
			return nil
		}
		// Neither canceled nor failed: the live projection may be half
		// copied, so the takeover must be finished; report why it is not yet.
		r.update(func() { st.Error = "takeover: " + err.Error() + " (retried at the next start)" })
		_ = r.save(st)
		return fmt.Errorf("takeover: %w", err)
	}
	// Recorded (the version the projection is now built with) before anyone is told it is done.
	if r.cfg.Done != nil {
		done := locked(r, func() status.Rebuild { return st.Rebuild })
		if err := r.cfg.Done(&done); err != nil {
			r.cfg.Log.Error("projection rebuild: recording its end", "err", err)
		}
	}
	r.update(func() {
		st.State, st.EndedAt, st.Error, st.Keep = status.RebuildDone, new(time.Now().UTC()), "", nil
		st.Rebuilt, st.Partial, st.Conflicts, st.Untouched = t.Rebuilt, t.Partial, t.Conflicts, t.Untouched
	})
	r.cfg.Log.Info("projection rebuild done", "id", st.ID, "position", st.Position, "rebuilt", t.Rebuilt, "partial_kept", t.Partial,
		"conflicts_kept", t.Conflicts, "untouched", t.Untouched, "poison", st.Poison, "dead_letters", st.DeadLettered)
	if err := r.save(st); err != nil {
		return err
	}
	// Dropped once its end is recorded (a crash before: the next start drops it, Cleanup).
	if err := r.cfg.Target.Discard(ctx); err != nil {
		r.cfg.Log.Warn("projection rebuild: dropping the shadow", "err", err)
	}
	return nil
}
