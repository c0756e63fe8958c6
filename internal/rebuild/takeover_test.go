package rebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// fakeTarget folds into memory; its Takeover does what the test says.
type fakeTarget struct {
	mu       sync.Mutex
	folded   map[uint64]bool
	takeover func(ctx context.Context) error
	tries    atomic.Int32
	entered  chan struct{} // closed at the first Takeover
	once     sync.Once
}

func (f *fakeTarget) Shadow(context.Context, bool) (processor.Handler, error) {
	return processor.HandlerFunc(func(_ context.Context, ev processor.Event) error {
		f.mu.Lock()
		f.folded[ev.Sequence] = true
		f.mu.Unlock()
		return nil
	}), nil
}
func (f *fakeTarget) Durable(context.Context) error { return nil }
func (f *fakeTarget) Takeover(ctx context.Context, _ *Takeover) error {
	f.tries.Add(1)
	f.once.Do(func() { close(f.entered) })
	return f.takeover(ctx)
}
func (f *fakeTarget) Discard(context.Context) error             { return nil }
func (f *fakeTarget) HighWater(context.Context) (uint64, error) { return 0, nil }

// pauser stands for the live processor: paused or running.
type pauser struct{ paused, resumes atomic.Int32 }

func (p *pauser) pause(context.Context) (func(), error) {
	p.paused.Store(1)
	return func() { p.paused.Store(0); p.resumes.Add(1) }, nil
}

func newTakeoverRunner(t *testing.T, target Target, p *pauser) (*Runner, string) {
	t.Helper()
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{{Name: "EVENTS", Subjects: []string{"orders.>"}}, {Name: "DLQ", Subjects: []string{"dlq.>"}}} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if _, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i%5)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "rebuild.json")
	r, err := New(Config{JS: js, Stream: "EVENTS", DeadLetterStream: "DLQ", StatePath: path, Target: target, Pause: p.pause})
	if err != nil {
		t.Fatal(err)
	}
	return r, path
}

// A stop during the takeover leaves the live processor paused: what it
// applied before the next start finishes the takeover, the takeover's
// copy would overwrite. (It used to resume it on the way out.)
func TestTakeoverStoppedKeepsTheProcessorPaused(t *testing.T) {
	target := &fakeTarget{folded: map[uint64]bool{}, entered: make(chan struct{}),
		takeover: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	p := &pauser{}
	r, path := newTakeoverRunner(t, target, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if _, err := r.Start(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-target.entered:
	case err := <-done:
		t.Fatalf("Run returned before the takeover: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no takeover within 60s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run, stopped: %v", err)
	}
	if p.paused.Load() != 1 || p.resumes.Load() != 0 {
		t.Errorf("after a stop during the takeover the processor was resumed %d times (paused %d), want it left paused", p.resumes.Load(), p.paused.Load())
	}
	r2, err := New(Config{StatePath: path, Target: target})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.TakeoverPending() {
		t.Errorf("the next start does not see the takeover to finish")
	}
}

// A takeover that keeps failing fails the runner (the appliance stops
// and starts again, finishing it first), and the processor stays paused.
// (It used to resume the processor and wait for a restart that nothing
// asked for.)
func TestTakeoverThatKeepsFailingFailsTheRunner(t *testing.T) {
	tries, backoff := takeoverTries, takeoverBackoff
	takeoverTries, takeoverBackoff = 3, time.Millisecond
	t.Cleanup(func() { takeoverTries, takeoverBackoff = tries, backoff })
	target := &fakeTarget{folded: map[uint64]bool{}, entered: make(chan struct{}),
		takeover: func(context.Context) error { return errors.New("the bucket is full") }}
	p := &pauser{}
	r, _ := newTakeoverRunner(t, target, p)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	if _, err := r.Start(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not fail within 60s")
	}
	if err == nil || !strings.Contains(err.Error(), "the bucket is full") || target.tries.Load() != 3 {
		t.Errorf("Run: %v after %d tries, want the takeover's error after 3", err, target.tries.Load())
	}
	if p.paused.Load() != 1 || p.resumes.Load() != 0 {
		t.Errorf("after a failed takeover the processor was resumed %d times, want it left paused", p.resumes.Load())
	}
	if st := r.Status(); st.State != status.RebuildTakingOver {
		t.Errorf("state %q, want %q", st.State, status.RebuildTakingOver)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if len(target.folded) != 50 {
		t.Errorf("folded %d events, want 50", len(target.folded))
	}
}

// cancelingTarget cancels its rebuild in the catch-up's checkpoint, once the processor is paused:
// after the cancel's last look at the state, before the takeover is recorded.
type cancelingTarget struct {
	*fakeTarget
	r        *Runner
	p        *pauser
	once     sync.Once
	canceled chan error
}

func (c *cancelingTarget) Durable(context.Context) error {
	if c.p.paused.Load() == 1 {
		c.once.Do(func() { c.canceled <- c.r.Cancel() })
	}
	return nil
}

// A cancel that was accepted (the rebuild still folding) as the catch-up's checkpoint makes the
// shadow durable cancels the rebuild: it used to take over all the same, with a canceled context,
// which failed the runner (and the appliance) and left the takeover to the next start.
func TestCancelBeforeTheTakeoverIsRecorded(t *testing.T) {
	target := &fakeTarget{folded: map[uint64]bool{}, entered: make(chan struct{}),
		takeover: func(ctx context.Context) error { return ctx.Err() }}
	p := &pauser{}
	ct := &cancelingTarget{fakeTarget: target, p: p, canceled: make(chan error, 1)}
	r, _ := newTakeoverRunner(t, ct, p)
	ct.r = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if _, err := r.Start(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := <-ct.canceled; err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		select {
		case err := <-done:
			t.Fatalf("Run after an accepted cancel: %v", err)
		default:
		}
		if st := r.Status(); st.State != status.RebuildCanceled {
			return fmt.Errorf("state %q", st.State)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if p.paused.Load() != 0 || target.tries.Load() != 0 {
		t.Errorf("after the cancel: processor paused %d, takeover tried %d times; want it resumed and no takeover", p.paused.Load(), target.tries.Load())
	}
}

// stoppedTakeover is the built-in target whose first takeover waits for the stop.
type stoppedTakeover struct {
	*Buckets
	entered chan struct{}
}

func (s *stoppedTakeover) Takeover(ctx context.Context, _ *Takeover) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

// A rebuild stopped while taking over, whose shadow's metadata (meta.inf) a power cut then took
// (nats skips the stream at start-up), is not taken over as done with nothing copied: the next
// start folds it again from the start and takes over every order. (It was reported done, 0
// orders rebuilt, the live projection left as it was.)
func TestTakeoverOfALostShadowStartsOver(t *testing.T) {
	store := t.TempDir()
	ctx := context.Background()
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
	js := embeddedtest.JetStream(t, srv)
	for _, sc := range []jetstream.StreamConfig{{Name: "EVENTS", Subjects: []string{"orders.>"}}, {Name: "DLQ", Subjects: []string{"dlq.>"}}} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS"}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i%5)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "rebuild.json")
	target := &stoppedTakeover{Buckets: builtIn(js), entered: make(chan struct{})}
	r, err := New(Config{JS: js, Stream: "EVENTS", DeadLetterStream: "DLQ", StatePath: path, Target: target, Pause: (&pauser{}).pause})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	if _, err := r.Start(ctx, Options{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-target.entered:
	case err := <-done:
		t.Fatalf("Run returned before the takeover: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run, stopped: %v", err)
	}
	srv.Close()
	var metas []string
	if err := filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "meta.inf" && filepath.Base(filepath.Dir(p)) == "KV_ORDERS_REBUILD" {
			metas = append(metas, p)
		}
		return err
	}); err != nil || len(metas) != 1 {
		t.Fatalf("the shadow's meta.inf under %s: %v, want one", store, metas)
	}
	if err := os.Remove(metas[0]); err != nil {
		t.Fatal(err)
	}

	srv = embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
	js = embeddedtest.JetStream(t, srv)
	r, err = New(Config{JS: js, Stream: "EVENTS", DeadLetterStream: "DLQ", StatePath: path, Target: builtIn(js)})
	if err != nil {
		t.Fatal(err)
	}
	if !r.TakeoverPending() {
		t.Fatal("the next start does not see the takeover to finish")
	}
	if err := r.FinishTakeover(ctx); err != nil {
		t.Fatalf("FinishTakeover: %v", err)
	}
	if st := r.Status(); st.State != status.RebuildFolding {
		t.Fatalf("after finishing the takeover of a lost shadow: %s, %d orders rebuilt; want it folding again", st.State, st.Rebuilt)
	}
	// A fresh shadow made where nats skipped the lost one's files starts empty, without their
	// records (which a fold of another version would keep).
	if _, err := builtIn(js).Shadow(ctx, true); err != nil {
		t.Fatal(err)
	}
	if s, err := js.Stream(ctx, "KV_ORDERS_REBUILD"); err != nil {
		t.Fatal(err)
	} else if n := s.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("a fresh shadow over the lost one's files holds %d records; want it empty", n)
	}
	rctx, stop = context.WithCancel(ctx)
	defer stop()
	go func() { done <- r.Run(rctx) }()
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if st := r.Status(); st.State != status.RebuildDone || st.Rebuilt != 5 {
			return fmt.Errorf("%s, %d orders rebuilt (%s)", st.State, st.Rebuilt, st.Error)
		}
		return nil
	})
	checkRebuilt(t, js)
}

// builtIn is the built-in projection's target over the live bucket ORDERS.
func builtIn(js jetstream.JetStream) *Buckets {
	return &Buckets{JS: js, Live: "ORDERS", ShadowBucket: jetstream.KeyValueConfig{Bucket: "ORDERS_REBUILD"},
		Projection: func(records, _ jetstream.KeyValue) *processor.Projection { return processor.NewProjection(js, records) },
		Reads:      func(*processor.Projection, func(string) bool) {},
		Sync:       func(context.Context, ...string) error { return nil }}
}

// checkRebuilt checks that ORDERS holds the 5 orders of newTakeoverRunner's 50 events, rebuilt.
func checkRebuilt(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	live, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e, err := live.Get(ctx, fmt.Sprintf("o-%d", i))
		if err != nil {
			t.Fatalf("order o-%d after the rebuild: %v", i, err)
		}
		var h recordHead
		if err := json.Unmarshal(e.Value(), &h); err != nil || h.Events != 10 {
			t.Errorf("order o-%d after the rebuild: %s, want 10 events", i, e.Value())
		}
	}
}

// deletingTakeover deletes its shadow as its first takeover begins (as an operator might).
type deletingTakeover struct {
	*Buckets
	tries atomic.Int32
}

func (d *deletingTakeover) Takeover(ctx context.Context, t *Takeover) error {
	if d.tries.Add(1) == 1 {
		if err := d.JS.DeleteStream(ctx, "KV_"+d.ShadowBucket.Bucket); err != nil {
			return err
		}
	}
	return d.Buckets.Takeover(ctx, t)
}

// A shadow lost as its takeover runs starts the rebuild over at once, with the processor resumed
// meanwhile, and the rebuild then takes over every order.
func TestTakeoverOfAShadowLostMeanwhileStartsOver(t *testing.T) {
	target := &deletingTakeover{}
	p := &pauser{}
	r, _ := newTakeoverRunner(t, target, p)
	target.Buckets = builtIn(r.cfg.JS)
	if _, err := r.cfg.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "ORDERS"}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go r.Run(ctx)
	if _, err := r.Start(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error { // done, then the processor resumed
		if st := r.Status(); st.State != status.RebuildDone || st.Rebuilt != 5 || p.resumes.Load() < 2 {
			return fmt.Errorf("%s, %d orders rebuilt (%s), processor resumed %d times", st.State, st.Rebuilt, st.Error, p.resumes.Load())
		}
		return nil
	})
	if target.tries.Load() != 2 || p.resumes.Load() != 2 || p.paused.Load() != 0 {
		t.Errorf("%d takeovers, the processor resumed %d times (paused %d); want 2, 2 and running", target.tries.Load(), p.resumes.Load(), p.paused.Load())
	}
	checkRebuilt(t, r.cfg.JS)
}
