package rebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/status"
)

// state is the durable state: status plus what a resumed run needs.
type state struct {
	status.Rebuild
	FromTime time.Time `json:"from_time,omitempty"`
	Fresh    bool      `json:"fresh,omitempty"` // the shadow is not made yet
	// DLQScanned: the dead letters up to this sequence of the
	// dead-letter stream were known to the fold (skipped).
	DLQScanned uint64 `json:"dlq_scanned"`
	// Keep is the fold's Takeover.Keep, as of the last checkpoint.
	Keep []string `json:"keep,omitempty"`
}

// running reports whether s is a rebuild under way (folding or taking over).
func (s *state) running() bool { return s != nil && s.Rebuild.Running() }

func (r *Runner) save(st *state) error {
	return locked(r, func() error { return r.saveLocked(st) })
}

// saveLocked is save with r.mu held.
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

// update runs fn, which changes the state, under the lock (Status reads it).
func (r *Runner) update(fn func()) {
	r.mu.Lock()
	fn()
	r.mu.Unlock()
}

// locked runs fn under the lock and returns its result (what it read of the state).
func locked[T any](r *Runner, fn func() T) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fn()
}

// queue hands st to Run, unless a rebuild waits there already.
func (r *Runner) queue(st *state) {
	select {
	case r.jobs <- st:
	default:
	}
}

// startOver makes st a fresh rebuild from its first sequence: its shadow is untrusted or gone.
func (r *Runner) startOver(st *state, why string) {
	r.cfg.Log.Warn("projection rebuild starts over", "id", st.ID, "position", st.Position, "why", why)
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
