// Command rebuild benchmarks the projection rebuild (Appliance.RebuildProjection) against the
// issue's two goals: twice the live processor's rate, and live ingest keeping 0.8 of its rate while
// a rebuild runs. bench/README.md, "bench/rebuild", has what each step measures and the figures.
//
//	go run ./bench/rebuild                  # 1M events over 10k orders, ~5 min on 2 cores
package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

// The goals of the issue.
const (
	goalRebuildRatio = 2.0 // rebuild rate / live processor rate, at least
	goalIngestRatio  = 0.8 // ingest during a rebuild / without, at least
)

var (
	events          = flag.Int("events", 1_000_000, "events in the stream the live processor projects and each rebuild folds")
	orders          = flag.Int("orders", 10_000, "orders the events are spread over (each event picks one at random)")
	size            = flag.Int("size", 200, "bytes per event (JSON padded with a note)")
	window          = flag.Int("window", 1000, "async publishes in flight while loading")
	reps            = flag.Int("reps", 3, "rebuilds without ingest, and pairs of ingest windows (without and with a rebuild)")
	duration        = flag.Duration("duration", 10*time.Second, "length of each ingest window")
	nProducers      = flag.Int("producers", 32, "ingest producers, each on its own TCP connection with one synchronous publish at a time")
	full            = flag.Bool("full", true, "also run a whole rebuild with the producers publishing all along")
	maxFileStoreGiB = flag.Int("max-file-store-gib", 16, "jetstream.max_file_store in GiB (the defaults' 8 GiB stream, 256 MiB dead letters, 512 MiB projection and 512 MiB history index, plus as much again for the shadow bucket and its history index)")
	seed            = flag.Uint64("seed", 1, "seed of the event generators and of the orders checked")
	tmp             = flag.String("tmp", "", "parent of the temporary store dir (default: the system temp dir)")
	catchupTimeout  = flag.Duration("catchup-timeout", 20*time.Minute, "give up waiting for the processor or a rebuild after this long")
	cpuprofile      = flag.String("cpuprofile", "", "write CPU profiles of the live processor, each rebuild and each ingest window to PREFIX-<step>.pprof")
	out             = flag.String("out", "", "also write the markdown results to this file")
	verbose         = flag.Bool("v", false, "log the appliance at info level (default: warnings)")
)

func main() {
	flag.Parse()
	benchkit.UsageIf(*events <= 0 || *orders <= 0 || *size <= 0 || *window <= 0 || *reps <= 0 || *duration <= 0 || *nProducers <= 0 || *maxFileStoreGiB <= 0 || flag.NArg() > 0)
	benchkit.Run("bench/rebuild", run)
}

// results is what a run measured.
type results struct {
	Started  time.Time
	Machine  string
	LoadAvg  string // at the end (Machine has it at the start)
	Distinct int    // orders with at least one event
	Load     time.Duration
	Resent   int
	Live     []procRun
	Rebuilds []rebuildRun
	Ingest   []ingestRun
	Full     *rebuildRun
	// The projection bucket after the first rebuild: its records and their stored bytes.
	Records, RecordBytes uint64
	// FullBase is the producers' acked rate in the seconds before the whole rebuild under ingest.
	FullBase float64
	Resends  int64 // producers' publishes sent again (429)
}

func run(ctx context.Context) (err error) {
	res := &results{Started: time.Now(), Machine: benchkit.Machine(orderstore.NATSServerVersion)}
	fmt.Println(res.Machine)
	defer func() {
		res.LoadAvg = benchkit.LoadAvg()
		report := markdown(res)
		if werr := benchkit.Results(report, report, *out); err == nil {
			err = werr
		}
	}()
	e, err := newEnv()
	if err != nil {
		return err
	}
	defer e.Close()

	// 1. load, processor off.
	benchkit.Logf("=== 1. loading %s events of %d B over %s orders (async, window %d, TCP), processor off", benchkit.Num(*events), *size, benchkit.Num(*orders), *window)
	if err := e.Start(ctx, false); err != nil {
		return err
	}
	pjs, err := e.Publisher(true, "bench-rebuild-loader", *window)
	if err != nil {
		return err
	}
	g := benchkit.NewOrders(*seed, loadStream, *orders)
	t0 := time.Now()
	if res.Resent, err = load(ctx, pjs, g, *events, *window); err != nil {
		return err
	}
	res.Load, res.Distinct = time.Since(t0), g.Distinct()
	benchkit.Logf("   %s events/s (%s, %d sent again)", benchkit.Num(int(benchkit.Rate(*events, res.Load))), benchkit.Secs(res.Load), res.Resent)
	e.Stop()

	// 2 and 3, -reps times: the live processor projects the whole stream
	// into an empty projection, then a rebuild folds it, with no ingest.
	var before map[string]orderstore.Order
	for rep := 1; rep <= *reps; rep++ {
		if rep > 1 {
			benchkit.Logf("=== 2. rep %d: the projection dropped and declared again, empty", rep)
			if err := e.resetProjection(ctx); err != nil {
				return fmt.Errorf("resetting the projection: %w", err)
			}
		}
		benchkit.Logf("=== 2. rep %d of %d: live processor over the backlog of %s events (the appliance started with its processor)", rep, *reps, benchkit.Num(*events))
		l, err := liveProcessor(ctx, e, rep, *events)
		if err != nil {
			return fmt.Errorf("live processor, rep %d: %w", rep, err)
		}
		res.Live = append(res.Live, l)
		benchkit.Logf("   %s events/s (%s; %s processed during the %s start; CPU %s, other processes %s)", benchkit.Num(int(l.rate())), benchkit.Secs(l.Dur), benchkit.Num(l.Before), benchkit.Secs(l.Startup), benchkit.CPUShare(l.CPU, l.Dur), l.Others)
		// Its view of the ack floor settles.
		if err := benchkit.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
		if before == nil {
			if before, err = sampleOrders(ctx, e, *orders, 200, *seed); err != nil {
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
		benchkit.Logf("=== 3. rep %d of %d: rebuild, no ingest", rep, *reps)
		r, err := rebuild(ctx, e, fmt.Sprintf("rebuild-%d", rep), nil)
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
		benchkit.Logf("   %s events in %s: %s events/s (setup %s, fold %s at %s/s, takeover %s: %s orders copied; CPU %s, other processes %s); %d of %d orders checked differ",
			benchkit.Num(int(r.events())), benchkit.Secs(r.Total), benchkit.Num(int(r.rate())), benchkit.Secs(r.Setup), benchkit.Secs(r.Fold), benchkit.Num(int(r.foldRate())), benchkit.Secs(r.Takeover), benchkit.Num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), r.Others, r.Differ, r.Checked)
		if r.Differ > 0 {
			benchkit.Logf("   first difference: %s", r.FirstDiff)
		}
	}

	// 4. ingest windows, without and with a rebuild folding.
	p, err := newProducers(e)
	if err != nil {
		return err
	}
	for rep := 1; rep <= *reps; rep++ {
		for _, with := range []bool{rep%2 == 0, rep%2 != 0} { // odd reps: without a rebuild first
			benchkit.Logf("=== 4. ingest rep %d, %s: %d producers for %s", rep, map[bool]string{true: "a rebuild folding", false: "no rebuild"}[with], *nProducers, *duration)
			r, err := ingestWindow(ctx, e, p, rep, with)
			if err != nil {
				return fmt.Errorf("ingest rep %d: %w", rep, err)
			}
			res.Ingest = append(res.Ingest, r)
			extra := ""
			if with {
				extra = fmt.Sprintf("; rebuild folded %s/s, %s at the end", benchkit.Num(int(benchkit.Rate(int(r.Folded), r.Dur))), r.RebuildState)
			}
			benchkit.Logf("   %s acked/s (p50 %s, p99 %s); %s syncs/s (%s mean, %.1f events each); live processor %s/s, backlog %s%s; other processes %s",
				benchkit.Num(int(r.rate())), benchkit.Ms(r.P50), benchkit.Ms(r.P99), benchkit.Num(int(benchkit.Rate(int(r.Syncs), r.Dur))), benchkit.Ms(r.SyncMean), float64(r.Acked)/float64(max(r.Syncs, 1)),
				benchkit.Num(int(benchkit.Rate(int(r.Projected), r.Dur))), benchkit.Num(int(r.Backlog)), extra, r.Others)
		}
	}

	// 5. a whole rebuild under ingest.
	if *full {
		benchkit.Logf("=== 5. a whole rebuild with %d producers publishing all along", *nProducers)
		if _, err := e.CaughtUp(ctx, 0, *catchupTimeout); err != nil {
			return err
		}
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := p.run(ctx, stop)
			done <- err
		}()
		stopProducers := sync.OnceValue(func() error {
			close(stop)
			return <-done
		})
		defer stopProducers()
		// The producers' rate before the rebuild, once they run.
		if err := benchkit.Sleep(ctx, time.Second); err != nil {
			return err
		}
		a0, t0 := p.acked.Load(), time.Now()
		if err := benchkit.Sleep(ctx, 3*time.Second); err != nil {
			return err
		}
		res.FullBase = benchkit.Rate(int(p.acked.Load()-a0), time.Since(t0))
		r, rerr := rebuild(ctx, e, "rebuild-ingest", &p.acked)
		if err := stopProducers(); err != nil {
			return fmt.Errorf("producers: %w", err)
		}
		if rerr != nil {
			return fmt.Errorf("rebuild under ingest: %w", rerr)
		}
		res.Full = &r
		benchkit.Logf("   %s events in %s: %s events/s (setup %s, fold %s at %s/s, takeover %s); ingest %s/s before, %s / %s / %s acked/s in setup / fold / takeover; live processor backlog at most %s (%.1f s behind)",
			benchkit.Num(int(r.events())), benchkit.Secs(r.Total), benchkit.Num(int(r.rate())), benchkit.Secs(r.Setup), benchkit.Secs(r.Fold), benchkit.Num(int(r.foldRate())), benchkit.Secs(r.Takeover),
			benchkit.Num(int(res.FullBase)), benchkit.Num(int(r.ingestIn(0))), benchkit.Num(int(r.ingestIn(1))), benchkit.Num(int(r.ingestIn(2))), benchkit.Num(int(r.MaxBacklog)), r.MaxBehind)
	}
	res.Resends = p.resent.Load()
	return nil
}

// ---------------------------------------------------------------- output

func markdown(res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench/rebuild, %s: %s; load average at the end %s\n\n", res.Started.UTC().Format("2006-01-02"), res.Machine, res.LoadAvg)
	if res.Load > 0 {
		fmt.Fprintf(&b, "Stream: %s events of %d B over %s orders (%s of them with events), loaded over TCP in %s (%s events/s acked, async with %d in flight, processor off; %d sent again). Durability: group commit; jetstream.max_file_store %d GiB.\n\n",
			benchkit.Num(*events), *size, benchkit.Num(*orders), benchkit.Num(res.Distinct), benchkit.Secs(res.Load), benchkit.Num(int(benchkit.Rate(*events, res.Load))), *window, res.Resent, *maxFileStoreGiB)
	}
	cores := runtime.NumCPU()
	var liveRates, rebuildRates, foldRates, pairs []float64
	if len(res.Live) > 0 || len(res.Rebuilds) > 0 {
		fmt.Fprintf(&b, "| rep | run | events | time | events/s | setup | fold (events/s) | takeover (orders copied) | CPU (%d cores = %d%%) | CPU per event | other processes' CPU | orders checked: differ |\n", cores, 100*cores)
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	}
	for rep := 1; rep <= *reps; rep++ {
		var lr float64
		for _, l := range res.Live {
			if l.Rep != rep {
				continue
			}
			lr = l.rate()
			liveRates = append(liveRates, lr)
			fmt.Fprintf(&b, "| %d | live processor over the backlog (%s processed during the %s start) | %s | %s | **%s** | | | | %s | %s | %s | |\n",
				rep, benchkit.Num(l.Before), benchkit.Secs(l.Startup), benchkit.Num(l.N), benchkit.Secs(l.Dur), benchkit.Num(int(l.rate())), benchkit.CPUShare(l.CPU, l.Dur), benchkit.PerEvent(l.CPU, l.N), l.Others)
		}
		for _, r := range res.Rebuilds {
			if r.Rep != rep {
				continue
			}
			fmt.Fprintf(&b, "| %d | rebuild, no ingest | %s | %s | **%s** | %s | %s (%s) | %s (%s) | %s | %s | %s | %d of %d |\n",
				r.Rep, benchkit.Num(int(r.events())), benchkit.Secs(r.Total), benchkit.Num(int(r.rate())), benchkit.Secs(r.Setup), benchkit.Secs(r.Fold), benchkit.Num(int(r.foldRate())),
				benchkit.Secs(r.Takeover), benchkit.Num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), benchkit.PerEvent(r.CPU, int(r.events())), r.Others, r.Differ, r.Checked)
			rebuildRates = append(rebuildRates, r.rate())
			foldRates = append(foldRates, r.foldRate())
			if lr > 0 {
				pairs = append(pairs, r.rate()/lr)
			}
		}
	}
	if r := res.Full; r != nil {
		fmt.Fprintf(&b, "| | rebuild with %d producers publishing all along | %s | %s | %s | %s | %s (%s) | %s (%s) | %s | %s | %s | |\n",
			*nProducers, benchkit.Num(int(r.events())), benchkit.Secs(r.Total), benchkit.Num(int(r.rate())), benchkit.Secs(r.Setup), benchkit.Secs(r.Fold), benchkit.Num(int(r.foldRate())),
			benchkit.Secs(r.Takeover), benchkit.Num(int(r.Final.Rebuilt)), benchkit.CPUShare(r.CPU, r.Total), benchkit.PerEvent(r.CPU, int(r.events())), r.Others)
	}
	if res.Records > 0 {
		fmt.Fprintf(&b, "\nThe projection bucket after the first rebuild: %s records, %s bytes stored (%s per record, as nats counts them).\n",
			benchkit.Num(int(res.Records)), benchkit.Num(int(res.RecordBytes)), benchkit.Num(int(res.RecordBytes/res.Records)))
	}
	if live := median(liveRates); live > 0 && len(rebuildRates) > 0 {
		rr, fr := median(rebuildRates), median(foldRates)
		fmt.Fprintf(&b, "\nRebuild (median, start to done) %s events/s / live processor (median) %s events/s = **%.2f** (goal >= %.1f) **%s**; median of the reps' ratios %.2f; the fold phase alone (median %s events/s) / live = %.2f.\n",
			benchkit.Num(int(rr)), benchkit.Num(int(live)), rr/live, goalRebuildRatio, benchkit.PassFail(rr/live >= goalRebuildRatio), median(pairs), benchkit.Num(int(fr)), fr/live)
	}
	if len(res.Ingest) > 0 {
		fmt.Fprintf(&b, "\nLive ingest: %d producers, each on its own TCP connection with one synchronous publish at a time, %s per window, without a rebuild and with one folding (the window opens once it folds; it is canceled after), alternating which goes first:\n\n", *nProducers, *duration)
		b.WriteString("| rep | without: acked/s (p50 / p99) | with a rebuild: acked/s (p50 / p99) | with / without | rebuild folded during the window | live processor projected/s without / with (backlog at the end) | group commit without / with: syncs/s, mean sync | CPU without / with | other processes' CPU without / with |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var without, with, pairs []float64
		for rep := 1; rep <= *reps; rep++ {
			runs := map[bool]*ingestRun{} // by Rebuild
			for i, r := range res.Ingest {
				if r.Rep == rep {
					runs[r.Rebuild] = &res.Ingest[i]
				}
			}
			a, w := runs[false], runs[true]
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
				benchkit.Num(int(a.rate())), benchkit.Ms(a.P50), benchkit.Ms(a.P99), benchkit.Num(int(w.rate())), benchkit.Ms(w.P50), benchkit.Ms(w.P99), w.rate()/a.rate(),
				benchkit.Num(int(benchkit.Rate(int(w.Folded), w.Dur))), state,
				benchkit.Num(int(benchkit.Rate(int(a.Projected), a.Dur))), benchkit.Num(int(benchkit.Rate(int(w.Projected), w.Dur))), benchkit.Num(int(a.Backlog)), benchkit.Num(int(w.Backlog)),
				benchkit.Num(int(benchkit.Rate(int(a.Syncs), a.Dur))), benchkit.Ms(a.SyncMean), benchkit.Num(int(benchkit.Rate(int(w.Syncs), w.Dur))), benchkit.Ms(w.SyncMean),
				benchkit.CPUShare(a.CPU, a.Dur), benchkit.CPUShare(w.CPU, w.Dur), a.Others, w.Others)
		}
		if len(pairs) > 0 {
			ratio := median(with) / median(without)
			fmt.Fprintf(&b, "\nIngest with a rebuild (median %s acked/s) / without (median %s acked/s) = **%.2f** (goal >= %.1f) **%s**; median of the reps' ratios %.2f.\n",
				benchkit.Num(int(median(with))), benchkit.Num(int(median(without))), ratio, goalIngestRatio, benchkit.PassFail(ratio >= goalIngestRatio), median(pairs))
		}
	}
	if r := res.Full; r != nil {
		fmt.Fprintf(&b, "\nA whole rebuild with the producers publishing all along: ingest %s acked/s in the 3 s before it, %s / %s / %s acked/s during its setup / fold / takeover (%s / %s / %s); the live processor's backlog at most %s events (%.1f s behind, sampled every 500 ms).\n",
			benchkit.Num(int(res.FullBase)), benchkit.Num(int(r.ingestIn(0))), benchkit.Num(int(r.ingestIn(1))), benchkit.Num(int(r.ingestIn(2))), benchkit.Secs(r.Setup), benchkit.Secs(r.Fold), benchkit.Secs(r.Takeover), benchkit.Num(int(r.MaxBacklog)), r.MaxBehind)
	}
	if res.Resends > 0 {
		fmt.Fprintf(&b, "\nProducers' publishes sent again after a 429: %d.\n", res.Resends)
	}
	fmt.Fprintf(&b, "\nReproduce: `%s`\n", benchkit.Command("./bench/rebuild"))
	return b.String()
}
