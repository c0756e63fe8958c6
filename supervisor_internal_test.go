package orderstore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// stages adds one stage per name to s, each adding one component of
// that name whose events go to note.
func stages(s *supervisor, note func(string), names ...string) {
	for _, name := range names {
		s.stage(func(context.Context) error {
			note(name + " start")
			s.add(component{name: name,
				run: func(ctx context.Context) error {
					<-ctx.Done()
					note(name + " ended")
					return nil
				},
				stop: func(context.Context) error { note(name + " stop"); return nil }})
			return nil
		})
	}
}

// recorder is a concurrent-safe event log.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, e)
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// The supervisor starts the steps in order and stops their components
// last started first, each completely (its stop step, then its goroutine)
// before the next; the first failure is the appliance's, and what fails
// once stopping began is not.
func TestSupervisorOrderAndFailure(t *testing.T) {
	s := newSupervisor(slog.New(slog.DiscardHandler))
	var r recorder
	fail := make(chan error)
	s.stage(func(context.Context) error {
		r.note("f start")
		s.add(component{name: "f", run: func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return nil
			case err := <-fail:
				return err
			}
		}})
		return nil
	})
	stages(s, r.note, "a", "b", "c")
	s.stage(func(context.Context) error {
		s.add(component{name: "d", stop: func(context.Context) error { r.note("d stop"); return errors.New("d: cut off") }})
		return nil
	})
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := r.events(), []string{"f start", "a start", "b start", "c start"}; !slices.Equal(got, want) {
		t.Fatalf("start order %q, want %q", got, want)
	}
	select {
	case <-s.done:
		t.Fatal("done before any failure")
	default:
	}
	fail <- errors.New("disk on fire")
	<-s.done
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "f: disk on fire") {
		t.Fatalf("Err = %v, want the failure, named by its component", err)
	}
	first := s.Err()
	err := s.stop(context.Background())
	if err == nil || !strings.Contains(err.Error(), "d: cut off") {
		t.Fatalf("stop = %v, want d's stop error", err)
	}
	if s.Err() != first {
		t.Fatalf("Err after stop = %v, want the first failure %v", s.Err(), first)
	}
	want := []string{"f start", "a start", "b start", "c start", "d stop", "c stop", "c ended", "b stop", "b ended", "a stop", "a ended"}
	if got := r.events(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if s.clean() {
		t.Fatal("clean after a failed stop step")
	}
}

// A step that fails stops what the steps before it started, in reverse
// order; the steps after it never run, and start returns its error.
func TestSupervisorFailedStep(t *testing.T) {
	s := newSupervisor(slog.New(slog.DiscardHandler))
	var r recorder
	stages(s, r.note, "a", "b")
	s.stage(func(context.Context) error {
		s.add(component{name: "half", stop: func(context.Context) error { r.note("half stop"); return nil }})
		return errors.New("port busy")
	})
	stages(s, r.note, "never")
	err := s.start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "port busy") {
		t.Fatalf("start = %v, want the step's error", err)
	}
	want := []string{"a start", "b start", "half stop", "b stop", "b ended", "a stop", "a ended"}
	if got := r.events(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if s.clean() {
		t.Fatal("clean after a failed start: the store would be marked stopped")
	}
	select {
	case <-s.done:
	default:
		t.Fatal("done not closed after a failed start")
	}
}

// A stop step cut off by ctx is reported; a component failing while
// the others stop is not a failure.
func TestSupervisorStopBoundedAndQuiet(t *testing.T) {
	s := newSupervisor(slog.New(slog.DiscardHandler))
	hang := make(chan struct{})
	defer close(hang)
	s.stage(func(context.Context) error {
		s.add(component{name: "stuck", run: func(context.Context) error { <-hang; return nil }})
		return nil
	})
	s.stage(func(context.Context) error {
		s.add(component{name: "dies when stopped", run: func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("connection closed")
		}})
		return nil
	})
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "stuck: not stopped") {
		t.Fatalf("stop = %v, want the stuck component named", err)
	}
	if s.Err() != nil {
		t.Fatalf("Err = %v after a stop, want nil", s.Err())
	}
	select {
	case <-s.done:
	default:
		t.Fatal("done not closed after stop")
	}
}

// A stop whose ctx has ended names only what it cut off: not a component
// without a goroutine (the store's lock, the durable guard), nor one whose
// goroutine had ended. (Both are ready once ctx has ended, and a select
// picks either: half of the time they were named "not stopped".) Nor one
// whose goroutine returns once its ctx ends, as every part's does: it was
// named when it had not returned yet at the moment its ctx ended.
func TestSupervisorStopNamesOnlyWhatItCut(t *testing.T) {
	for range 40 {
		s := newSupervisor(slog.New(slog.DiscardHandler))
		s.stage(func(context.Context) error {
			s.add(component{name: "store", stop: func(context.Context) error { return nil }})
			s.add(component{name: "ended", run: func(context.Context) error { return nil }})
			s.add(component{name: "watch", run: func(ctx context.Context) error { <-ctx.Done(); return nil }})
			return nil
		})
		if err := s.start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-s.stages[0].parts[1].ended
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.stop(ctx); err != nil {
			t.Fatalf("stop with an ended ctx = %v, want nil: nothing was cut off", err)
		}
	}
}
