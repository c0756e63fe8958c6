package processor

import (
	"context"
	"errors"
	"sync"
)

// Pausable runs a Processor so that it can be paused (a projection rebuild's takeover does): Pause
// waits for Run of the processor to return, and the processor runs again on resume.
type Pausable struct {
	proc *Processor

	mu        sync.Mutex
	cancelRun context.CancelFunc
	runDone   chan struct{}
	resume    chan struct{} // non-nil while paused
}

// NewPausable returns a Pausable of p.
func NewPausable(p *Processor) *Pausable { return &Pausable{proc: p} }

// Run runs the processor until ctx is done or it fails, pausing it whenever Pause asks.
func (p *Pausable) Run(ctx context.Context) error {
	for {
		p.mu.Lock()
		if r := p.resume; r != nil {
			p.mu.Unlock()
			select {
			case <-r:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		p.cancelRun, p.runDone = cancel, done
		p.mu.Unlock()
		err := p.proc.Run(rctx)
		cancel()
		close(done)
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// Paused reports whether the processor is paused.
func (p *Pausable) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume != nil
}

// Pause stops the processor (its Run returns, with what it holds settled
// or left for redelivery) and keeps it stopped until resume is called.
// One pause at a time; if ctx ends first, the processor resumes.
func (p *Pausable) Pause(ctx context.Context) (resume func(), err error) {
	p.mu.Lock()
	if p.resume != nil {
		p.mu.Unlock()
		return nil, errors.New("the processor is paused already")
	}
	ch := make(chan struct{})
	p.resume = ch
	cancel, done := p.cancelRun, p.runDone
	p.mu.Unlock()
	resume = sync.OnceFunc(func() {
		p.mu.Lock()
		p.resume = nil
		p.mu.Unlock()
		close(ch)
	})
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			resume()
			return nil, ctx.Err()
		}
	}
	return resume, nil
}
