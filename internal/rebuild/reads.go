package rebuild

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/orderstore/orderstore/processor"
)

// Reads routes order reads during a takeover: an order the shadow rebuilt is read from it, every
// other from the live projection. Its Switch is [Buckets.Reads]. The zero value reads Live only.
type Reads struct {
	Live *processor.Projection
	cur  atomic.Pointer[shadowReads]
}

type shadowReads struct {
	shadow *processor.Projection
	live   func(orderID string) bool
	mu     sync.RWMutex // held for reading by each read from the shadow
	closed bool         // the takeover is over: the shadow may be gone
}

// Switch sends reads to the shadow (except the orders live reports), or back to the live projection
// (shadow nil) once every read from the shadow finished.
func (r *Reads) Switch(shadow *processor.Projection, live func(orderID string) bool) {
	if shadow != nil {
		r.cur.Store(&shadowReads{shadow: shadow, live: live})
		return
	}
	if old := r.cur.Swap(nil); old != nil {
		old.mu.Lock()
		old.closed = true
		old.mu.Unlock()
	}
}

// For is the projection order id is read from, and what to call when the read is done.
func (r *Reads) For(ctx context.Context, id string) (*processor.Projection, func()) {
	if s := r.cur.Load(); s != nil && !s.live(id) {
		s.mu.RLock()
		if !s.closed {
			if _, err := s.shadow.Get(ctx, id); err == nil {
				return s.shadow, s.mu.RUnlock
			}
		}
		s.mu.RUnlock()
	}
	return r.Live, func() {}
}
