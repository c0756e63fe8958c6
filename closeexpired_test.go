package orderstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
)

// Close with a ctx that has already ended, while the processor has work in flight, names only
// what still runs when it returns, and leaves nothing of the processor running: it cuts the
// processor's drain short instead of leaving its partitions to wait out their 10s on a closed
// connection (the built-in projection's writes) or the drain timeout (a handler that honors its
// context). Before, a part that stopped a moment after the check was named "not stopped", and
// the processor ran on for seconds after Close returned.
func TestCloseWithEndedCtxStopsEverything(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(entered *atomic.Int64) processor.Handler
	}{
		{"projection", nil},
		{"handler honoring ctx", func(entered *atomic.Int64) processor.Handler {
			return processor.HandlerFunc(func(ctx context.Context, _ processor.Event) error {
				entered.Add(1)
				<-ctx.Done()
				return ctx.Err()
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var entered atomic.Int64
			cfg := orderstoretest.Config(t)
			if tc.handler != nil {
				cfg.Processor.Handler = tc.handler(&entered)
			}
			app, err := orderstore.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			js := embeddedtest.JetStream(t, app)
			const events = 5000
			for i := range events {
				if _, err := js.PublishAsync("orders.created", fmt.Appendf(nil, `{"order_id":"c-%d"}`, i%500),
					jetstream.WithStallWait(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			// Load in flight: the processor has started on the events, and not finished them.
			embeddedtest.WaitFor(t, time.Minute, func() error {
				if entered.Load() > 0 || app.Stats().Processed > 0 {
					return nil
				}
				return fmt.Errorf("the processor has handled nothing of %d events", events)
			})
			if n := app.Stats().Processed; n >= events {
				t.Fatalf("the processor handled all %d events before Close: nothing in flight", n)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = app.Close(ctx)
			t.Logf("Close with an ended ctx: %v", err)
			for _, m := range regexp.MustCompile(`([a-z -]+): not stopped`).FindAllStringSubmatch(fmt.Sprint(err), -1) {
				t.Errorf("Close names %q not stopped, but every part stops once cut off", m[1])
			}
			// goleak-style: let exiting goroutines finish (polls under 1s), then name the rest.
			var left []string
			for wait := time.Millisecond; wait < time.Second; wait *= 2 {
				if left = processorGoroutines(); len(left) == 0 {
					break
				}
				time.Sleep(wait)
			}
			if len(left) > 0 {
				t.Errorf("%d processor goroutines outlive Close:\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
}

// processorGoroutines returns the stacks of the goroutines running the processor's code (the
// root package's tests run one at a time: none is expected outside an appliance's life).
func processorGoroutines() []string {
	var left []string
	for _, g := range testenv.Goroutines() {
		if strings.Contains(g, "orderstore/orderstore/processor.") {
			left = append(left, g)
		}
	}
	return left
}

// Close while publishes of orderstore's own (Publish, HTTP ingest, replays) wait in admission's
// line: the line answers them 429 at once and the stop goes on. Before, the publish connection's
// drain waited behind every one of them in turn (nats.go's lock, held by a write into the
// in-process pipe), past Close's ctx, and Close said "not drained".
func TestCloseAnswersTheLine(t *testing.T) {
	cfg := orderstoretest.Config(t)
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	orderstore.HoldAdmission(app, time.Hour)
	errs := make(chan error, 20)
	for i := range cap(errs) {
		go func() {
			_, err := app.Publish(context.Background(), "orders.created", fmt.Appendf(nil, `{"order_id":"h-%d"}`, i))
			errs <- err
		}()
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if orderstore.AdmissionWaiting(app) == 0 {
			return fmt.Errorf("no publish waits in line")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- app.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close with publishes in line: %v", err)
		}
	case <-time.After(3 * time.Minute): // only to fail rather than hang: Close waited for the line
		t.Fatal("Close with publishes in line did not return, its ctx long ended")
	}
	for range cap(errs) {
		var apiErr *jetstream.APIError
		if err := <-errs; err != nil && !(errors.As(err, &apiErr) && apiErr.Code == 429) && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("a publish in line at Close: %v, want 429 (or the connection closed)", err)
		}
	}
}
