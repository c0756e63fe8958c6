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

// The supervisor stops components last started first, each completely
// (its stop step, then its goroutine) before the next; the first failure
// is the appliance's, and what fails once stopping began is not.
func TestSupervisorOrderAndFailure(t *testing.T) {
	s := newSupervisor(slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var log []string
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, e)
	}
	fail := make(chan error)
	for _, name := range []string{"a", "b", "c"} {
		s.add(component{name: name,
			run: func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					note(name + " ended")
					return nil
				case err := <-fail:
					return err
				}
			},
			stop: func(context.Context) error { note(name + " stop"); return nil }})
	}
	s.add(component{name: "d", stop: func(context.Context) error { note("d stop"); return errors.New("d: cut off") }})

	select {
	case <-s.done:
		t.Fatal("done before any failure")
	default:
	}
	fail <- errors.New("disk on fire") // one of a, b, c fails
	<-s.done
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
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
	// The failed one's goroutine ended with its failure; the other two
	// end when stopped, each after its stop step, in reverse order.
	mu.Lock()
	defer mu.Unlock()
	var want []string
	for _, e := range []string{"d stop", "c stop", "c ended", "b stop", "b ended", "a stop", "a ended"} {
		if strings.HasSuffix(e, " stop") || slices.Contains(log, e) {
			want = append(want, e)
		}
	}
	if len(want) != 6 || !slices.Equal(log, want) {
		t.Fatalf("stop order %q, want %q (all but the failed one's end)", log, want)
	}
	if s.clean() {
		t.Fatal("clean after a failed stop step")
	}
}

// A stop step cut off by ctx is reported; a component failing while
// the others stop is not a failure.
func TestSupervisorStopBoundedAndQuiet(t *testing.T) {
	s := newSupervisor(slog.New(slog.DiscardHandler))
	hang := make(chan struct{})
	defer close(hang)
	s.add(component{name: "stuck", run: func(context.Context) error { <-hang; return nil }})
	s.add(component{name: "dies when stopped", run: func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("connection closed")
	}})
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
