package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
	"github.com/orderstore/orderstore/status"
)

// ---------------------------------------------------------------- live processor

// procRun is the live processor catching up a backlog.
type procRun struct {
	Rep     int
	N       int           // events it processed in the timed span
	Before  int           // events processed before the span (while the appliance started)
	Dur     time.Duration // from the appliance's start returning until the processor has nothing pending or unacked
	Startup time.Duration // the appliance's start
	CPU     time.Duration
	Others  string // the other processes' CPU share meanwhile
}

func (r procRun) rate() float64 { return benchkit.Rate(r.N, r.Dur) }

// liveProcessor starts the appliance with its processor on a store holding n events its consumer
// has not processed, and times it (bench/README.md, "bench/rebuild", step 2); the events processed
// while the appliance was starting are left out of the rate.
func liveProcessor(ctx context.Context, e *env, rep, n int) (procRun, error) {
	r := procRun{Rep: rep}
	t0 := time.Now()
	if err := e.Start(ctx, true); err != nil {
		return r, err
	}
	stopProf, err := benchkit.StepProfile(*cpuprofile, fmt.Sprintf("live-processor-%d", rep))
	if err != nil {
		return r, err
	}
	defer stopProf()
	t1, c1, m1 := time.Now(), benchkit.CPUTime(), benchkit.StartOthers()
	r.Startup = t1.Sub(t0)
	r.Before = int(e.App.Stats().Processed)
	if _, err := e.CaughtUp(ctx, uint64(n), *catchupTimeout); err != nil {
		return r, err
	}
	r.Dur, r.CPU, r.Others = time.Since(t1), benchkit.CPUTime()-c1, m1.Share()
	stopProf()
	st := e.App.Stats()
	if st.Processed != uint64(n) || st.DeadLettered > 0 {
		return r, fmt.Errorf("processor: %d processed, %d duplicates, %d dead-lettered of %d events", st.Processed, st.Duplicates, st.DeadLettered, n)
	}
	r.N = n - r.Before
	return r, nil
}

// ---------------------------------------------------------------- rebuild

// rebuildRun is one rebuild, start to done, from RebuildStatus polled every 20 ms.
type rebuildRun struct {
	Rep    int
	Ingest bool // producers published all along
	Final  status.Rebuild
	// The phases and the whole (bench/README.md, "bench/rebuild", step 3).
	Setup, Fold, Takeover, Total time.Duration
	Folded                       uint64 // events folded in the fold phase
	CPU                          time.Duration
	Others                       string // the other processes' CPU share meanwhile
	// The producers' acked publishes at the start, the fold's start, the
	// takeover's start and the end (Ingest only).
	Acked [4]int64
	// The live processor's largest backlog (pending + ack pending, sampled every 500 ms) and when.
	MaxBacklog uint64
	MaxBehind  float64
	// Orders spot-checked before and after, and those that differ.
	Checked, Differ int
	FirstDiff       string
}

func (r rebuildRun) events() uint64 { return r.Final.Total }

// rate is the rebuild's rate: events folded over the whole rebuild.
func (r rebuildRun) rate() float64 { return benchkit.Rate(int(r.events()), r.Total) }

// foldRate is the fold phase's rate.
func (r rebuildRun) foldRate() float64 { return benchkit.Rate(int(r.Folded), r.Fold) }

// ingestIn is the producers' acked rate in phase k (0 setup, 1 fold, 2 takeover).
func (r rebuildRun) ingestIn(k int) float64 {
	return benchkit.Rate(int(r.Acked[k+1]-r.Acked[k]), []time.Duration{r.Setup, r.Fold, r.Takeover}[k])
}

// rebuild runs one rebuild to its end. acked, if not nil, counts the producers' acked publishes.
func rebuild(ctx context.Context, e *env, prof string, acked *atomic.Int64) (rebuildRun, error) {
	r := rebuildRun{Ingest: acked != nil}
	if acked == nil {
		acked = new(atomic.Int64) // counts nothing
	}
	stopProf, err := benchkit.StepProfile(*cpuprofile, prof)
	if err != nil {
		return r, err
	}
	defer stopProf()
	c0, m0 := benchkit.CPUTime(), benchkit.StartOthers()
	r.Acked[0] = acked.Load()
	st, err := e.App.RebuildProjection(ctx, status.RebuildRequest{})
	if err != nil {
		return r, fmt.Errorf("starting the rebuild: %w", err)
	}
	id := st.ID
	var foldAt, takeoverAt time.Time
	var foldDone0 uint64
	lastLog, lastLag := time.Now(), time.Time{}
	deadline := time.Now().Add(*catchupTimeout)
	for {
		if err := benchkit.Sleep(ctx, 20*time.Millisecond); err != nil {
			return r, err
		}
		s := e.App.RebuildStatus()
		now := time.Now()
		if s == nil || s.ID != id {
			return r, fmt.Errorf("rebuild %s: status shows %+v", id, s)
		}
		if foldAt.IsZero() && s.Done > 0 {
			foldAt, foldDone0, r.Acked[1] = now, s.Done, acked.Load()
		}
		if takeoverAt.IsZero() && s.State != status.RebuildFolding {
			takeoverAt, r.Folded, r.Acked[2] = now, s.Done-foldDone0, acked.Load()
			if foldAt.IsZero() {
				foldAt, r.Acked[1] = now, r.Acked[2]
			}
		}
		if r.Ingest && now.Sub(lastLag) >= 500*time.Millisecond {
			lastLag = now
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if l, err := e.App.Lag(lctx); err == nil {
				r.MaxBacklog = max(r.MaxBacklog, l.Pending+uint64(max(l.AckPending, 0)))
				r.MaxBehind = max(r.MaxBehind, l.SecondsBehind)
			}
			cancel()
		}
		switch s.State {
		case status.RebuildDone:
			r.Acked[3] = acked.Load()
			r.CPU, r.Others = benchkit.CPUTime()-c0, m0.Share()
			stopProf()
			r.Final = *s
			end := now
			if s.EndedAt != nil {
				end = *s.EndedAt
			}
			r.Total, r.Setup, r.Fold, r.Takeover = end.Sub(s.StartedAt), foldAt.Sub(s.StartedAt), takeoverAt.Sub(foldAt), end.Sub(takeoverAt)
			return r, nil
		case status.RebuildFailed, status.RebuildCanceled:
			return r, fmt.Errorf("rebuild %s %s: %s", id, s.State, s.Error)
		}
		if now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			benchkit.Logf("   %s: %s of %s events (%.0f/s)", s.State, benchkit.Num(int(s.Done)), benchkit.Num(int(s.Total)), s.Rate)
		}
		if now.After(deadline) {
			return r, fmt.Errorf("rebuild %s not done after %s: %+v", id, *catchupTimeout, s)
		}
	}
}

// sampleOrders reads k orders picked at random (a fixed seed), with
// their UpdatedAt cleared (the rebuild writes every record again).
func sampleOrders(ctx context.Context, e *env, orders, k int, seed uint64) (map[string]orderstore.Order, error) {
	r := rand.New(rand.NewPCG(seed, 0xc4ec))
	out := map[string]orderstore.Order{}
	for range k {
		id := benchkit.OrderID(r.IntN(orders))
		o, err := e.App.Order(ctx, id)
		if errors.Is(err, orderstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", id, err)
		}
		o.UpdatedAt = time.Time{}
		out[id] = o
	}
	return out, nil
}

// compareOrders counts the orders of before that read differently now.
func compareOrders(ctx context.Context, e *env, before map[string]orderstore.Order, r *rebuildRun) error {
	for id, want := range before {
		got, err := e.App.Order(ctx, id)
		if err != nil {
			return fmt.Errorf("order %s after the rebuild: %w", id, err)
		}
		got.UpdatedAt = time.Time{}
		r.Checked++
		if got != want {
			r.Differ++
			if r.FirstDiff == "" {
				r.FirstDiff = fmt.Sprintf("%s: before %+v, after %+v", id, want, got)
			}
		}
	}
	return nil
}

// recordSize is the projection bucket's records and stored bytes (0, 0 when it cannot be read).
func recordSize(ctx context.Context, e *env) (records, bytes uint64) {
	js, err := e.Connect(false, "bench-rebuild-size")
	if err != nil {
		return 0, 0
	}
	kv, err := js.KeyValue(ctx, e.Cfg.Processor.ProjectionBucket)
	if err != nil {
		return 0, 0
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, 0
	}
	return st.Values(), st.Bytes()
}

// ---------------------------------------------------------------- ingest

// producers publish events of the same shape as the loaded ones, each over its own TCP connection,
// one synchronous publish at a time, as external producers would.
type producers struct {
	js     []jetstream.JetStream
	round  atomic.Uint64 // a new random stream per run
	acked  atomic.Int64  // acked publishes since the producers were made
	resent atomic.Int64
}

func newProducers(e *env) (*producers, error) {
	p := &producers{}
	for i := range *nProducers {
		js, err := e.Connect(true, fmt.Sprintf("bench-rebuild-producer-%d", i))
		if err != nil {
			return nil, err
		}
		p.js = append(p.js, js)
	}
	return p, nil
}

// run publishes until stop is closed, and returns every publish's latency (send to ack).
func (p *producers) run(ctx context.Context, stop <-chan struct{}) ([]time.Duration, error) {
	round := p.round.Add(1)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  []time.Duration
		errs []error
	)
	for i, js := range p.js {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(*seed+round, uint64(i)))
			lat := make([]time.Duration, 0, 1<<14)
			var err error
		loop:
			for {
				select {
				case <-stop:
					break loop
				case <-ctx.Done():
					err = ctx.Err()
					break loop
				default:
				}
				msg := benchkit.EventMsg(benchkit.OrderID(r.IntN(*orders)), benchkit.Types[1+r.IntN(3)], *size)
				t0 := time.Now()
				if err = publishSync(ctx, js, msg, &p.resent); err != nil {
					break
				}
				lat = append(lat, time.Since(t0))
				p.acked.Add(1)
			}
			mu.Lock()
			all = append(all, lat...)
			if err != nil {
				errs = append(errs, fmt.Errorf("producer %d: %w", i, err))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// publishSync publishes msg, waits for its ack, and resends it after a pause if the appliance asks.
func publishSync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, resent *atomic.Int64) error {
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := js.PublishMsg(pctx, msg)
		cancel()
		if err == nil || !retryable(err) || attempt >= 100 {
			return err
		}
		resent.Add(1)
		if err := benchkit.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// ingestRun is one window of live ingest.
type ingestRun struct {
	Rep                int
	Rebuild            bool // a rebuild was folding all along
	Acked              int
	Dur, P50, P99, CPU time.Duration
	Others             string // the other processes' CPU share meanwhile
	// Projected: what the live processor processed during the window;
	// Backlog: what it had not yet processed at its end.
	Projected, Backlog uint64
	// Folded: events the rebuild folded during the window; RebuildState
	// its state at the window's end (it should still be "folding").
	Folded       uint64
	RebuildState string
	// Group commit's rounds during the window (GET /v1/status "ingest"): syncs and their mean time.
	Syncs    uint64
	SyncMean time.Duration
}

func (r ingestRun) rate() float64 { return benchkit.Rate(r.Acked, r.Dur) }

// ingestWindow runs the producers for d, with or without a rebuild folding meanwhile. With one, the
// window opens once the rebuild folds (an event folded) and the rebuild is canceled after it.
func ingestWindow(ctx context.Context, e *env, p *producers, rep int, withRebuild bool) (ingestRun, error) {
	r := ingestRun{Rep: rep, Rebuild: withRebuild}
	// Every window starts with the live processor caught up.
	if _, err := e.CaughtUp(ctx, 0, *catchupTimeout); err != nil {
		return r, err
	}
	var id string
	var s0 *status.Rebuild
	if withRebuild {
		st, err := e.App.RebuildProjection(ctx, status.RebuildRequest{})
		if err != nil {
			return r, fmt.Errorf("starting the rebuild: %w", err)
		}
		id = st.ID
		deadline := time.Now().Add(5 * time.Minute)
		for {
			if err := benchkit.Sleep(ctx, 10*time.Millisecond); err != nil {
				return r, err
			}
			s0 = e.App.RebuildStatus()
			if s0 == nil || s0.ID != id || !s0.Running() {
				return r, fmt.Errorf("rebuild %s ended before the window: %+v", id, s0)
			}
			if s0.Done > 0 {
				break
			}
			if time.Now().After(deadline) {
				return r, fmt.Errorf("rebuild %s folded nothing in 5 minutes", id)
			}
		}
	}
	stopProf, err := benchkit.StepProfile(*cpuprofile, fmt.Sprintf("ingest-%s-%d", map[bool]string{true: "rebuild", false: "alone"}[withRebuild], rep))
	if err != nil {
		return r, err
	}
	defer stopProf()
	p0 := e.App.Stats().Processed
	stop := make(chan struct{})
	defer time.AfterFunc(*duration, func() { close(stop) }).Stop()
	g0 := ingestStats(e)
	a0, t0, c0, m0 := p.acked.Load(), time.Now(), benchkit.CPUTime(), benchkit.StartOthers()
	lat, err := p.run(ctx, stop)
	r.Dur, r.CPU, r.Acked, r.Others = time.Since(t0), benchkit.CPUTime()-c0, int(p.acked.Load()-a0), m0.Share()
	if g1 := ingestStats(e); g0 != nil && g1 != nil {
		r.Syncs = g1.SyncSeconds.Count - g0.SyncSeconds.Count
		if r.Syncs > 0 {
			r.SyncMean = time.Duration((g1.SyncSeconds.Sum - g0.SyncSeconds.Sum) / float64(r.Syncs) * float64(time.Second))
		}
	}
	stopProf()
	if err != nil {
		return r, err
	}
	r.Projected = e.App.Stats().Processed - p0
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if l, err := e.App.Lag(lctx); err == nil {
		r.Backlog = l.Pending + uint64(max(l.AckPending, 0))
	}
	cancel()
	slices.Sort(lat)
	r.P50, r.P99 = benchkit.Quantile(lat, 0.50), benchkit.Quantile(lat, 0.99)
	if withRebuild {
		s1 := e.App.RebuildStatus()
		r.RebuildState, r.Folded = s1.State, s1.Position-s0.Position
		if err := cancelRebuild(ctx, e, id); err != nil {
			return r, err
		}
	}
	return r, nil
}

// ingestStats is group commit's figures (GET /v1/status); nil when there are none.
func ingestStats(e *env) *status.IngestStats {
	if st, err := benchkit.Status(e.App); err == nil {
		return st.Ingest
	}
	return nil
}

// cancelRebuild cancels rebuild id and waits until it ended (one taking
// over cannot be canceled: it is let finish).
func cancelRebuild(ctx context.Context, e *env, id string) error {
	err := e.App.CancelRebuild()
	if err != nil && !errors.Is(err, orderstore.ErrNoRebuild) && !errors.Is(err, orderstore.ErrRebuildTakingOver) {
		return fmt.Errorf("canceling the rebuild: %w", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	return benchkit.Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		switch s := e.App.RebuildStatus(); {
		case s == nil || s.ID != id || !s.Running():
			if s != nil && s.State == status.RebuildFailed {
				return false, fmt.Errorf("rebuild %s failed: %s", id, s.Error)
			}
			return true, nil
		case time.Now().After(deadline):
			return false, fmt.Errorf("rebuild %s still %s 5 minutes after its cancel", id, s.State)
		}
		return false, nil
	})
}

// ---------------------------------------------------------------- helpers

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2 // of an odd count, the middle one
}
