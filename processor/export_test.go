package processor

import "context"

// PendingGaps is how many sequence ranges a Shared processor still has to
// check (for the tests).
func (p *Processor) PendingGaps() int {
	p.gapsMu.Lock()
	defer p.gapsMu.Unlock()
	return len(p.gaps)
}

// LoadBoth reads id the way a first attempt does (a direct get, any
// replica) and the way a retry does (from the leader).
func (p *Projection) LoadBoth(ctx context.Context, id string) (direct, leader Order, directRev, leaderRev uint64, err error) {
	r1, rev1, err := p.load(ctx, id)
	if err != nil {
		return Order{}, Order{}, 0, 0, err
	}
	r2, rev2, err := p.loadFromLeader(ctx, id)
	return r1.Order, r2.Order, rev1, rev2, err
}

// Recovering is how many recovered events are not settled yet.
func (p *Processor) Recovering() int {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	return len(p.recPending)
}

// HeaderSize is headerSize, what a page of dead letters counts of headers.
var HeaderSize = headerSize

// The history reads' bounds: a page's bytes, and the events read at once.
const (
	MaxHistoryPageBytes = maxHistoryPageBytes
	HistoryGetParallel  = historyGetParallel
)
