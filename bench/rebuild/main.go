// Command rebuild benchmarks the projection rebuild
// (Appliance.RebuildProjection) against the two goals: a rebuild
// folds the stream at least twice as fast as the live processor projects
// it (a rebuild need not sync per batch), and live ingest keeps at least
// 0.8 of its rate while a rebuild runs.
//
//	go run ./bench/rebuild                  # 1M events over 10k orders, ~5 min on 2 cores
//	go run ./bench/rebuild -events 100000 -reps 1 -duration 5s # a quick look
//
// One appliance on its defaults (group commit, processor on) in a fresh
// store, with a max_file_store that leaves room for the shadow:
//
//  1. load: -events events of about -size bytes over -orders orders,
//     published over TCP with async publishes (-window in flight), the
//     appliance's processor off;
//  2. live processor: the appliance is started again on the same store
//     with its processor, which projects the whole backlog; timed from
//     the start's return until its consumer has nothing pending or
//     unacked (as bench/history times a processor);
//  3. rebuild, no ingest: a rebuild of the whole stream, timed from its
//     start to done, with its setup, fold and takeover phases from
//     RebuildStatus; 200 orders read before and after must match.
//     Steps 2 and 3 run -reps times in turn: before each step 2 after
//     the first, the projection and the processor's consumer are
//     dropped and declared again, empty;
//  4. ingest: -producers producers (one TCP connection each, one
//     synchronous publish at a time) publish for -duration without a
//     rebuild and with one folding, alternating which goes first, -reps
//     pairs (the rebuild is canceled after its window);
//  5. a whole rebuild with the producers publishing all along (-full).
//
// See bench/README.md, "bench/rebuild".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

// The goals of the issue.
const (
	goalRebuildRatio = 2.0 // rebuild rate / live processor rate, at least
	goalIngestRatio  = 0.8 // ingest during a rebuild / without, at least
)

type options struct {
	events, orders int
	size           int
	window         int
	reps           int
	duration       time.Duration
	producers      int
	full           bool
	maxFileStore   int64
	seed           uint64
	tmp            string
	catchupTimeout time.Duration
	cpuprofile     string
	out            string
	verbose        bool
}

func main() {
	var o options
	var mfs int
	flag.IntVar(&o.events, "events", 1_000_000, "events in the stream the live processor projects and each rebuild folds")
	flag.IntVar(&o.orders, "orders", 10_000, "orders the events are spread over (each event picks one at random)")
	flag.IntVar(&o.size, "size", 200, "bytes per event (JSON padded with a note)")
	flag.IntVar(&o.window, "window", 1000, "async publishes in flight while loading")
	flag.IntVar(&o.reps, "reps", 3, "rebuilds without ingest, and pairs of ingest windows (without and with a rebuild)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each ingest window")
	flag.IntVar(&o.producers, "producers", 32, "ingest producers, each on its own TCP connection with one synchronous publish at a time")
	flag.BoolVar(&o.full, "full", true, "also run a whole rebuild with the producers publishing all along")
	flag.IntVar(&mfs, "max-file-store-gib", 16, "jetstream.max_file_store in GiB (the defaults' 8 GiB stream, 256 MiB dead letters, 512 MiB projection and 512 MiB history index, plus as much again for the shadow bucket and its history index)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the event generators and of the orders checked")
	flag.StringVar(&o.tmp, "tmp", "", "parent of the temporary store dir (default: the system temp dir)")
	flag.DurationVar(&o.catchupTimeout, "catchup-timeout", 20*time.Minute, "give up waiting for the processor or a rebuild after this long")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write CPU profiles of the live processor, each rebuild and each ingest window to PREFIX-<step>.pprof")
	flag.StringVar(&o.out, "out", "", "also write the markdown results to this file")
	flag.BoolVar(&o.verbose, "v", false, "log the appliance at info level (default: warnings)")
	flag.Parse()
	o.maxFileStore = int64(mfs) << 30
	if o.events <= 0 || o.orders <= 0 || o.size <= 0 || o.window <= 0 || o.reps <= 0 || o.duration <= 0 || o.producers <= 0 || mfs <= 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	benchkit.Run("bench/rebuild", func(ctx context.Context) error { return run(ctx, o) })
}

// results is what a run measured.
type results struct {
	Started  time.Time
	Machine  string
	LoadAvg  [2]string
	Distinct int // orders with at least one event
	Load     time.Duration
	Resent   int
	Live     []procRun
	Rebuilds []rebuildRun
	Ingest   []ingestRun
	Full     *rebuildRun
	// The projection bucket after the first rebuild: its records and
	// their stored bytes.
	Records, RecordBytes uint64
	// FullBase is the producers' acked rate in the seconds before the
	// whole rebuild under ingest started.
	FullBase float64
	Resends  int64 // producers' publishes sent again (429)
}

func run(ctx context.Context, o options) (err error) {
	res := &results{Started: time.Now(), Machine: benchkit.Machine(orderstore.NATSServerVersion)}
	res.LoadAvg[0] = loadavg()
	fmt.Println(res.Machine)
	defer func() {
		res.LoadAvg[1] = loadavg()
		report := markdown(o, res)
		fmt.Println()
		fmt.Print(report)
		if o.out != "" {
			if werr := os.WriteFile(o.out, []byte(report), 0o644); werr != nil && err == nil {
				err = werr
			} else {
				fmt.Println("\nresults written to", o.out)
			}
		}
	}()
	e, err := newEnv(o)
	if err != nil {
		return err
	}
	defer e.Close()

	// 1. load, processor off.
	logf("=== 1. loading %s events of %d B over %s orders (async, window %d, TCP), processor off", num(o.events), o.size, num(o.orders), o.window)
	if err := e.Start(ctx, false); err != nil {
		return err
	}
	pjs, err := e.Publisher(true, "bench-rebuild-loader", o.window)
	if err != nil {
		return err
	}
	g := newGenerator(o.seed, 0x10ad, o.orders, o.size)
	t0 := time.Now()
	if res.Resent, err = load(ctx, pjs, g, o.events, o.window); err != nil {
		return err
	}
	res.Load, res.Distinct = time.Since(t0), g.Distinct()
	logf("   %s events/s (%s, %d sent again)", num(int(rate(o.events, res.Load))), secs(res.Load), res.Resent)
	e.Stop()

	// 2 and 3, -reps times: the live processor projects the whole stream
	// into an empty projection, then a rebuild folds it, with no ingest.
	var before map[string]orderstore.Order
	for rep := 1; rep <= o.reps; rep++ {
		if rep > 1 {
			logf("=== 2. rep %d: the projection dropped and declared again, empty", rep)
			if err := e.resetProjection(ctx); err != nil {
				return fmt.Errorf("resetting the projection: %w", err)
			}
		}
		logf("=== 2. rep %d of %d: live processor over the backlog of %s events (the appliance started with its processor)", rep, o.reps, num(o.events))
		l, err := liveProcessor(ctx, o, e, rep, o.events)
		if err != nil {
			return fmt.Errorf("live processor, rep %d: %w", rep, err)
		}
		res.Live = append(res.Live, l)
		logf("   %s events/s (%s; %s processed during the %s start; CPU %s, other processes %s)", num(int(l.rate())), secs(l.Dur), num(l.Before), secs(l.Startup), benchkit.CPUShare(l.CPU, l.Dur), l.Others)
		// Its view of the ack floor settles.
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
		if before == nil {
			if before, err = sampleOrders(ctx, e, o.orders, 200, o.seed); err != nil {
				return err
			}
		} else {
			// The projection the live processor built again is the same.
			var check rebuildRun
			if err := compareOrders(ctx, e, before, &check); err != nil {
				return err
			}
			if check.Differ > 0 {
				return fmt.Errorf("rep %d: the projection built again differs from the first: %s", rep, check.FirstDiff)
			}
		}
		logf("=== 3. rep %d of %d: rebuild, no ingest", rep, o.reps)
		r, err := rebuild(ctx, o, e, fmt.Sprintf("rebuild-%d", rep), nil)
		r.Rep = rep
		if err != nil {
			return fmt.Errorf("rebuild %d: %w", rep, err)
		}
		if err := compareOrders(ctx, e, before, &r); err != nil {
			return err
		}
		res.Rebuilds = append(res.Rebuilds, r)
		if rep == 1 {
			res.Records, res.RecordBytes = recordSize(ctx, e)
		}
		logf("   %s events in %s: %s events/s (setup %s, fold %s at %s/s, takeover %s: %s orders copied; CPU %s, other processes %s); %d of %d orders checked differ",
			num(int(r.events())), secs(r.Total), num(int(r.rate())), secs(r.Setup), secs(r.Fold), num(int(r.foldRate())), secs(r.Takeover), num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), r.Others, r.Differ, r.Checked)
		if r.Differ > 0 {
			logf("   first difference: %s", r.FirstDiff)
		}
	}

	// 4. ingest windows, without and with a rebuild folding.
	p, err := newProducers(e, o)
	if err != nil {
		return err
	}
	for rep := 1; rep <= o.reps; rep++ {
		order := []bool{false, true}
		if rep%2 == 0 {
			order = []bool{true, false}
		}
		for _, with := range order {
			logf("=== 4. ingest rep %d, %s: %d producers for %s", rep, map[bool]string{true: "a rebuild folding", false: "no rebuild"}[with], o.producers, o.duration)
			r, err := ingestWindow(ctx, o, e, p, rep, with)
			if err != nil {
				return fmt.Errorf("ingest rep %d: %w", rep, err)
			}
			res.Ingest = append(res.Ingest, r)
			extra := ""
			if with {
				extra = fmt.Sprintf("; rebuild folded %s/s, %s at the end", num(int(rate(int(r.Folded), r.Dur))), r.RebuildState)
			}
			logf("   %s acked/s (p50 %s, p99 %s); %s syncs/s (%s mean, %.1f events each); live processor %s/s, backlog %s%s; other processes %s",
				num(int(r.rate())), benchkit.Ms(r.P50), benchkit.Ms(r.P99), num(int(rate(int(r.Syncs), r.Dur))), benchkit.Ms(r.SyncMean), float64(r.Acked)/float64(max(r.Syncs, 1)),
				num(int(rate(int(r.Projected), r.Dur))), num(int(r.Backlog)), extra, r.Others)
		}
	}

	// 5. a whole rebuild under ingest.
	if o.full {
		logf("=== 5. a whole rebuild with %d producers publishing all along", o.producers)
		if err := e.caughtUp(ctx, 0, o.catchupTimeout); err != nil {
			return err
		}
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := p.run(ctx, stop)
			done <- err
		}()
		stopped := false
		stopProducers := func() error {
			if stopped {
				return nil
			}
			stopped = true
			close(stop)
			return <-done
		}
		defer stopProducers()
		// The producers' rate before the rebuild, once they run.
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
		a0, t0 := p.acked.Load(), time.Now()
		if err := sleep(ctx, 3*time.Second); err != nil {
			return err
		}
		res.FullBase = rate(int(p.acked.Load()-a0), time.Since(t0))
		r, rerr := rebuild(ctx, o, e, "rebuild-ingest", &p.acked)
		if err := stopProducers(); err != nil {
			return fmt.Errorf("producers: %w", err)
		}
		if rerr != nil {
			return fmt.Errorf("rebuild under ingest: %w", rerr)
		}
		res.Full = &r
		logf("   %s events in %s: %s events/s (setup %s, fold %s at %s/s, takeover %s); ingest %s/s before, %s / %s / %s acked/s in setup / fold / takeover; live processor backlog at most %s (%.1f s behind)",
			num(int(r.events())), secs(r.Total), num(int(r.rate())), secs(r.Setup), secs(r.Fold), num(int(r.foldRate())), secs(r.Takeover),
			num(int(res.FullBase)), num(int(r.ingestIn(0))), num(int(r.ingestIn(1))), num(int(r.ingestIn(2))), num(int(r.MaxBacklog)), r.MaxBehind)
	}
	res.Resends = p.resent.Load()
	return nil
}

// ---------------------------------------------------------------- output

func markdown(o options, res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench/rebuild, %s: %s; load average at the end %s\n\n", res.Started.UTC().Format("2006-01-02"), res.Machine, res.LoadAvg[1])
	if res.Load > 0 {
		fmt.Fprintf(&b, "Stream: %s events of %d B over %s orders (%s of them with events), loaded over TCP in %s (%s events/s acked, async with %d in flight, processor off; %d sent again). Durability: group commit; jetstream.max_file_store %d GiB.\n\n",
			num(o.events), o.size, num(o.orders), num(res.Distinct), secs(res.Load), num(int(rate(o.events, res.Load))), o.window, res.Resent, o.maxFileStore>>30)
	}
	cores := runtime.NumCPU()
	var liveRates, rebuildRates, foldRates, pairs []float64
	if len(res.Live) > 0 || len(res.Rebuilds) > 0 {
		fmt.Fprintf(&b, "| rep | run | events | time | events/s | setup | fold (events/s) | takeover (orders copied) | CPU (%d cores = %d%%) | CPU per event | other processes' CPU | orders checked: differ |\n", cores, 100*cores)
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	}
	for rep := 1; rep <= o.reps; rep++ {
		var lr float64
		for _, l := range res.Live {
			if l.Rep != rep {
				continue
			}
			lr = l.rate()
			liveRates = append(liveRates, lr)
			fmt.Fprintf(&b, "| %d | live processor over the backlog (%s processed during the %s start) | %s | %s | **%s** | | | | %s | %s | %s | |\n",
				rep, num(l.Before), secs(l.Startup), num(l.N), secs(l.Dur), num(int(l.rate())), benchkit.CPUShare(l.CPU, l.Dur), benchkit.PerEvent(l.CPU, l.N), l.Others)
		}
		for _, r := range res.Rebuilds {
			if r.Rep != rep {
				continue
			}
			fmt.Fprintf(&b, "| %d | rebuild, no ingest | %s | %s | **%s** | %s | %s (%s) | %s (%s) | %s | %s | %s | %d of %d |\n",
				r.Rep, num(int(r.events())), secs(r.Total), num(int(r.rate())), secs(r.Setup), secs(r.Fold), num(int(r.foldRate())),
				secs(r.Takeover), num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), benchkit.PerEvent(r.CPU, int(r.events())), r.Others, r.Differ, r.Checked)
			rebuildRates = append(rebuildRates, r.rate())
			foldRates = append(foldRates, r.foldRate())
			if lr > 0 {
				pairs = append(pairs, r.rate()/lr)
			}
		}
	}
	if r := res.Full; r != nil {
		fmt.Fprintf(&b, "| | rebuild with %d producers publishing all along | %s | %s | %s | %s | %s (%s) | %s (%s) | %s | %s | %s | |\n",
			o.producers, num(int(r.events())), secs(r.Total), num(int(r.rate())), secs(r.Setup), secs(r.Fold), num(int(r.foldRate())),
			secs(r.Takeover), num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), benchkit.PerEvent(r.CPU, int(r.events())), r.Others)
	}
	if res.Records > 0 {
		fmt.Fprintf(&b, "\nThe projection bucket after the first rebuild: %s records, %s bytes stored (%s per record, as nats counts them).\n",
			num(int(res.Records)), num(int(res.RecordBytes)), num(int(res.RecordBytes/res.Records)))
	}
	if live := median(liveRates); live > 0 && len(rebuildRates) > 0 {
		rr, fr := median(rebuildRates), median(foldRates)
		fmt.Fprintf(&b, "\nRebuild (median, start to done) %s events/s / live processor (median) %s events/s = **%.2f** (goal >= %.1f) **%s**; median of the reps' ratios %.2f; the fold phase alone (median %s events/s) / live = %.2f.\n",
			num(int(rr)), num(int(live)), rr/live, goalRebuildRatio, benchkit.PassFail(rr/live >= goalRebuildRatio), median(pairs), num(int(fr)), fr/live)
	}
	if len(res.Ingest) > 0 {
		fmt.Fprintf(&b, "\nLive ingest: %d producers, each on its own TCP connection with one synchronous publish at a time, %s per window, without a rebuild and with one folding (the window opens once it folds; it is canceled after), alternating which goes first:\n\n", o.producers, o.duration)
		b.WriteString("| rep | without: acked/s (p50 / p99) | with a rebuild: acked/s (p50 / p99) | with / without | rebuild folded during the window | live processor projected/s without / with (backlog at the end) | group commit without / with: syncs/s, mean sync | CPU without / with | other processes' CPU without / with |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var without, with, pairs []float64
		for rep := 1; rep <= o.reps; rep++ {
			var a, w *ingestRun
			for i := range res.Ingest {
				r := &res.Ingest[i]
				if r.Rep != rep {
					continue
				}
				if r.Rebuild {
					w = r
				} else {
					a = r
				}
			}
			if a == nil || w == nil {
				continue
			}
			without, with = append(without, a.rate()), append(with, w.rate())
			pairs = append(pairs, w.rate()/a.rate())
			state := ""
			if w.RebuildState != "folding" {
				state = " (" + w.RebuildState + " at the end)"
			}
			fmt.Fprintf(&b, "| %d | %s (%s / %s) | %s (%s / %s) | %.2f | %s/s%s | %s / %s (%s / %s) | %s, %s / %s, %s | %s / %s | %s / %s |\n", rep,
				num(int(a.rate())), benchkit.Ms(a.P50), benchkit.Ms(a.P99), num(int(w.rate())), benchkit.Ms(w.P50), benchkit.Ms(w.P99), w.rate()/a.rate(),
				num(int(rate(int(w.Folded), w.Dur))), state,
				num(int(rate(int(a.Projected), a.Dur))), num(int(rate(int(w.Projected), w.Dur))), num(int(a.Backlog)), num(int(w.Backlog)),
				num(int(rate(int(a.Syncs), a.Dur))), benchkit.Ms(a.SyncMean), num(int(rate(int(w.Syncs), w.Dur))), benchkit.Ms(w.SyncMean),
				benchkit.CPUShare(a.CPU, a.Dur), benchkit.CPUShare(w.CPU, w.Dur), a.Others, w.Others)
		}
		if len(pairs) > 0 {
			ratio := median(with) / median(without)
			fmt.Fprintf(&b, "\nIngest with a rebuild (median %s acked/s) / without (median %s acked/s) = **%.2f** (goal >= %.1f) **%s**; median of the reps' ratios %.2f.\n",
				num(int(median(with))), num(int(median(without))), ratio, goalIngestRatio, benchkit.PassFail(ratio >= goalIngestRatio), median(pairs))
		}
	}
	if r := res.Full; r != nil {
		fmt.Fprintf(&b, "\nA whole rebuild with the producers publishing all along: ingest %s acked/s in the 3 s before it, %s / %s / %s acked/s during its setup / fold / takeover (%s / %s / %s); the live processor's backlog at most %s events (%.1f s behind, sampled every 500 ms).\n",
			num(int(res.FullBase)), num(int(r.ingestIn(0))), num(int(r.ingestIn(1))), num(int(r.ingestIn(2))), secs(r.Setup), secs(r.Fold), secs(r.Takeover), num(int(r.MaxBacklog)), r.MaxBehind)
	}
	if res.Resends > 0 {
		fmt.Fprintf(&b, "\nProducers' publishes sent again after a 429: %d.\n", res.Resends)
	}
	fmt.Fprintf(&b, "\nReproduce: `%s`\n", benchkit.Command("./bench/rebuild"))
	return b.String()
}

// The helpers every bench main shares (bench/benchkit).
var (
	cpuTime = benchkit.CPUTime
	loadavg = benchkit.LoadAvg
	secs    = benchkit.Secs
	num     = benchkit.Num
	rate    = benchkit.Rate
	logf    = benchkit.Logf
	sleep   = benchkit.Sleep
)
