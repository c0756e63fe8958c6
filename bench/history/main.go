// Command history benchmarks the order history index (processor/history.go): history and as-of
// lookups in streams of different sizes (goal: p99 of the largest at most 1.5 times the
// smallest's). bench/README.md, "bench/history", says how and holds the figures.
//
//	go run ./bench/history                    # 10k vs 1M events
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

// The goal of the issue: p99 of the largest stream / p99 of the smallest, at most.
const goalP99Ratio = 1.5

var (
	sizeList       = flag.String("sizes", "10000,1000000", "comma-separated stream sizes (events), each in a fresh appliance")
	targets        = flag.Int("targets", 4, "target orders whose history is looked up")
	perTarget      = flag.Int("order-events", 100, "events of each target order, spread evenly over the whole stream")
	eventsPerOrder = flag.Int("events-per-order", 10, "the other events go to (events / this) background orders, each event to one at random")
	nLookups       = flag.Int("lookups", 2000, "timed lookups of each kind per stream size")
	warmup         = flag.Int("warmup", 100, "lookups of each kind before the timed ones (discarded)")
	window         = flag.Int("window", 1000, "async publishes in flight while loading")
	syncMode       = flag.String("sync", "", "durability: empty or group-commit (the default), always, or a sync_interval such as 1s (durability \"interval\")")
	seed           = flag.Uint64("seed", 1, "seed of the event generator and of the lookups' random points")
	tmp            = flag.String("tmp", "", "parent of the temporary store dirs (default: the system temp dir)")
	catchupTimeout = flag.Duration("catchup-timeout", 20*time.Minute, "give up waiting for a processor to catch up after this long")
	cpuprofile     = flag.String("cpuprofile", "", "write a CPU profile of the lookups to PREFIX-lookups.pprof")
	out            = flag.String("out", "", "also write the markdown results to this file")
)

func main() {
	flag.Parse()
	sizes, err := benchkit.Ints("sizes", *sizeList)
	benchkit.UsageErr(err)
	benchkit.UsageIf(*targets <= 0 || *perTarget <= 0 || *eventsPerOrder <= 0 || *nLookups <= 0 || *warmup < 0 || *window <= 0 || flag.NArg() > 0)
	benchkit.UsageErr(benchkit.ApplySync(new(orderstore.Config), *syncMode))
	benchkit.Run("bench/history", func(ctx context.Context) error { return run(ctx, sizes) })
}

func run(ctx context.Context, streamSizes []int) error {
	started := time.Now()
	fmt.Println(benchkit.Machine(orderstore.NATSServerVersion))
	// An appliance per stream size, all kept running, then the lookups on all of them, interleaved.
	var ls []*loaded
	defer func() {
		for _, l := range ls {
			l.env.Close()
		}
	}()
	for _, n := range streamSizes {
		l, err := loadSize(ctx, n)
		if l != nil {
			ls = append(ls, l)
		}
		if err != nil {
			return fmt.Errorf("%s events: %w", benchkit.Num(n), err)
		}
	}
	if err := measureLookups(ctx, ls); err != nil {
		return err
	}
	var sizes []*sizeResult
	for _, l := range ls {
		l.env.Close() // again, deferred: it then does nothing
		sizes = append(sizes, l.res)
	}
	report := markdown(started, sizes)
	return benchkit.Results(report, report, *out)
}

// ---------------------------------------------------------------- output

func markdown(started time.Time, sizes []*sizeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench/history, %s: %s\n\n", started.UTC().Format("2006-01-02"), benchkit.Machine(orderstore.NATSServerVersion))
	fmt.Fprintf(&b, "Lookups of %d target orders of %d events each (spread over the whole stream), %s of each kind per stream, one at a time, the streams' appliances running side by side and their lookups interleaved, after %d discarded:\n\n",
		*targets, *perTarget, benchkit.Num(*nLookups), *warmup)
	b.WriteString("| lookup |")
	for _, s := range sizes {
		fmt.Fprintf(&b, " %s events: p50 / p99 / mean |", benchkit.Num(s.Events))
	}
	first, last := sizes[0], sizes[len(sizes)-1]
	fmt.Fprintf(&b, " p99 %s / p99 %s (goal <= %.1f) |\n|---|%s---|\n", short(last.Events), short(first.Events), goalP99Ratio, strings.Repeat("---:|", len(sizes)))
	for k := range nKinds {
		fmt.Fprintf(&b, "| %s |", kindNames[k])
		for _, s := range sizes {
			l := s.Lookups[k]
			fmt.Fprintf(&b, " %s / %s / %s |", benchkit.Ms(l.P50), benchkit.Ms(l.P99), benchkit.Ms(l.Mean))
		}
		ratio := float64(last.Lookups[k].P99) / float64(max(first.Lookups[k].P99, 1))
		fmt.Fprintf(&b, " **%.2f** %s |\n", ratio, benchkit.PassFail(ratio <= goalP99Ratio))
	}
	b.WriteString("\n")
	for _, s := range sizes {
		fmt.Fprintf(&b, "- %s events (%s background orders): loaded in %s (%s events/s acked, the appliance's processor running; %d publishes shed and sent again), processor caught up %s after the last ack; target sequences %d..%d; %s lookups checked against the published events; other processes used %s of the CPU while the lookups ran\n",
			benchkit.Num(s.Events), benchkit.Num(s.Orders), benchkit.Secs(s.Load), benchkit.Num(int(float64(s.Events)/s.Load.Seconds())), s.Retries, benchkit.Secs(s.CatchUp), s.Span[0], s.Span[1], benchkit.Num(s.Verified), s.Others)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Reproduce: `%s`\n", benchkit.Command("./bench/history"))
	return b.String()
}

// short is a stream size as 10k, 1M.
func short(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return benchkit.Num(n)
}
