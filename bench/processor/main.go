// Command processor benchmarks the built-in processor end to end (issue 3): acked publish, the raw
// pull-consume rate of the same stream, the projection's rate over the same events, and the
// processor's lag while producers publish at a share (default 80%) of the acked-publish rate.
//
//	go run ./bench/processor                         # both sync modes, 1M events over 100k orders
//	go run ./bench/processor -sync 1s -events 100000 -orders 10000 -out /tmp/proc.md
//
// See bench/processor/README.md for what each step measures.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
	"github.com/orderstore/orderstore/processor"
)

var (
	syncModes      = flag.String("sync", "always,1s", "comma-separated durabilities to measure, each in its own fresh store: always, group-commit, or a sync_interval such as 1s (durability \"interval\")")
	events         = flag.Int("events", 1_000_000, "events published, consumed and projected per mode")
	orders         = flag.Int("orders", 100_000, "orders the events are spread over (each event picks one at random)")
	alwaysEvents   = flag.Int("always-events", 0, "if > 0, events for -sync always instead of -events (orders scale to keep events/orders)")
	loadDur        = flag.Duration("load", 30*time.Second, "how long producers publish during the lag-under-load step (0 skips it)")
	loadShare      = flag.Float64("load-share", 0.8, "publish rate of the lag-under-load step, as a share of the measured acked-publish rate")
	window         = flag.Int("window", 1000, "async publishes in flight per publisher (as processor/helpers_test.go)")
	seed           = flag.Uint64("seed", 1, "seed of the event generator")
	out            = flag.String("out", "", "write the markdown results to this file")
	cpuprofile     = flag.String("cpuprofile", "", "write CPU profiles of the raw-consume and projection steps to PREFIX-<sync>-<step>.pprof")
	workers        = flag.Int("workers", 0, "processor.Config.Workers (0: the processor's default, as the appliance)")
	batch          = flag.Int("batch", 0, "processor.Config.BatchSize (0: the processor's default, as the appliance)")
	maxAckPending  = flag.Int("max-ack-pending", 0, "processor.max_ack_pending for both durables (0: the built-in default)")
	pubConn        = flag.String("pub-conn", "tcp", "how publishers connect: tcp (like external producers) or inproc")
	tmp            = flag.String("tmp", "", "parent of the temporary store dirs (default: the system temp dir)")
	catchupTimeout = flag.Duration("catchup-timeout", 20*time.Minute, "give up waiting for the processor to catch up after this long")
	rawReps        = flag.Int("raw-reps", 3, "repetitions of the raw consume (each with a fresh durable); the median is used")
	noOrderIndex   = flag.Bool("no-order-index", false, "run the appliance with processor.order_index = false (the index's cost: compare the projection rate with and without)")
	noHistory      = flag.Bool("no-history", false, "the projection without the history index (the index's cost: compare the projection rate with and without)")
	verbose        = flag.Bool("v", false, "log the processor at info level (default: warnings only)")
)

func main() {
	flag.Parse()
	var modes []string
	for _, m := range strings.Split(*syncModes, ",") {
		if m = strings.TrimSpace(m); m == "" {
			continue
		}
		benchkit.UsageErr(benchkit.ApplySync(new(orderstore.Config), m))
		modes = append(modes, m)
	}
	benchkit.UsageIf(len(modes) == 0 || *rawReps <= 0 || *events <= 0 || *orders <= 0 || *window <= 0 || *loadShare <= 0 ||
		(*pubConn != "tcp" && *pubConn != "inproc"))
	benchkit.Run("bench/processor", func(ctx context.Context) error { return run(ctx, modes) })
}

func run(ctx context.Context, modes []string) error {
	started := time.Now()
	var results []*modeResult
	var runErr error
	for _, mode := range modes {
		r, err := runMode(ctx, mode)
		if r != nil && (err == nil || r.Publish.N > 0) {
			r.Err = err
			results = append(results, r)
			fmt.Println()
			fmt.Print(r.markdown())
		}
		if err != nil {
			runErr = fmt.Errorf("sync %s: %w", mode, err)
			break
		}
	}
	report := header(started) + "\n"
	for _, r := range results {
		report += r.markdown() + "\n"
	}
	sum := summary(results)
	return errors.Join(runErr, benchkit.Results(sum, report+sum, *out))
}

// ---------------------------------------------------------------- results

type phase struct {
	N        int
	Dur, CPU time.Duration
}

func (p phase) rate() float64 { return benchkit.Rate(p.N, p.Dur) }

type sample struct {
	T                  float64 // seconds since publishing started
	Stored             uint64  // the stream's last sequence: events stored (acked)
	Processed, Pending uint64
	AckPending         int
	SecondsBehind      float64
}

func (s sample) backlog() uint64 { return s.Pending + uint64(max(s.AckPending, 0)) }

type loadResult struct {
	Target      float64
	Published   int64
	PubDur, CPU time.Duration
	// Processed while publishing (at the last ack of the publisher).
	ProcessedDuring        uint64
	Samples                []sample
	MaxBacklog, EndBacklog uint64
	MaxBehind, EndBehind   float64
	Mean1, Mean2           float64 // backlog mean over the first and the second half
	Slope2                 float64 // backlog trend over the second half, events/s
	Bounded, CaughtUp      bool
	Catchup                time.Duration
	ConsumeErrs            int64 // the processor's consume warnings
	MaxAckPending          int
}

func (l loadResult) achieved() float64 { return benchkit.Rate(int(l.Published), l.PubDur) }

func (l loadResult) applyRate() float64 { return benchkit.Rate(int(l.ProcessedDuring), l.PubDur) }

type modeResult struct {
	Mode           string // -sync
	Durability     string // what it set, as the appliance reports it
	Events, Orders int
	Distinct       int // orders with at least one event
	Publish        phase
	Raw            phase // the median of RawReps
	RawReps        []phase
	Proj           phase
	ProjStats      processor.Stats
	// ProjConsumeErrs counts the processor's consume warnings (a missed
	// heartbeat means its client stalled, as in the raw consume).
	ProjConsumeErrs      int64
	Keys                 uint64
	SpotChecked, SpotBad int
	MaxAckPending        int
	// ProcSettings is what the processor logged at start ("processor
	// running": batch, partitions or workers, ...).
	ProcSettings string
	Load         *loadResult
	Err          error
	LoadAvg      [2]string // /proc/loadavg at the start and the end of the mode
}

func (r *modeResult) ratio() float64 {
	if r.Raw.rate() == 0 {
		return 0
	}
	return r.Proj.rate() / r.Raw.rate()
}

// ---------------------------------------------------------------- one mode

func runMode(ctx context.Context, mode string) (*modeResult, error) {
	n, nOrders := *events, *orders
	if mode == "always" && *alwaysEvents > 0 {
		n = *alwaysEvents
		nOrders = max(1, int(int64(*orders)*int64(n)/int64(*events)))
	}
	r := &modeResult{Mode: mode, Events: n, Orders: nOrders}
	r.LoadAvg[0] = benchkit.LoadAvg()
	defer func() { r.LoadAvg[1] = benchkit.LoadAvg() }()
	benchkit.Logf("=== -sync %s: %s events over %s orders", mode, benchkit.Num(n), benchkit.Num(nOrders))

	e, err := newEnv(ctx, mode, n)
	if err != nil {
		return r, err
	}
	defer e.Close()
	r.Durability, _ = e.Cfg.DurabilityPolicy()
	r.MaxAckPending = e.Cfg.Processor.MaxAckPending

	// 2. acked publish.
	pjs, err := e.Publisher(*pubConn == "tcp", "bench-publisher", *window)
	if err != nil {
		return r, err
	}
	gen := benchkit.NewOrders(*seed, 0x5eed, nOrders)
	pub := newPublisher(pjs, gen, *window, "bench-"+mode)
	benchkit.Logf("2. publishing %s events (async, window %d, %s)", benchkit.Num(n), *window, *pubConn)
	t0, c0 := time.Now(), benchkit.CPUTime()
	if err := pub.run(ctx, n, 0, time.Time{}); err != nil {
		return r, fmt.Errorf("publish: %w", err)
	}
	r.Publish = phase{N: pub.acked, Dur: time.Since(t0), CPU: benchkit.CPUTime() - c0}
	benchkit.Logf("   %s events/s (%s)", benchkit.Num(int(r.Publish.rate())), r.Publish.Dur.Round(time.Millisecond))
	r.Distinct = gen.Distinct()

	// 3. raw pull consume of the same stream.
	benchkit.Logf("3. raw pull consume + ack of the same %s events, %d times", benchkit.Num(n), *rawReps)
	for i := range *rawReps {
		p, err := rawConsume(ctx, e, mode, n, pub.lastSeq, i+1)
		if err != nil {
			return r, fmt.Errorf("raw consume: %w", err)
		}
		r.RawReps = append(r.RawReps, p)
		benchkit.Logf("   %s events/s (%s)", benchkit.Num(int(p.rate())), p.Dur.Round(time.Millisecond))
	}
	r.Raw = benchkit.Middle(r.RawReps, func(a, b phase) int { return cmp.Compare(a.rate(), b.rate()) }) // the median rate

	// 4. the projection over the same events.
	benchkit.Logf("4. processor + projection over the same %s events", benchkit.Num(n))
	if err := projection(ctx, e, r); err != nil {
		return r, fmt.Errorf("projection: %w", err)
	}
	benchkit.Logf("   %s events/s (%s), %.0f%% of raw consume", benchkit.Num(int(r.Proj.rate())), r.Proj.Dur.Round(time.Millisecond), 100*r.ratio())
	if err := verify(ctx, e, gen, r); err != nil {
		return r, fmt.Errorf("verify projection: %w", err)
	}
	e.Close()

	// 5. lag under load, in a fresh store.
	if *loadDur > 0 {
		lr, err := loadPhase(ctx, mode, nOrders, *loadShare*r.Publish.rate())
		r.Load = lr
		if err != nil {
			return r, fmt.Errorf("lag under load: %w", err)
		}
	}
	return r, nil
}

// ---------------------------------------------------------------- broker

// newEnv starts a fresh appliance (benchkit.NewEnv) with -max-ack-pending and -no-order-index,
// without its processor: the benchmark starts and stops processors itself. It declares the
// processor's consumer as the appliance would.
func newEnv(ctx context.Context, mode string, events int) (*benchkit.Env, error) {
	e, err := benchkit.NewEnv(*tmp, "orderstore-bench-", mode, events)
	if err != nil {
		return nil, err
	}
	if *maxAckPending > 0 {
		e.Cfg.Processor.MaxAckPending = *maxAckPending
	}
	e.Cfg.Processor.OrderIndex = !*noOrderIndex
	if err := e.Start(ctx, false); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// ---------------------------------------------------------------- publish

type publisher struct {
	w       *benchkit.Window
	gen     *benchkit.Orders
	prefix  string
	acked   int // Window calls OnAck on the publishing goroutine
	lastSeq uint64
}

func newPublisher(js jetstream.JetStream, gen *benchkit.Orders, window int, prefix string) *publisher {
	p := &publisher{w: benchkit.NewWindow(js, window), gen: gen, prefix: prefix}
	p.w.OnAck = func(_ int, ack *jetstream.PubAck) error {
		p.acked++
		if ack.Duplicate {
			return fmt.Errorf("publish: unexpected duplicate (seq %d)", ack.Sequence)
		}
		p.lastSeq = max(p.lastSeq, ack.Sequence)
		return nil
	}
	return p
}

// run publishes n events (n < 0: until the deadline), at most rate per second (0: as fast as the
// window allows), with up to window unacked, and returns once every one is acked.
func (p *publisher) run(ctx context.Context, n int, rate float64, until time.Time) error {
	start := time.Now()
	for i := 0; n < 0 || i < n; i++ {
		if i%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if !until.IsZero() && !time.Now().Before(until) {
			break
		}
		if rate > 0 {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if d := time.Until(due); d > time.Millisecond {
				if err := benchkit.Sleep(ctx, d); err != nil {
					return err
				}
			}
		}
		order, typ := p.gen.Next()
		m := benchkit.EventMsg(benchkit.OrderID(order), benchkit.Types[typ], 0)
		m.Header = nats.Header{jetstream.MsgIDHeader: []string{p.prefix + "-" + strconv.Itoa(i)}}
		if err := p.w.Publish(ctx, m, 0); err != nil {
			return err
		}
	}
	return p.w.Drain(ctx)
}

// ---------------------------------------------------------------- raw consume

// rawConsume is step 3 (README.md). It reads with Fetch: nats.go's Consume, which the processor
// uses, sometimes stalls for ~30 s here (README.md, "Stalls").
func rawConsume(ctx context.Context, e *benchkit.Env, mode string, n int, lastSeq uint64, rep int) (phase, error) {
	js, err := e.Connect(false, "bench-raw")
	if err != nil {
		return phase{}, err
	}
	cc := *e.Cfg.DeclareSpec().Consumer
	cc.Durable = fmt.Sprintf("bench-raw-%d", rep)
	cc.Description = "bench/processor raw consume"
	stream := e.Cfg.Stream.Name
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, err := js.CreateConsumer(cctx, stream, cc)
	if err != nil {
		return phase{}, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, stream, cc.Durable)
	}()
	batch := cc.MaxAckPending // the processor's rule for its fetch size
	if batch <= 0 || batch > 10_000 {
		batch = 1000
	}
	var got, ackErrs atomic.Int64
	stopProf, err := benchkit.StepProfile(*cpuprofile, fmt.Sprintf("%s-raw%d", mode, rep))
	if err != nil {
		return phase{}, err
	}
	defer stopProf()
	t0, c0 := time.Now(), benchkit.CPUTime()
	// One pull request of `batch` at a time, each message acked as it arrives; the next request
	// follows the last ack of the batch on the same connection, so the server has the acks first.
	fctx, stopFetch := context.WithCancel(ctx)
	var fetching sync.WaitGroup
	defer func() { stopFetch(); fetching.Wait() }()
	fetching.Go(func() {
		for fctx.Err() == nil && got.Load() < int64(n) {
			b, err := cons.Fetch(batch, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				benchkit.Logf("   raw fetch: %v", err)
				continue
			}
			for m := range b.Messages() {
				if m.Ack() != nil {
					ackErrs.Add(1)
				}
				got.Add(1)
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				benchkit.Logf("   raw fetch: %v", err)
			}
		}
	})
	lastLog := t0
	if err := benchkit.Poll(ctx, 25*time.Millisecond, func() (bool, error) {
		logNow, all := time.Since(lastLog) >= 5*time.Second, got.Load() >= int64(n)
		if logNow {
			lastLog = time.Now()
		} else if !all {
			return false, nil
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if logNow && err == nil {
			benchkit.Logf("   %s received; consumer: delivered %d, ack floor %d, ack pending %d, redelivered %d, waiting pulls %d",
				benchkit.Num(int(got.Load())), info.Delivered.Stream, info.AckFloor.Stream, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
		}
		return all && err == nil && info.AckFloor.Stream >= lastSeq && info.NumAckPending == 0 && info.NumPending == 0, nil
	}); err != nil {
		return phase{}, err
	}
	p := phase{N: int(got.Load()), Dur: time.Since(t0), CPU: benchkit.CPUTime() - c0}
	stopProf()
	if a := ackErrs.Load(); a > 0 {
		return p, fmt.Errorf("%d acks failed", a)
	}
	return p, nil
}

// ---------------------------------------------------------------- projection

type running struct {
	p           *processor.Processor
	consumeErrs atomic.Int64 // the processor's "consume" warnings
	started     sync.Map     // attributes of its "processor running" log line
	cancel      context.CancelFunc
	done        chan error
}

// startProcessor runs the processor exactly as the appliance builds it (plus -workers / -batch, and
// without the history index with -no-history), on its own in-process connection.
func startProcessor(ctx context.Context, e *benchkit.Env) (*running, error) {
	js, err := e.Connect(false, "bench-processor")
	if err != nil {
		return nil, err
	}
	var proj *processor.Projection
	if *noHistory {
		// orderstore.NewProjection without SetHistory.
		kv, err := js.KeyValue(ctx, e.Cfg.Processor.ProjectionBucket)
		if err != nil {
			return nil, err
		}
		proj = processor.NewProjection(js, kv)
		proj.SetAtomicBatches(e.Cfg.DurabilityMode() == orderstore.DurabilityAlways)
	} else if proj, err = orderstore.NewProjection(ctx, js, e.Cfg); err != nil { // as the appliance wires it
		return nil, err
	}
	level := map[bool]slog.Level{false: slog.LevelWarn, true: slog.LevelInfo}[*verbose]
	r := &running{done: make(chan error, 1)}
	pc := e.Cfg.ProcessorConfig(proj)
	pc.Workers, pc.BatchSize = *workers, *batch
	pc.Logger = slog.New(countingHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}), &r.consumeErrs, &r.started}).With("component", "processor")
	p, err := processor.New(js, pc)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r.p, r.cancel = p, cancel
	go func() { r.done <- p.Run(rctx) }()
	return r, nil
}

// settings renders the processor's own start-up settings, e.g. ", batch 125, partitions 4".
func (r *running) settings() string {
	var s string
	for _, k := range []string{"batch", "partitions", "workers"} {
		if v, ok := r.started.Load(k); ok {
			s += fmt.Sprintf(", %s %v", k, v)
		}
	}
	return s
}

func (r *running) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(60 * time.Second):
		return errors.New("processor did not stop within 60s")
	}
}

// caughtUp polls processor.Lag until the durable has nothing pending or
// unacked and the processor has settled want events.
func caughtUp(ctx context.Context, js jetstream.JetStream, e *benchkit.Env, r *running, want uint64, timeout time.Duration) error {
	_, err := benchkit.CaughtUp(ctx, want, timeout, func(ctx context.Context) (processor.LagInfo, error) {
		return processor.Lag(ctx, js, e.Cfg.Stream.Name, e.Cfg.Processor.Durable)
	}, r.p.Stats, r.done)
	return err
}

// projection times a processor over the mode's events, into res.
func projection(ctx context.Context, e *benchkit.Env, res *modeResult) error {
	lagJS, err := e.Connect(false, "bench-lag") // as the admin API would
	if err != nil {
		return err
	}
	stopProf, err := benchkit.StepProfile(*cpuprofile, res.Mode+"-projection")
	if err != nil {
		return err
	}
	defer stopProf()
	t0, c0 := time.Now(), benchkit.CPUTime()
	r, err := startProcessor(ctx, e)
	if err != nil {
		return err
	}
	err = caughtUp(ctx, lagJS, e, r, uint64(res.Events), *catchupTimeout)
	res.Proj = phase{N: res.Events, Dur: time.Since(t0), CPU: benchkit.CPUTime() - c0}
	stopProf()
	res.ProjStats = r.p.Stats()
	if serr := r.stop(); err == nil {
		err = serr
	}
	res.ProjConsumeErrs, res.ProcSettings = r.consumeErrs.Load(), r.settings()
	return err
}

// verify checks the projection: one key per order, and for a sample of
// orders the event count and latest status the generator produced.
func verify(ctx context.Context, e *benchkit.Env, gen *benchkit.Orders, r *modeResult) error {
	js, err := e.Connect(false, "bench-verify")
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, e.Cfg.Processor.ProjectionBucket)
	if err != nil {
		return err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	r.Keys = st.Values()
	proj := processor.NewProjection(js, kv)
	rng := rand.New(rand.NewPCG(42, 42))
	for range min(1000, len(gen.Count)) {
		i := rng.IntN(len(gen.Count))
		if gen.Count[i] == 0 {
			continue
		}
		r.SpotChecked++
		ord, err := proj.Get(ctx, benchkit.OrderID(i))
		if err != nil || ord.Events != int(gen.Count[i]) || ord.Status != benchkit.Types[gen.Last[i]] || ord.LastEvent != benchkit.Types[gen.Last[i]] {
			r.SpotBad++
		}
	}
	if r.Keys != uint64(r.Distinct) || r.SpotBad > 0 || r.ProjStats.Processed != uint64(r.Events) {
		return fmt.Errorf("projection mismatch: %d keys for %d orders, %d of %d spot-checked orders wrong, processed %d of %d",
			r.Keys, r.Distinct, r.SpotBad, r.SpotChecked, r.ProjStats.Processed, r.Events)
	}
	return nil
}

// ---------------------------------------------------------------- lag under load

func loadPhase(ctx context.Context, mode string, orders int, target float64) (*loadResult, error) {
	lr := &loadResult{Target: target}
	benchkit.Logf("5. lag under load: fresh store, publishing for %s at %s events/s (%.0f%% of the acked-publish rate)",
		*loadDur, benchkit.Num(int(target)), *loadShare*100)
	e, err := newEnv(ctx, mode, int(target*loadDur.Seconds())+1)
	if err != nil {
		return lr, err
	}
	defer e.Close()
	lr.MaxAckPending = e.Cfg.Processor.MaxAckPending
	lagJS, err := e.Connect(false, "bench-lag")
	if err != nil {
		return lr, err
	}
	pjs, err := e.Publisher(*pubConn == "tcp", "bench-publisher", *window)
	if err != nil {
		return lr, err
	}
	r, err := startProcessor(ctx, e)
	if err != nil {
		return lr, err
	}
	defer r.stop()
	select {
	case <-r.p.Ready():
	case err := <-r.done:
		r.done <- err // for stop
		return lr, fmt.Errorf("processor did not start: %v", err)
	case <-ctx.Done():
		return lr, ctx.Err()
	}
	pub := newPublisher(pjs, benchkit.NewOrders(*seed+1, 0x5eed, orders), *window, "load-"+mode)

	t0, c0 := time.Now(), benchkit.CPUTime()
	sctx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			lctx, cancel := context.WithTimeout(sctx, 5*time.Second)
			l, err := processor.Lag(lctx, lagJS, e.Cfg.Stream.Name, e.Cfg.Processor.Durable)
			cancel()
			if err != nil {
				continue
			}
			s := sample{T: time.Since(t0).Seconds(), Stored: l.LastSeq, Processed: r.p.Stats().Processed,
				Pending: l.Pending, AckPending: l.AckPending, SecondsBehind: l.SecondsBehind}
			lr.Samples = append(lr.Samples, s) // read once sampling is done
			benchkit.Logf("   t=%4.0fs stored %9s processed %9s backlog %8s behind %6.2fs", s.T, benchkit.Num(int(s.Stored)), benchkit.Num(int(s.Processed)), benchkit.Num(int(s.backlog())), s.SecondsBehind)
		}
	})
	perr := pub.run(ctx, -1, target, t0.Add(*loadDur))
	lr.PubDur, lr.Published, lr.ProcessedDuring = time.Since(t0), int64(pub.acked), r.p.Stats().Processed
	if perr != nil {
		stopSampling()
		sampling.Wait()
		return lr, perr
	}
	benchkit.Logf("   publishing stopped after %s: %s acked (%s events/s); waiting for the processor to catch up",
		lr.PubDur.Round(time.Millisecond), benchkit.Num(int(lr.Published)), benchkit.Num(int(lr.achieved())))
	pubEnd := time.Now()
	err = caughtUp(ctx, lagJS, e, r, uint64(lr.Published), *catchupTimeout)
	lr.Catchup, lr.CaughtUp, lr.CPU = time.Since(pubEnd), err == nil, benchkit.CPUTime()-c0
	stopSampling()
	sampling.Wait()
	lr.ConsumeErrs = r.consumeErrs.Load()
	lr.analyse()
	if err != nil && ctx.Err() == nil {
		benchkit.Logf("   %v", err) // not caught up: the report says so
		err = nil
	}
	return lr, err
}

// analyse computes the lag figures over the samples taken while publishing
// (README.md, step 5, says what bounded means).
func (lr *loadResult) analyse() {
	pubSecs := lr.PubDur.Seconds()
	var first, second []sample
	var max2 uint64 // the second half's largest backlog
	for _, s := range lr.Samples {
		if s.T > pubSecs {
			continue
		}
		lr.MaxBacklog = max(lr.MaxBacklog, s.backlog())
		lr.MaxBehind = max(lr.MaxBehind, s.SecondsBehind)
		lr.EndBacklog, lr.EndBehind = s.backlog(), s.SecondsBehind
		if s.T <= pubSecs/2 {
			first = append(first, s)
		} else {
			second = append(second, s)
			max2 = max(max2, s.backlog())
		}
	}
	lr.Mean1, _ = fit(first)
	lr.Mean2, lr.Slope2 = fit(second)
	slack := 2 * float64(max(lr.MaxAckPending, 1000))
	lr.Bounded = len(second) >= 2 && (float64(max2) <= slack || (lr.Slope2 < 0.05*lr.Target && lr.Mean2 <= 1.5*lr.Mean1+slack))
}

// fit is the backlog's mean over ss and its least-squares trend, in events per second.
func fit(ss []sample) (mean, slope float64) {
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.T, float64(s.backlog())
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	if n > 0 {
		mean = sy / n
	}
	if d := n*sxx - sx*sx; n >= 2 && d != 0 {
		slope = (n*sxy - sx*sy) / d
	}
	return mean, slope
}

// ---------------------------------------------------------------- output

func header(started time.Time) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# bench/processor results\n\n")
	fmt.Fprintf(&b, "- date: %s, host %s, %s/%s, %d CPUs, %s, nats-server %s (embedded)\n",
		started.UTC().Format(time.RFC3339), host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), server.VERSION)
	fmt.Fprintf(&b, "- load average at the end of the run: %s (this process alone uses up to %d.0 while busy)\n", benchkit.LoadAvg(), runtime.NumCPU())
	fmt.Fprintf(&b, "- command: `%s`\n", benchkit.Command("./bench/processor"))
	fmt.Fprintf(&b, "- events: JSON `{\"order_id\":\"order-NNNNNN\",\"status\":TYPE}` with a Nats-Msg-Id, on orders.{created,paid,shipped,delivered,cancelled}; each event picks one of the orders uniformly at random (seed %d)\n", *seed)
	fmt.Fprintf(&b, "- publishers: %s connection, async publishes, %d unacked at most\n", *pubConn, *window)
	return b.String()
}

func (r *modeResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## -sync %s (durability %s): %s events over %s orders\n\n", r.Mode, r.Durability, benchkit.Num(r.Events), benchkit.Num(r.Orders))
	if r.Err != nil {
		fmt.Fprintf(&b, "**failed: %v**\n\n", r.Err)
	}
	fmt.Fprintf(&b, "Load average (1, 5, 15 min) at the start: %s; at the end: %s.\n\n", r.LoadAvg[0], r.LoadAvg[1])
	fmt.Fprintf(&b, "| step | events | time | events/s | CPU (%d cores = %d%%) |\n|---|---:|---:|---:|---:|\n", runtime.NumCPU(), 100*runtime.NumCPU())
	row := func(name string, p phase) {
		if p.N == 0 {
			return
		}
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** | %s |\n", name, benchkit.Num(p.N), benchkit.Secs(p.Dur), benchkit.Num(int(p.rate())), benchkit.CPUShare(p.CPU, p.Dur))
	}
	row(fmt.Sprintf("acked publish (async, window %d, %s)", *window, *pubConn), r.Publish)
	row(fmt.Sprintf("raw pull consume + ack (durable, explicit ack, max_ack_pending %d, Fetch)", r.MaxAckPending), r.Raw)
	extra := ""
	if *workers > 0 {
		extra = fmt.Sprintf(", %d workers", *workers)
	}
	if *noHistory {
		extra += ", no history index"
	}
	row(fmt.Sprintf("projection (order-processor%s%s)", r.ProcSettings, extra), r.Proj)
	b.WriteString("\n")
	if len(r.RawReps) > 1 {
		var reps []string
		for _, x := range r.RawReps {
			reps = append(reps, benchkit.Num(int(x.rate())))
		}
		fmt.Fprintf(&b, "- raw consume repetitions (fresh durable each): %s events/s; the table shows the median\n", strings.Join(reps, ", "))
	}
	if r.Proj.N > 0 {
		fmt.Fprintf(&b, "- projection / raw consume: **%.1f%%** (goal >= 50%%: %s)\n", 100*r.ratio(), metStr[r.ratio() >= 0.5])
		fmt.Fprintf(&b, "- projection checked: %s keys for %s orders with events; processed %s, duplicates %d, failed %d, dead-lettered %d; %d/%d spot-checked orders match the generator\n",
			benchkit.Num(int(r.Keys)), benchkit.Num(r.Distinct), benchkit.Num(int(r.ProjStats.Processed)), r.ProjStats.Duplicates, r.ProjStats.Failed, r.ProjStats.DeadLettered, r.SpotChecked-r.SpotBad, r.SpotChecked)
		fmt.Fprintf(&b, "- processor consume warnings (e.g. missed heartbeat: a client stall): %d\n", r.ProjConsumeErrs)
	}
	if l := r.Load; l != nil {
		fmt.Fprintf(&b, "\n### lag under load (fresh store, %s of publishing at %.0f%% of the acked-publish rate)\n\n", *loadDur, *loadShare*100)
		fmt.Fprintf(&b, "| metric | value |\n|---|---:|\n")
		fmt.Fprintf(&b, "| target publish rate | %s events/s |\n", benchkit.Num(int(l.Target)))
		fmt.Fprintf(&b, "| achieved (acked) publish rate | %s events/s (%s events in %s) |\n", benchkit.Num(int(l.achieved())), benchkit.Num(int(l.Published)), benchkit.Secs(l.PubDur))
		fmt.Fprintf(&b, "| processor apply rate while publishing | %s events/s |\n", benchkit.Num(int(l.applyRate())))
		fmt.Fprintf(&b, "| backlog (pending + ack pending): max / at end of publishing | %s / %s |\n", benchkit.Num(int(l.MaxBacklog)), benchkit.Num(int(l.EndBacklog)))
		fmt.Fprintf(&b, "| seconds_behind: max / at end of publishing | %.2f s / %.2f s |\n", l.MaxBehind, l.EndBehind)
		fmt.Fprintf(&b, "| backlog mean, first half -> second half | %s -> %s |\n", benchkit.Num(int(l.Mean1)), benchkit.Num(int(l.Mean2)))
		fmt.Fprintf(&b, "| backlog trend over the second half | %+.0f events/s (%.1f%% of the target rate) |\n", l.Slope2, 100*l.Slope2/math.Max(l.Target, 1))
		fmt.Fprintf(&b, "| lag bounded | **%s** |\n", yesNo[l.Bounded])
		fmt.Fprintf(&b, "| catch-up after publishing stopped | %s%s |\n", map[bool]string{false: "not caught up after "}[l.CaughtUp], benchkit.Secs(l.Catchup))
		fmt.Fprintf(&b, "| processor consume warnings (missed heartbeat = client stall) | %d |\n", l.ConsumeErrs)
		fmt.Fprintf(&b, "| CPU while publishing + catch-up | %s |\n", benchkit.CPUShare(l.CPU, l.PubDur+l.Catchup))
		fmt.Fprintf(&b, "\n<details><summary>lag samples (every second)</summary>\n\n| t (s) | stored (stream last seq) | processed | pending | ack pending | seconds_behind |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range l.Samples {
			fmt.Fprintf(&b, "| %.0f | %s | %s | %s | %d | %.2f |\n", s.T, benchkit.Num(int(s.Stored)), benchkit.Num(int(s.Processed)), benchkit.Num(int(s.Pending)), s.AckPending, s.SecondsBehind)
		}
		b.WriteString("\n</details>\n")
	}
	return b.String()
}

func summary(rs []*modeResult) string {
	var b strings.Builder
	b.WriteString("## Summary\n\n")
	b.WriteString("| -sync | events / orders | acked publish ev/s | raw consume ev/s | projection ev/s | projection / raw (goal >= 50%) | load: target ev/s | load: apply ev/s | load: max backlog | load: max s behind | lag bounded | catch-up |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s / %s | %s | %s | %s | %.1f%% (%s) |", r.Mode, benchkit.Num(r.Events), benchkit.Num(r.Orders),
			benchkit.Num(int(r.Publish.rate())), benchkit.Num(int(r.Raw.rate())), benchkit.Num(int(r.Proj.rate())), 100*r.ratio(), metStr[r.ratio() >= 0.5])
		if l := r.Load; l != nil {
			fmt.Fprintf(&b, " %s | %s | %s | %.1f | %s | %s%s |\n", benchkit.Num(int(l.Target)), benchkit.Num(int(l.applyRate())), benchkit.Num(int(l.MaxBacklog)), l.MaxBehind, yesNo[l.Bounded],
				map[bool]string{false: "> "}[l.CaughtUp], benchkit.Secs(l.Catchup))
		} else {
			b.WriteString(" - | - | - | - | - | - |\n")
		}
	}
	fmt.Fprintf(&b, "\nReproduce: `%s`\n", benchkit.Command("./bench/processor"))
	return b.String()
}

var metStr, yesNo = map[bool]string{true: "met", false: "NOT met"}, map[bool]string{true: "yes", false: "no"}
