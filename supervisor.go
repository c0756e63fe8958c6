package orderstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// A component is one part of a running appliance: the goroutines it runs
// and the step that stops it. Start adds the components in the order they
// start; Close stops them in the reverse order.
type component struct {
	name string
	// run is the component's goroutine (nil: it has none). It returns nil
	// once ctx ends (the component was stopped), or an error when the
	// part failed: the appliance then fails (see [Appliance.Wait]).
	run func(ctx context.Context) error
	// stop is the component's stop step (nil: none). It runs before run's
	// ctx ends, so a component can finish its work first (the processor
	// acks what it holds); ctx bounds it.
	stop func(ctx context.Context) error
}

// supervisor owns the components and every goroutine they run: one
// WaitGroup, one error path. The first component that fails is the
// appliance's error; what fails once stopping began is not a failure.
type supervisor struct {
	log   *slog.Logger
	wg    sync.WaitGroup
	parts []*part // in start order

	mu       sync.Mutex
	stopped  bool // stop began
	stopErrs int  // stop steps that failed so far
	err      error
	failed   string        // the component that failed first; "" while none did
	done     chan struct{} // closed at the first failure, or when stop ends
	once     sync.Once
}

// part is a component being supervised.
type part struct {
	component
	cancel context.CancelFunc
	ended  chan struct{} // closed when run returned
}

func newSupervisor(log *slog.Logger) *supervisor {
	return &supervisor{log: log, done: make(chan struct{})}
}

// add starts c: its run, if any, in a goroutine of the supervisor's.
func (s *supervisor) add(c component) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{component: c, cancel: cancel, ended: make(chan struct{})}
	s.mu.Lock()
	s.parts = append(s.parts, p)
	s.mu.Unlock()
	if c.run == nil {
		close(p.ended)
		return
	}
	s.wg.Go(func() {
		defer close(p.ended)
		err := c.run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped")
		}
		if err != nil && ctx.Err() == nil {
			s.fail(c.name, err)
		}
	})
}

// fail records a component's failure, unless stopping began.
func (s *supervisor) fail(name string, err error) {
	s.mu.Lock()
	if s.stopped || s.failed != "" {
		s.mu.Unlock()
		return
	}
	s.failed, s.err = name, fmt.Errorf("%s: %w", name, err)
	s.mu.Unlock()
	s.log.Error("appliance failed", "component", name, "err", err)
	s.once.Do(func() { close(s.done) })
}

// Err is the first failure (nil while none).
func (s *supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// stopping reports whether stop began.
func (s *supervisor) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// stop stops every component, last started first: its stop step, then
// its run's ctx ends and its goroutine is waited for (up to ctx). It
// returns every step's error.
func (s *supervisor) stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	parts := s.parts
	s.mu.Unlock()
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		n := len(errs)
		if p.stop != nil {
			if err := p.stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		p.cancel()
		select {
		case <-p.ended:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%s: not stopped: %w", p.name, ctx.Err()))
		}
		if len(errs) > n {
			s.mu.Lock()
			s.stopErrs += len(errs) - n
			s.mu.Unlock()
		}
	}
	if ctx.Err() == nil {
		s.wg.Wait()
	}
	s.once.Do(func() { close(s.done) })
	return errors.Join(errs...)
}

// clean reports whether every stop step so far succeeded (the store is
// marked stopped only then).
func (s *supervisor) clean() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopErrs == 0
}
