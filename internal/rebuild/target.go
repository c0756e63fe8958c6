package rebuild

import (
	"context"
	"errors"

	"github.com/orderstore/orderstore/processor"
)

// Target is what a rebuild folds into and hands over to.
type Target interface {
	// Shadow returns the handler folding into the shadow: a fresh,
	// empty one, or (fresh false) the one an interrupted rebuild began.
	Shadow(ctx context.Context, fresh bool) (processor.Handler, error)
	// Durable makes what the shadow's handler wrote durable: a checkpoint names it next.
	Durable(ctx context.Context) error
	// Takeover makes the shadow the live projection, with the live processor paused (or not yet
	// started). It must be idempotent: a crash half-way runs it again at the next start. A shadow
	// that is gone is an error wrapping ErrShadowLost: the rebuild starts over.
	Takeover(ctx context.Context, t *Takeover) error
	// Discard drops the shadow.
	Discard(ctx context.Context) error
	// HighWater is about the highest stream sequence the shadow folded (0: it cannot tell): a
	// resumed rebuild whose shadow is ahead of the stream (a power cut took events the shadow had
	// folded) starts over.
	HighWater(ctx context.Context) (uint64, error)
}

// ErrShadowLost is a Takeover's error when the shadow is gone (the shadow is dropped only after
// the rebuild was recorded done): a power cut took its metadata, or it was deleted.
var ErrShadowLost = errors.New("the rebuild's shadow is gone")

// Takeover is what a takeover is told, and what it reports.
type Takeover struct {
	// From is the first sequence folded: an order with an earlier event
	// is partial, kept as it is unless ReplacePartial.
	From           uint64
	ReplacePartial bool
	// Keep are orders kept as they are whatever the shadow holds (an
	// event of theirs was dead-lettered after the shadow folded it).
	Keep map[string]bool
	// Progress is called as orders are copied (the Runner sets it).
	Progress func(copied, total uint64)

	// The report: orders copied, partial ones kept, orders of Keep, live orders not in the shadow.
	Rebuilt, Partial, Conflicts, Untouched uint64
}
