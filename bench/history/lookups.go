package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

// The lookups measured, in the order they run for each picked order.
const (
	kindHistory  = iota // OrderEvents(id, 0, perTarget): the whole history in one page
	kindAsOfSeq         // OrderAsOf(id, {Seq: a random point of its lifetime})
	kindAsOfTime        // OrderAsOf(id, {Time: a random point of its lifetime})
	nKinds
)

var kindNames = [nKinds]string{"history (OrderEvents, all its events)", "as-of by sequence (OrderAsOf{Seq})", "as-of by time (OrderAsOf{Time})"}

// latencies summarises one kind's lookups.
type latencies struct {
	P50, P99, Mean, Max time.Duration
}

func summarise(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	s := slices.Sorted(slices.Values(ds))
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return latencies{P50: benchkit.Quantile(s, 0.50), P99: benchkit.Quantile(s, 0.99), Mean: sum / time.Duration(len(s)), Max: s[len(s)-1]}
}

// sizeResult is one stream size's run.
type sizeResult struct {
	Events   int
	Orders   int // background orders
	Load     time.Duration
	Retries  int           // publishes sent again (the appliance shed them: 429)
	CatchUp  time.Duration // from the last publish ack until the processor had nothing pending
	Lookups  [nKinds]latencies
	Span     [2]uint64 // the target orders' first and last sequence (over all targets)
	Verified int       // lookups whose result was checked against the published events
	Others   string    // other processes' CPU share while the lookups ran
}

// target is what the benchmark knows of a target order: its events'
// sequences (from the publish acks) and times (from its history).
type target struct {
	id    string
	seqs  []uint64
	times []time.Time
}

// loaded is a stream size's appliance, loaded and caught up, with what
// the benchmark knows of its target orders.
type loaded struct {
	res     *sizeResult
	env     *benchkit.Env
	targets []target
}

// loadSize starts a fresh appliance (-sync; processor on, as `orderstore run`), publishes the
// workload of n events over TCP, waits until the processor has applied all of them, and checks the
// target orders' histories. The caller closes l.env.
func loadSize(ctx context.Context, n int) (*loaded, error) {
	res := &sizeResult{Events: n}
	w, err := newWorkload(*seed, n, *targets, *perTarget, *eventsPerOrder)
	if err != nil {
		return nil, err
	}
	res.Orders = len(w.Count)
	benchkit.Logf("=== %s events: %d target orders of %d events, %s background orders", benchkit.Num(n), *targets, *perTarget, benchkit.Num(res.Orders))
	e, err := benchkit.NewEnv(*tmp, "orderstore-bench-history-", *syncMode, n)
	if err != nil {
		return nil, err
	}
	e.Cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l := &loaded{res: res, env: e}
	if err := e.Start(ctx, true); err != nil {
		return l, err
	}
	pjs, err := e.Publisher(true, "bench-history-publisher", *window)
	if err != nil {
		return l, err
	}
	benchkit.Logf("   publishing (async, window %d, TCP) with the appliance's processor running", *window)
	seqs, retries, loadDur, err := publish(ctx, pjs, w, *window)
	if err != nil {
		return l, err
	}
	res.Load, res.Retries = loadDur, retries
	benchkit.Logf("   published %s in %s (%s events/s, %d sent again); waiting for the processor", benchkit.Num(n), benchkit.Secs(loadDur), benchkit.Num(int(float64(n)/loadDur.Seconds())), retries)
	t0 := time.Now()
	st, err := e.CaughtUp(ctx, uint64(n), *catchupTimeout)
	if err != nil {
		return l, err
	}
	if st.Processed != uint64(n) {
		return l, fmt.Errorf("processor: %d processed, %d dead-lettered, %d duplicates of %d events", st.Processed, st.DeadLettered, st.Duplicates, n)
	}
	res.CatchUp = time.Since(t0)
	benchkit.Logf("   caught up %s after the last ack", benchkit.Secs(res.CatchUp))
	// The processor refreshes its view of the ack floor every second: let
	// it see the final floor, as it would in a running appliance.
	if err := benchkit.Sleep(ctx, 2*time.Second); err != nil {
		return l, err
	}

	// The targets went through the live processor: their history lists just their published events.
	l.targets = make([]target, *targets)
	res.Span = [2]uint64{^uint64(0), 0}
	for t := range l.targets {
		tg := &l.targets[t]
		tg.id, tg.seqs = targetID(t), seqs[t]
		page, err := e.App.OrderEvents(ctx, tg.id, 0, *perTarget)
		if err != nil {
			return l, fmt.Errorf("history of %s: %w", tg.id, err)
		}
		if err := checkHistory(page, tg.seqs); err != nil {
			return l, err
		}
		for _, ev := range page.Events {
			tg.times = append(tg.times, ev.Time)
		}
		res.Span = [2]uint64{min(res.Span[0], tg.seqs[0]), max(res.Span[1], tg.seqs[len(tg.seqs)-1])}
	}
	return l, nil
}

// measureLookups times the lookups on every loaded appliance, one at a time, interleaved: each
// round picks a target order of each size in turn (the first size rotating) and runs each kind on
// it, so that drift on the machine (other processes, the page cache) does not favour one size.
func measureLookups(ctx context.Context, ls []*loaded) error {
	stopProf, err := benchkit.StepProfile(*cpuprofile, "lookups")
	if err != nil {
		return err
	}
	defer stopProf()
	rng := rand.New(rand.NewPCG(*seed, 0x100c))
	lat := make([][nKinds][]time.Duration, len(ls))
	others := benchkit.StartOthers()
	benchkit.Logf("=== %d lookups of each kind per stream size (after %d discarded), one at a time, sizes interleaved", *nLookups, *warmup)
	for i := range *warmup + *nLookups {
		if i%500 == 0 && i > 0 {
			benchkit.Logf("   round %d of %d", i, *warmup+*nLookups)
		}
		for j := range ls {
			li := (i + j) % len(ls)
			l := ls[li]
			tg := &l.targets[rng.IntN(len(l.targets))]
			for k := range nKinds {
				d, err := lookup(ctx, l.env.App, tg, k, rng)
				if err != nil {
					return fmt.Errorf("%s events: %s of %s: %w", benchkit.Num(l.res.Events), kindNames[k], tg.id, err)
				}
				if i >= *warmup {
					lat[li][k] = append(lat[li][k], d)
					l.res.Verified++
				}
			}
		}
	}
	stopProf()
	share := others.Share()
	for li, l := range ls {
		l.res.Others = share
		for k := range nKinds {
			l.res.Lookups[k] = summarise(lat[li][k])
			x := l.res.Lookups[k]
			benchkit.Logf("   %9s events: %-36s p50 %s  p99 %s  mean %s  max %s", benchkit.Num(l.res.Events), kindNames[k], benchkit.Ms(x.P50), benchkit.Ms(x.P99), benchkit.Ms(x.Mean), benchkit.Ms(x.Max))
		}
	}
	return nil
}

// lookup times one lookup of kind k and checks its result against what was published.
func lookup(ctx context.Context, a *orderstore.Appliance, tg *target, k int, rng *rand.Rand) (time.Duration, error) {
	first, last := tg.seqs[0], tg.seqs[len(tg.seqs)-1]
	var point orderstore.AsOf
	switch k {
	case kindHistory:
		t0 := time.Now()
		page, err := a.OrderEvents(ctx, tg.id, 0, len(tg.seqs))
		d := time.Since(t0)
		if err != nil {
			return d, err
		}
		return d, checkHistory(page, tg.seqs)
	case kindAsOfSeq:
		point.Seq = first + rng.Uint64N(last-first+1)
	default:
		t1, t2 := tg.times[0], tg.times[len(tg.times)-1]
		point.Time = t1.Add(time.Duration(rng.Int64N(int64(t2.Sub(t1)) + 1)))
	}
	t0 := time.Now()
	st, err := a.OrderAsOf(ctx, tg.id, point)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if k == kindAsOfSeq {
		want := sort.Search(len(tg.seqs), func(i int) bool { return tg.seqs[i] > point.Seq })
		if st.Folded != want || st.Last != tg.seqs[want-1] || !st.Complete || st.Order.Events != want {
			return d, fmt.Errorf("as of sequence %d: folded %d (last %d, complete %v), want %d (last %d)", point.Seq, st.Folded, st.Last, st.Complete, want, tg.seqs[want-1])
		}
		return d, nil
	}
	want := sort.Search(len(tg.times), func(i int) bool { return tg.times[i].After(point.Time) })
	if st.Folded != want || !st.Complete || st.Order.Events != want {
		return d, fmt.Errorf("as of %s: folded %d (complete %v), want %d", point.Time.Format(time.RFC3339Nano), st.Folded, st.Complete, want)
	}
	return d, nil
}

// checkHistory checks a history page against the published sequences.
func checkHistory(page orderstore.OrderHistory, seqs []uint64) error {
	if page.Total != len(seqs) || page.Unindexed != 0 || len(page.Events) != len(seqs) || page.Next != 0 {
		return fmt.Errorf("history of %s: total %d, unindexed %d, %d events, next %d; want %d events",
			page.OrderID, page.Total, page.Unindexed, len(page.Events), page.Next, len(seqs))
	}
	for i, ev := range page.Events {
		if !ev.Retained || ev.Replaced || ev.Sequence != seqs[i] || ev.Position != i {
			return fmt.Errorf("history of %s: event %d is sequence %d (retained %v, replaced %v), want %d",
				page.OrderID, i, ev.Sequence, ev.Retained, ev.Replaced, seqs[i])
		}
	}
	return nil
}
