package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orderstore/orderstore/processor"
)

// timedHandler wraps the projection to measure, for -handler-stats, how
// long the processor spends inside the handler: the latency of one
// HandleOrder (one KV read-modify-write) and how many run at once on
// average. It changes nothing else.
type timedHandler struct {
	inner processor.BatchHandler

	mu     sync.Mutex
	lat    []time.Duration
	events int
	busy   time.Duration
}

func (h *timedHandler) Handle(ctx context.Context, ev processor.Event) error {
	return h.HandleOrder(ctx, ev.OrderID, []processor.Event{ev})[0]
}

func (h *timedHandler) HandleOrder(ctx context.Context, id string, evs []processor.Event) []error {
	t := time.Now()
	errs := h.inner.HandleOrder(ctx, id, evs)
	d := time.Since(t)
	h.mu.Lock()
	h.lat = append(h.lat, d)
	h.events += len(evs)
	h.busy += d
	h.mu.Unlock()
	return errs
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
	return fmt.Sprintf("handler: %s HandleOrder calls for %s events (%.2f events/call); latency mean %s, p50 %s, p90 %s, p99 %s, max %s; average calls in flight %.1f",
		num(len(l)), num(h.events), float64(h.events)/float64(len(l)), (h.busy / time.Duration(len(l))).Round(time.Microsecond),
		q(0.5).Round(time.Microsecond), q(0.9).Round(time.Microsecond), q(0.99).Round(time.Microsecond), l[len(l)-1].Round(time.Microsecond),
		h.busy.Seconds()/wall.Seconds())
}
