package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// foldVariant is one way of folding the stream in the analysis: events
// per Fetch, and whether the next batch is fetched while this one is
// applied.
type foldVariant struct {
	Batch    int
	Prefetch bool
}

func (v foldVariant) String() string {
	if v.Prefetch {
		return fmt.Sprintf("%d, next batch fetched while applying", v.Batch)
	}
	return fmt.Sprintf("%d, fetch then apply", v.Batch)
}

// parseVariants reads -analyse: "2000,8000p" (p: prefetch).
func parseVariants(s string) ([]foldVariant, error) {
	var out []foldVariant
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v := foldVariant{Prefetch: strings.HasSuffix(f, "p")}
		n, err := strconv.Atoi(strings.TrimSuffix(f, "p"))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-analyse: %q is not a batch size (a positive number, with p for prefetch)", f)
		}
		v.Batch = n
		out = append(out, v)
	}
	return out, nil
}

// foldResult is one variant's fold of the whole stream.
type foldResult struct {
	foldVariant
	N      int
	Writes int // orders written: one record per order per batch
	Dur    time.Duration
	// Fetch: time spent waiting for batches (all of the fetch without
	// prefetch, what the prefetch did not hide with it); Apply: time in
	// Projection.HandleBatch (its reads of records not cached and its
	// pipelined KV writes, each batch's acks awaited).
	Fetch, Apply time.Duration
	CPU          time.Duration
	Others       string
}

func (r foldResult) rate() float64 { return rate(r.N, r.Dur) }

// foldBatch is one fetched batch, grouped by order as the rebuild groups
// it.
type foldBatch struct {
	orders [][]processor.Event
	n      int
	last   uint64
	err    error
}

// fold folds the whole stream into a scratch bucket and history index
// made like the shadow's, outside the appliance, the way the rebuild
// folds (internal/rebuild's step: an ordered consumer, Fetch, events
// grouped by order, Projection.HandleBatch), timing the fetches and the
// applies apart. It is the rebuild's fold without its checkpoints,
// dead-letter and replay handling, and takeover. Its connection is a
// client's (a bench cannot have the appliance's own identity): its API
// requests and acks cross service imports into the stream's account,
// which costs CPU the rebuild does not pay, so the variants compare with
// each other, not with the rebuild.
func fold(ctx context.Context, o options, e *env, v foldVariant) (foldResult, error) {
	r := foldResult{foldVariant: v}
	js, err := e.connect(false, "bench-rebuild-fold")
	if err != nil {
		return r, err
	}
	spec := e.cfg.DeclareSpec()
	kvc := *spec.Projection
	kvc.Bucket, kvc.Description = "BENCH_FOLD", "bench/rebuild's scratch fold"
	_ = js.DeleteKeyValue(ctx, kvc.Bucket)
	kv, err := js.CreateKeyValue(ctx, kvc)
	if err != nil {
		return r, fmt.Errorf("scratch bucket: %w", err)
	}
	defer func() { _ = js.DeleteKeyValue(context.WithoutCancel(ctx), kvc.Bucket) }()
	proj := processor.NewProjection(js, kv)
	if spec.History != nil {
		h := *spec.History
		hb := kvc.Bucket + "_HISTORY"
		h.Name, h.Subjects, h.Description = "KV_"+hb, []string{"$KV." + hb + ".>"}, "bench/rebuild's scratch history index"
		_ = js.DeleteStream(ctx, h.Name)
		if _, err := js.CreateStream(ctx, h); err != nil {
			return r, fmt.Errorf("scratch history index: %w", err)
		}
		defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), h.Name) }()
		hkv, err := js.KeyValue(ctx, hb)
		if err != nil {
			return r, err
		}
		proj.SetHistory(hkv)
	}
	last, err := e.lastSeq(ctx, js)
	if err != nil {
		return r, err
	}
	cons, err := js.OrderedConsumer(ctx, e.cfg.Stream.Name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return r, err
	}
	fetch := func(pos uint64) foldBatch {
		b, err := cons.Fetch(v.Batch, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			return foldBatch{err: err}
		}
		out := foldBatch{last: pos}
		index := map[string]int{}
		for m := range b.Messages() {
			out.n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			out.last = seq
			ev, err := processor.EventOf(m.Subject(), m.Data(), m.Headers(), seq, md.Timestamp, pos)
			if err != nil {
				continue
			}
			i, ok := index[ev.OrderID]
			if !ok {
				i = len(out.orders)
				index[ev.OrderID] = i
				out.orders = append(out.orders, nil)
			}
			out.orders[i] = append(out.orders[i], ev)
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			out.err = err
		}
		return out
	}
	var batches chan foldBatch
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if v.Prefetch {
		batches = make(chan foldBatch, 1)
		go func() {
			defer close(batches)
			for pos := uint64(0); pos < last && fctx.Err() == nil; {
				b := fetch(pos)
				select {
				case batches <- b:
				case <-fctx.Done():
					return
				}
				if b.err != nil {
					return
				}
				pos = b.last
			}
		}()
	}
	stopProf, err := startProfile(o, fmt.Sprintf("fold-%d%s", v.Batch, map[bool]string{true: "p", false: ""}[v.Prefetch]))
	if err != nil {
		return r, err
	}
	defer stopProf()
	t0, c0, m0 := time.Now(), cpuTime(), startOthers()
	for pos := uint64(0); pos < last; {
		t := time.Now()
		var b foldBatch
		if v.Prefetch {
			var ok bool
			if b, ok = <-batches; !ok {
				return r, fmt.Errorf("the prefetch stopped at %d of %d", pos, last)
			}
		} else {
			b = fetch(pos)
		}
		r.Fetch += time.Since(t)
		if b.err != nil {
			return r, b.err
		}
		t = time.Now()
		for i, errs := range proj.HandleBatch(ctx, b.orders) {
			for _, err := range errs {
				if err != nil && !errors.Is(err, processor.ErrDuplicate) {
					return r, fmt.Errorf("order %s: %w", b.orders[i][0].OrderID, err)
				}
			}
		}
		r.Apply += time.Since(t)
		r.N += b.n
		r.Writes += len(b.orders)
		pos = b.last
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
	}
	r.Dur, r.CPU, r.Others = time.Since(t0), cpuTime()-c0, m0.share()
	return r, nil
}
