package ingest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orderstore/orderstore/status"
)

// Committer follows group commit, which runs inside the embedded nats-server's file store
// (docs/durability.md, "How group commit works"). It keeps the rounds' figures (/metrics, the
// dashboard) and the first failed sync, which is final (docs/durability.md, "A failed sync is
// final"): Failed is closed, and the appliance stops.
type Committer struct {
	stream string // the events stream: Acked counts its acks
	fail   chan struct{}

	mu        sync.Mutex // guards the rest
	err       error      // the first failed sync's
	syncs     uint64
	errors    uint64
	syncHist  histogram // seconds per round
	batchHist histogram // acks released per round
	acked     uint64    // the events stream's acks released after a round
}

// NewCommitter returns a Committer for embedded.Config's GroupCommitRound
// (Round) and GroupCommitFailed (Fail); stream is the events stream.
func NewCommitter(stream string) *Committer {
	return &Committer{stream: stream, fail: make(chan struct{}),
		syncHist: newHistogram(syncBuckets), batchHist: newHistogram(batchBuckets)}
}

var (
	syncBuckets  = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
)

// Round records one round of any stream or bucket: the acks it released and its sync's time.
func (c *Committer) Round(stream string, acks int, sync time.Duration) {
	c.mu.Lock()
	c.syncs++
	c.syncHist.observe(sync.Seconds())
	if acks > 0 {
		c.batchHist.observe(float64(acks))
		if stream == c.stream {
			c.acked += uint64(acks)
		}
	}
	c.mu.Unlock()
}

// Fail records a stream's failed sync; the first one closes Failed.
func (c *Committer) Fail(stream string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errors++
	if c.err == nil {
		c.err = fmt.Errorf("group commit: the sync of stream %s failed, so its store refuses writes: %w", stream, err)
		close(c.fail)
	}
}

// Failed is closed after the first failed sync.
func (c *Committer) Failed() <-chan struct{} { return c.fail }

// Err is the first failed sync's error, or nil.
func (c *Committer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// histogram is a cumulative Prometheus-style histogram.
type histogram struct {
	bounds []float64
	counts []uint64 // cumulative: the observations at most each bound
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	for i := len(h.bounds) - 1; i >= 0 && v <= h.bounds[i]; i-- {
		h.counts[i]++
	}
	h.sum += v
	h.n++
}

// quantile estimates the q-quantile from the buckets (the bucket's upper bound), for the dashboard.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	target := uint64(q*float64(h.n) + 0.5)
	if i := slices.IndexFunc(h.counts, func(c uint64) bool { return c >= target }); i >= 0 {
		return h.bounds[i]
	}
	return h.bounds[len(h.bounds)-1]
}

// Status is the rounds' figures for the admin listener.
func (c *Committer) Status() *status.IngestStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := func(x *histogram) status.Histogram {
		st := status.Histogram{Count: x.n, Sum: x.sum, Buckets: map[float64]uint64{}}
		for i, b := range x.bounds {
			st.Buckets[b] = x.counts[i]
		}
		return st
	}
	return &status.IngestStats{Sync: "fdatasync in nats-server's file store", Syncs: c.syncs, SyncErrors: c.errors, Acked: c.acked,
		SyncP50Seconds: c.syncHist.quantile(0.5), SyncP99Seconds: c.syncHist.quantile(0.99),
		SyncSeconds: h(&c.syncHist), BatchEvents: h(&c.batchHist)}
}
