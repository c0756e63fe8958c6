package orderstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderstore/orderstore/admin"
)

// committer makes what nats wrote to the store durable with one sync of the
// store's file system per round (group commit). Every caller waiting when a
// round starts shares it; callers that arrive during a round wait for the
// next one, which starts as soon as this one ends. A lone caller therefore
// waits about one sync, and never a timer.
//
// The first failed sync is final: after it the kernel may have dropped the
// pages it could not write, so no later sync can vouch for them. Every
// waiter of that round and every later caller gets the error, and Failed
// is closed: the appliance stops, and the next start reads the store back
// from the disk.
type committer struct {
	dir   string       // the store directory (whose file system is synced)
	sync  func() error // one round
	close func()       // releases what sync holds open
	how   string       // "syncfs" or "fsync of every file", for the log
	reqs  chan syncReq
	stop  chan struct{}
	done  chan struct{} // closed when run returned
	fail  chan struct{} // closed after the first failed sync
	err   atomic.Pointer[error]
	fault atomic.Pointer[error] // tests: the next rounds fail with it
	stats commitStats
}

// commitStats are what /metrics and the dashboard show of the rounds.
type commitStats struct {
	mu        sync.Mutex
	syncs     uint64
	errors    uint64
	syncHist  histogram // seconds per round
	batchHist histogram // events acknowledged per ingest batch
	acked     uint64    // events acknowledged by the ingest service
	waiting   atomic.Int64
}

// newCommitter opens the store's sync: syncfs(2) of its file system where
// that reaches the disk, else an fsync of every file and directory under
// jetstream/ (FUSE file systems, and systems without syncfs).
func newCommitter(storeDir string) (*committer, error) {
	c := &committer{dir: storeDir, reqs: make(chan syncReq, 1024), stop: make(chan struct{}),
		done: make(chan struct{}), fail: make(chan struct{})}
	c.stats.syncHist = newHistogram(syncBuckets)
	c.stats.batchHist = newHistogram(batchBuckets)
	sync, closeFn, how, err := storeSyncer(storeDir)
	if err != nil {
		return nil, fmt.Errorf("group commit: store %q: %w", storeDir, err)
	}
	c.sync, c.close, c.how = sync, closeFn, how
	go c.run()
	return c, nil
}

var (
	syncBuckets  = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
)

// errCommitterStopped is what callers get once the appliance closes.
var errCommitterStopped = errors.New("group commit: stopped")

// syncReq is one caller waiting for a round. A lazy caller (the
// processor, whose acks nobody waits on) does not start a round by itself
// before lazyDelay: it rides on the next round a producer's ack needs.
type syncReq struct {
	reply chan error
	lazy  bool
}

// lazyDelay is how long a lazy caller lets a round wait for an eager one.
const lazyDelay = 2 * time.Millisecond

// idleSync is the longest the store goes without a round: what nats
// writes besides events (a reader's new consumer, consumer state) is
// durable within it even when no producer publishes.
const idleSync = time.Second

func (c *committer) run() {
	defer close(c.done)
	defer c.close()
	var waiters []chan error
	idle := time.NewTicker(idleSync)
	defer idle.Stop()
	last := time.Now()
	for {
		waiters = waiters[:0]
		eager := false
		add := func(r syncReq) {
			waiters = append(waiters, r.reply)
			eager = eager || !r.lazy
		}
		select {
		case r := <-c.reqs:
			add(r)
		case <-idle.C:
			if time.Since(last) < idleSync {
				continue
			}
			eager = true // a round of its own, now
		case <-c.stop:
			c.drainStopped()
			return
		}
		if !eager {
			t := time.NewTimer(lazyDelay)
		wait:
			for !eager {
				select {
				case r := <-c.reqs:
					add(r)
				case <-t.C:
					break wait
				case <-c.stop:
					break wait
				}
			}
			t.Stop()
		}
	more:
		for {
			select {
			case r := <-c.reqs:
				add(r)
			default:
				break more
			}
		}
		t0 := time.Now()
		last = t0
		err := c.sync()
		if f := c.fault.Load(); f != nil {
			err = *f
		}
		d := time.Since(t0)
		c.stats.mu.Lock()
		c.stats.syncs++
		c.stats.syncHist.observe(d.Seconds())
		if err != nil {
			c.stats.errors++
		}
		c.stats.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("group commit: %s of the store %q failed, so events stored since the last sync may not be on disk: %w", c.how, c.dir, err)
			c.err.Store(&err)
			close(c.fail)
		}
		for _, w := range waiters {
			w <- err
		}
		if err != nil {
			c.drainStopped()
			return
		}
	}
}

// drainStopped answers the callers still queued after the loop ended.
func (c *committer) drainStopped() {
	err := errCommitterStopped
	if p := c.err.Load(); p != nil {
		err = *p
	}
	for {
		select {
		case r := <-c.reqs:
			r.reply <- err
		default:
			return
		}
	}
}

// Sync returns once a sync that began after the call made everything
// written before it durable, or with why not.
func (c *committer) Sync(ctx context.Context) error { return c.sync1(ctx, false) }

// SyncLazy is Sync for a caller nobody waits on: its round may wait up to
// lazyDelay for a producer's, so that both share one sync.
func (c *committer) SyncLazy(ctx context.Context) error { return c.sync1(ctx, true) }

func (c *committer) sync1(ctx context.Context, lazy bool) error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	w := make(chan error, 1)
	select {
	case c.reqs <- syncReq{w, lazy}:
	case <-c.done:
		return c.stoppedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-w:
		return err
	case <-c.done:
		select { // answered just before the loop ended?
		case err := <-w:
			return err
		default:
		}
		return c.stoppedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *committer) stoppedErr() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return errCommitterStopped
}

// Failed is closed after the first failed sync.
func (c *committer) Failed() <-chan struct{} { return c.fail }

// Err is the failed sync's error, or nil.
func (c *committer) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the loop once the round running now has ended.
func (c *committer) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// fsyncTree fsyncs every regular file and directory under root, children
// before their directory: what syncfs does where it is not available.
func fsyncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked (a deleted block, a temp file renamed)
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return fsyncPath(path)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := fsyncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

func fsyncPath(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// histogram is a cumulative Prometheus-style histogram.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

// cumulative returns the bucket counts as Prometheus wants them.
func (h *histogram) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(h.bounds))
	var acc uint64
	for i, b := range h.bounds {
		acc += h.counts[i]
		m[b] = acc
	}
	return m
}

// quantile estimates the q-quantile from the buckets (the bucket's upper
// bound), for the dashboard.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	target := uint64(q*float64(h.n) + 0.5)
	var acc uint64
	for i, b := range h.bounds {
		acc += h.counts[i]
		if acc >= target {
			return b
		}
	}
	return h.bounds[len(h.bounds)-1]
}

// ingestStats are the committer's figures for the admin listener.
func (c *committer) ingestStats() *admin.IngestStats {
	s := &c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	h := func(x *histogram) admin.Histogram {
		return admin.Histogram{Count: x.n, Sum: x.sum, Buckets: x.cumulative()}
	}
	return &admin.IngestStats{Sync: c.how, Syncs: s.syncs, SyncErrors: s.errors, Acked: s.acked, Waiting: s.waiting.Load(),
		SyncP50Seconds: s.syncHist.quantile(0.5), SyncP99Seconds: s.syncHist.quantile(0.99),
		SyncSeconds: h(&s.syncHist), BatchEvents: h(&s.batchHist)}
}

// syncMetadata makes a stream or consumer change durable with group commit
// (nats rewrites meta.inf and o.dat without fsync when it does not sync
// every write); a no-op in the other modes.
func (a *Appliance) syncMetadata(ctx context.Context) error {
	if a.commit == nil {
		return nil
	}
	return a.commit.Sync(ctx)
}
