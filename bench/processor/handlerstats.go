package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderstore/orderstore/processor"
)

// timedHandler wraps the projection to measure, for -handler-stats, how
// long the processor spends inside the handler: the latency of each
// HandleBatch call (one batch's loads and KV writes) and how many are in
// flight on average (at most the processor's partitions). It changes
// nothing else: it forwards both methods.
type timedHandler struct {
	inner processor.BatchHandler

	mu     sync.Mutex
	lat    []time.Duration
	orders int
	events int
	busy   time.Duration
}

func (h *timedHandler) Handle(ctx context.Context, ev processor.Event) error {
	return h.inner.Handle(ctx, ev)
}

// Applied forwards processor.AppliedChecker, so wrapping changes nothing.
func (h *timedHandler) Applied(ctx context.Context, ev processor.Event) (bool, error) {
	if c, ok := h.inner.(processor.AppliedChecker); ok {
		return c.Applied(ctx, ev)
	}
	return false, nil
}

func (h *timedHandler) HandleBatch(ctx context.Context, orders [][]processor.Event) [][]error {
	t := time.Now()
	res := h.inner.HandleBatch(ctx, orders)
	d := time.Since(t)
	n := 0
	for _, evs := range orders {
		n += len(evs)
	}
	h.mu.Lock()
	h.lat = append(h.lat, d)
	h.orders += len(orders)
	h.events += n
	h.busy += d
	h.mu.Unlock()
	return res
}

// report summarises the calls made during wall.
func (h *timedHandler) report(wall time.Duration) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lat) == 0 {
		return "handler: no calls"
	}
	l := slices.Clone(h.lat)
	slices.Sort(l)
	q := func(p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
	return fmt.Sprintf("handler: %s HandleBatch calls, %.0f orders and %.0f events per call; latency mean %s, p50 %s, p90 %s, p99 %s, max %s; on average %.2f calls in flight",
		num(len(l)), float64(h.orders)/float64(len(l)), float64(h.events)/float64(len(l)), (h.busy / time.Duration(len(l))).Round(time.Microsecond),
		q(0.5).Round(time.Microsecond), q(0.9).Round(time.Microsecond), q(0.99).Round(time.Microsecond), l[len(l)-1].Round(time.Microsecond),
		h.busy.Seconds()/wall.Seconds())
}

// countingHandler counts the processor's "consume" warnings (its
// ConsumeErrHandler: e.g. a missed heartbeat, when the client stalled) and
// passes every record on.
// It also keeps the attributes of the "processor running" record (batch,
// partitions, ...), which it sees whatever the level: Enabled lets Info
// through and Handle drops what the inner handler would not print.
type countingHandler struct {
	slog.Handler
	consumeErrs *atomic.Int64
	started     *sync.Map
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "consume":
		h.consumeErrs.Add(1)
	case "processor running":
		r.Attrs(func(a slog.Attr) bool {
			h.started.Store(a.Key, a.Value.String())
			return true
		})
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.consumeErrs, h.started}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.consumeErrs, h.started}
}
