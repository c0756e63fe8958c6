package orderstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/run"
)

// A component is one part of a running appliance: the goroutine it runs and the step that stops it.
// A start step adds the components it starts; they stop in the reverse order.
type component struct {
	name string
	// run is the component's goroutine (nil: none). It returns nil once ctx ends (the component was
	// stopped), or an error when the part failed: the appliance then fails (see [Appliance.Wait]).
	run func(ctx context.Context) error
	// stop is the component's stop step (nil: none). It runs before run's ctx ends, so a component
	// can finish its work first (the processor acks what it holds); ctx bounds it.
	stop func(ctx context.Context) error
}

// watch is the run of a component whose goroutine is not its own: it
// returns err() once ended is closed, or nil once ctx ends.
func watch(ended <-chan struct{}, err func() error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-ended:
			return err()
		case <-ctx.Done():
			return nil
		}
	}
}

// defaultStopTimeout bounds the stop after a failed start-up.
const defaultStopTimeout = 30 * time.Second

// supervisor runs the appliance as one run.Group (github.com/oklog/run): an actor per start step,
// and a closer actor that returns when stop is called.
//
// A step's actor waits until the step before it started, runs its step (which adds the step's
// components) and then waits for its interrupt. The group interrupts its actors in the order they
// were added, each interrupt returning once its step's components stopped; the actors are added
// last step first, so the appliance stops in reverse start order, each step completely before the
// one before it. Run returns when the closer returns (stop) or a step fails (a failed start).
//
// A component whose goroutine fails does not stop the group: it is the appliance's failure (the
// first one is kept), Done closes and readiness names it; the owner calls Close, as the CLI does.
type supervisor struct {
	log    *slog.Logger
	stages []*stage // in start order

	closer    chan struct{} // closed by stop: the closer actor returns
	closeOnce sync.Once
	ran       chan struct{} // closed once the group's Run returned, with runErr
	runErr    error
	stopOnce  sync.Once
	stopErr   error // stop's result

	mu          sync.Mutex
	cur         *stage // the stage whose step runs: add puts its components there
	stopped     bool   // stop began
	stopCtx     context.Context
	stopErrs    []error // of the stop steps, in the order they ran (complete once ran is closed)
	cut         []*part // parts whose goroutine had not returned when the stop's ctx ended (unguarded)
	startFailed bool
	err         error         // the first component's failure; nil while none failed
	done        chan struct{} // closed at the first failure, or when stop ends
	once        sync.Once
}

// stage is one start step, an actor of the group, with the components its step started.
type stage struct {
	step      func(ctx context.Context) error
	parts     []*part       // in start order
	started   chan struct{} // closed once the step succeeded
	abort     chan struct{} // closed by the interrupt
	abortOnce sync.Once
	executed  chan struct{} // closed when the actor's execute returned
}

// part is a component being supervised.
type part struct {
	component
	cancel context.CancelFunc
	ended  chan struct{} // closed when run returned
}

func newSupervisor(log *slog.Logger) *supervisor {
	return &supervisor{log: log, done: make(chan struct{}), closer: make(chan struct{}), ran: make(chan struct{})}
}

// stage adds a start step; start runs them in the order added.
func (s *supervisor) stage(step func(ctx context.Context) error) {
	s.stages = append(s.stages, &stage{step: step, started: make(chan struct{}), abort: make(chan struct{}),
		executed: make(chan struct{})})
}

// start runs the group and returns once every step started, or with the
// error of the step that failed once everything it started stopped.
func (s *supervisor) start(ctx context.Context) error {
	var g run.Group
	g.Add(func() error { <-s.closer; return nil }, func(error) { s.closeOnce.Do(func() { close(s.closer) }) })
	for i := len(s.stages) - 1; i >= 0; i-- {
		var prev *stage
		if i > 0 {
			prev = s.stages[i-1]
		}
		st := s.stages[i]
		g.Add(func() error { return s.execute(ctx, prev, st) }, func(error) { s.interrupt(st) })
	}
	go func() {
		s.runErr = g.Run()
		s.notStopped()
		close(s.ran)
	}()
	if len(s.stages) == 0 {
		return nil
	}
	select {
	case <-s.stages[len(s.stages)-1].started:
		return nil
	case <-s.ran:
		s.once.Do(func() { close(s.done) })
		return errors.Join(append([]error{s.runErr}, s.stopErrs...)...)
	}
}

// execute, a stage's actor, waits for the previous stage, runs the step and awaits its interrupt.
func (s *supervisor) execute(ctx context.Context, prev, st *stage) error {
	defer close(st.executed)
	if prev != nil {
		select {
		case <-prev.started:
		case <-st.abort:
			return nil
		}
	}
	s.locked(func() { s.cur = st })
	if err := st.step(ctx); err != nil {
		s.locked(func() { s.startFailed, s.stopped = true, true }) // what fails from here on is the stop's
		return err
	}
	close(st.started)
	<-st.abort
	return nil
}

// interrupt stops a stage: its actor returns, then its components stop,
// last started first, each with its stop step, then its goroutine's ctx
// ends and the goroutine is waited for (up to the stop's ctx; see notStopped).
func (s *supervisor) interrupt(st *stage) {
	st.abortOnce.Do(func() { close(st.abort) })
	<-st.executed
	ctx := s.stopContext()
	for i := len(st.parts) - 1; i >= 0; i-- {
		p := st.parts[i]
		var err error
		if p.stop != nil {
			err = p.stop(ctx)
		}
		p.cancel()
		select {
		case <-p.ended:
		case <-ctx.Done():
			s.cut = append(s.cut, p) // its goroutine may be returning (interrupts run one at a time)
		}
		if err != nil {
			s.locked(func() { s.stopErrs = append(s.stopErrs, err) })
		}
	}
}

// notStopped reports, as stop errors, the parts whose goroutine had not returned when the stop's
// ctx ended and still runs after the rest of the stop and up to a second more: only those did not
// stop (a goroutine returns at once when its ctx ends, the processor's drain is cut short then).
// It runs once every interrupt returned, before ran is closed.
func (s *supervisor) notStopped() {
	grace, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, p := range s.cut {
		select {
		case <-p.ended:
		case <-grace.Done():
			select {
			case <-p.ended:
			default:
				s.stopErrs = append(s.stopErrs, fmt.Errorf("%s: not stopped: %w", p.name, s.stopCtx.Err()))
			}
		}
	}
}

// stopContext bounds the stop steps: stop's ctx, or defaultStopTimeout after a failed start-up.
func (s *supervisor) stopContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopCtx == nil {
		ctx, cancel := context.WithTimeout(context.Background(), defaultStopTimeout)
		context.AfterFunc(ctx, cancel)
		s.stopCtx = ctx
	}
	return s.stopCtx
}

// add starts c as a component of the stage whose step runs: its run, if
// any, in a goroutine the stage's interrupt joins.
func (s *supervisor) add(c component) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{component: c, cancel: cancel, ended: make(chan struct{})}
	var st *stage
	s.locked(func() { st = s.cur })
	if st == nil {
		panic("orderstore: component " + c.name + " added outside a start step")
	}
	st.parts = append(st.parts, p)
	if c.run == nil {
		close(p.ended)
		return
	}
	go func() {
		defer close(p.ended)
		if err := c.run(ctx); ctx.Err() == nil {
			s.fail(c.name, cmp.Or(err, errors.New("stopped")))
		}
	}()
}

// fail records a component's failure, unless stopping began.
func (s *supervisor) fail(name string, err error) {
	s.mu.Lock()
	if s.stopped || s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = fmt.Errorf("%s: %w", name, err)
	s.mu.Unlock()
	s.log.Error("appliance failed", "component", name, "err", err)
	s.once.Do(func() { close(s.done) })
}

func (s *supervisor) locked(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// Err is the first failure (nil while none).
func (s *supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *supervisor) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// stop stops every component, last started first (see interrupt), and returns every stop step's
// error. ctx bounds each step; nats' shutdown is waited for regardless (its stop step says why).
// Every call after the first waits for it and returns its result.
func (s *supervisor) stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.locked(func() { s.stopped, s.stopCtx = true, cmp.Or(s.stopCtx, ctx) })
		s.closeOnce.Do(func() { close(s.closer) })
		<-s.ran
		s.once.Do(func() { close(s.done) })
		s.stopErr = errors.Join(s.stopErrs...)
	})
	return s.stopErr
}

// failStart marks the start-up failed after every step ran (the store then
// keeps its run marker) and stops everything.
func (s *supervisor) failStart() error {
	s.locked(func() { s.startFailed = true })
	return s.stop(s.stopContext()) // defaultStopTimeout
}

// clean reports whether the start-up succeeded and every stop step so far
// succeeded (the store is marked stopped only then).
func (s *supervisor) clean() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.startFailed && len(s.stopErrs) == 0
}
