package ingest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderstore/orderstore/status"

	"github.com/orderstore/orderstore/internal/durable"
)

// Committer makes what nats wrote to the store durable, in rounds (group
// commit). Every caller waiting when a round starts shares it; callers that
// arrive during a round wait for the next one, which starts as soon as this
// one ends. A lone caller therefore waits about one sync, and never a
// timer.
//
// A round is one of two kinds:
//
//   - fast, for producers' events (Sync): an fdatasync of the blocks of the
//     stream producers write to that may have grown since the round before
//     (and an fsync of its msgs/ directory when a block appeared). nats
//     writes an event to the stream's last block before it acks it, and a
//     block is never appended to once a newer one exists, so those blocks
//     hold every event acked before the round began.
//   - full, for everything else (SyncAll: declarations, nats' metadata, the
//     projection, the dead letters; and an idle store every second):
//     syncfs(2) of the store's file system, or where that does not reach
//     the disk (FUSE, other systems) an fsync of every file under
//     jetstream/. A full round serves every waiter.
//
// Lazy callers (SyncLazy: the processor, whose acks nobody waits on) wait
// for the next full round, at most lazyMax, so that they rarely cost a
// round of their own.
//
// The first failed sync is final: after it the kernel may have dropped the
// pages it could not write, so no later sync can vouch for them. Every
// waiter of that round and every later caller gets the error, and Failed
// is closed: the appliance stops, and the next start reads the store back
// from the disk.
type Committer struct {
	dir    string       // the store directory (whose file system is synced)
	full   func() error // a full round
	close  func()       // releases what full holds open
	how    string       // "syncfs" or "fsync of every file", for the log
	blocks *blockSyncer // a fast round; nil: every round is full
	reqs   chan syncReq
	stop   chan struct{}
	done   chan struct{} // closed when run returned
	fail   chan struct{} // closed after the first failed sync
	err    atomic.Pointer[error]
	fault  atomic.Pointer[error] // tests: the next rounds fail with it
	// forceFull makes the next round full (nats restarted: its recovery
	// may have rewritten what the fast round follows).
	forceFull atomic.Bool
	stats     Stats
}

// Stats are what /metrics and the dashboard show of the rounds.
type Stats struct {
	mu        sync.Mutex
	syncs     uint64
	errors    uint64
	syncHist  histogram // seconds per round
	batchHist histogram // events acknowledged per ingest batch
	acked     uint64    // events acknowledged by the ingest service
	waiting   atomic.Int64
}

// NewCommitter opens the store's syncs; streamMsgs is the msgs/ directory
// of the stream producers write to ("" makes every round full).
func NewCommitter(storeDir, streamMsgs string) (*Committer, error) {
	c := &Committer{dir: storeDir, reqs: make(chan syncReq, 1024), stop: make(chan struct{}),
		done: make(chan struct{}), fail: make(chan struct{})}
	c.stats.syncHist = newHistogram(syncBuckets)
	c.stats.batchHist = newHistogram(batchBuckets)
	full, closeFn, how, err := storeSyncer(storeDir)
	if err != nil {
		return nil, fmt.Errorf("group commit: store %q: %w", storeDir, err)
	}
	c.full, c.close, c.how = full, closeFn, how
	if streamMsgs != "" {
		c.blocks = &blockSyncer{dir: streamMsgs, open: map[uint64]*os.File{}}
	}
	go c.run()
	return c, nil
}

var (
	syncBuckets  = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
)

// errCommitterStopped is what callers get once the appliance closes.
var errCommitterStopped = errors.New("group commit: stopped")

// syncKind is what a caller needs of a round.
type syncKind int

const (
	syncFast syncKind = iota // producers' events in the stream's blocks
	syncFull                 // everything
	syncLazy                 // everything, by the next full round (at most lazyMax)
)

// syncReq is one caller waiting for a round.
type syncReq struct {
	reply chan error
	kind  syncKind
}

// lazyMax is the longest a lazy caller waits for a full round.
const lazyMax = 10 * time.Millisecond

// idleSync is the longest the store goes without a full round: what nats
// writes besides events (a reader's new consumer, consumer state) is
// durable within it even when no producer publishes.
const idleSync = time.Second

func (c *Committer) run() {
	defer close(c.done)
	defer c.close()
	defer c.blocks.closeAll()
	idle := time.NewTicker(idleSync)
	defer idle.Stop()
	lastFull := time.Now()
	var lazy []chan error
	var lazySince time.Time
	lazyTimer := time.NewTimer(time.Hour)
	lazyTimer.Stop()
	for {
		var fast, full []chan error
		wantFull := false
		add := func(r syncReq) {
			switch {
			case r.kind == syncFull || c.blocks == nil && r.kind == syncFast:
				full = append(full, r.reply)
			case r.kind == syncFast:
				fast = append(fast, r.reply)
			default:
				if len(lazy) == 0 {
					lazySince = time.Now()
					lazyTimer.Reset(lazyMax)
				}
				lazy = append(lazy, r.reply)
			}
		}
		select {
		case r := <-c.reqs:
			add(r)
		case <-lazyTimer.C:
			wantFull = len(lazy) > 0
		case <-idle.C:
			wantFull = time.Since(lastFull) >= idleSync
		case <-c.stop:
			for _, w := range lazy {
				w <- c.stoppedErr()
			}
			c.drainStopped()
			return
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
		if len(lazy) > 0 && time.Since(lazySince) >= lazyMax {
			wantFull = true
		}
		doFull := wantFull || len(full) > 0
		if !doFull && len(fast) == 0 {
			continue
		}
		t0 := time.Now()
		err := c.blocks.refresh() // before the sync: which blocks the next fast round takes
		if c.blocks.takeNeedFull() || c.forceFull.Swap(false) {
			doFull = true
		}
		if err == nil {
			if doFull {
				lastFull = t0
				err = c.full()
			} else {
				err = c.blocks.sync()
			}
		}
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
		answer := append(fast, full...)
		if doFull {
			answer = append(answer, lazy...)
			lazy = nil
			lazyTimer.Stop()
		}
		for _, w := range answer {
			w <- err
		}
		if err != nil {
			for _, w := range lazy {
				w <- err
			}
			c.drainStopped()
			return
		}
	}
}

// drainStopped answers the callers still queued after the loop ended.
func (c *Committer) drainStopped() {
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

// Sync returns once a round that began after the call made every event
// the stream acked before the call durable, or with why not.
func (c *Committer) Sync(ctx context.Context) error { return c.round(ctx, syncFast) }

// SyncAll returns once a full round that began after the call made
// everything written before it durable: a stream, consumer or bucket
// declared, the stream's metadata changed.
func (c *Committer) SyncAll(ctx context.Context) error { return c.round(ctx, syncFull) }

// SyncLazy is SyncAll for a caller nobody waits on: it waits for the next
// full round, at most lazyMax, so that it rarely costs a round of its own.
func (c *Committer) SyncLazy(ctx context.Context) error { return c.round(ctx, syncLazy) }

func (c *Committer) round(ctx context.Context, kind syncKind) error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	w := make(chan error, 1)
	select {
	case c.reqs <- syncReq{w, kind}:
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

func (c *Committer) stoppedErr() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return errCommitterStopped
}

// Failed is closed after the first failed sync.
func (c *Committer) Failed() <-chan struct{} { return c.fail }

// Err is the failed sync's error, or nil.
func (c *Committer) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// ForceFull makes the next round full.
func (c *Committer) ForceFull() { c.forceFull.Store(true) }

// Close stops the loop once the round running now has ended, waiting at
// most 30 s for a sync that hangs (its waiters get the error then).
func (c *Committer) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
	}
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

// Status is the committer's figures for the admin listener.
func (c *Committer) Status() *status.IngestStats {
	s := &c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	h := func(x *histogram) status.Histogram {
		return status.Histogram{Count: x.n, Sum: x.sum, Buckets: x.cumulative()}
	}
	return &status.IngestStats{Sync: c.how, Syncs: s.syncs, SyncErrors: s.errors, Acked: s.acked, Waiting: s.waiting.Load(),
		SyncP50Seconds: s.syncHist.quantile(0.5), SyncP99Seconds: s.syncHist.quantile(0.99),
		SyncSeconds: h(&s.syncHist), BatchEvents: h(&s.batchHist), Stages: StageReport()}
}

// blockSyncer is the fast round: the stream's blocks that may have grown
// since the round before.
type blockSyncer struct {
	dir     string
	last    uint64 // the highest block index when the round before began
	cur     uint64 // the highest block index when this round began
	dirSeen uint64 // the highest block index whose directory entry is synced
	dirSync bool   // the directory changed otherwise: fsync it
	dirStat os.FileInfo
	open    map[uint64]*os.File
	// needFull is set when the fast round cannot vouch for what changed:
	// msgs/ itself was replaced (a purge), or nats restarted.
	needFull bool
}

// refresh reads which blocks exist as a round begins. Every event acked
// before then is in a block at or after the one that was last when the
// round before began: nats appends only to its last block.
func (b *blockSyncer) refresh() error {
	if b == nil {
		return nil
	}
	entries, err := os.ReadDir(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the stream is being declared again: the full round covers it
	}
	if err != nil {
		return err
	}
	if st, err := os.Stat(b.dir); err == nil {
		if b.dirStat != nil && !os.SameFile(b.dirStat, st) {
			b.needFull = true // a purge renames a new msgs/ into place
		}
		b.dirStat = st
	}
	var top uint64
	for _, e := range entries {
		if idx, ok := blockIndex(e.Name()); ok && idx > top {
			top = idx
		}
	}
	// The last block may be gone (nats removes an empty last block when
	// it recovers, and the one before is last again): start from the
	// lower of the two, and sync the directory when the last block
	// changed either way.
	b.last = min(b.cur, top)
	if top != b.cur {
		b.dirSync = true
	}
	if top < b.dirSeen {
		b.dirSeen = top // a block of that index made again needs its entry synced
	}
	b.cur = top
	return nil
}

// takeNeedFull reports (once) that the next round must be full.
func (b *blockSyncer) takeNeedFull() bool {
	if b == nil || !b.needFull {
		return false
	}
	b.needFull = false
	return true
}

// sync fdatasyncs the blocks from the one last at the round before to the
// last one now, and the directory when a block appeared since its last
// fsync. Blocks before those are closed.
func (b *blockSyncer) sync() error {
	syncDir := b.cur > b.dirSeen || b.dirSync
	for idx := max(b.last, 1); idx <= b.cur; idx++ {
		path := filepath.Join(b.dir, fmt.Sprintf("%d.blk", idx))
		st, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			// Removed by the stream's limits: nothing to keep, and no
			// descriptor holding its disk space.
			if f := b.open[idx]; f != nil {
				f.Close()
				delete(b.open, idx)
			}
			continue
		}
		if err != nil {
			return err
		}
		f := b.open[idx]
		if f != nil {
			// nats compacts a block by writing a new file over it: the
			// descriptor must be the file the name holds now.
			if fst, err := f.Stat(); err != nil || !os.SameFile(fst, st) {
				f.Close()
				f = nil
				syncDir = true
			}
		}
		if f == nil {
			if f, err = os.Open(path); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return err
			}
			b.open[idx] = f
		}
		if err := fdatasync(f); err != nil {
			return err
		}
	}
	if syncDir {
		if err := durable.SyncPath(b.dir); err != nil {
			return err
		}
		b.dirSeen, b.dirSync = b.cur, false
	}
	for idx, f := range b.open {
		if idx != b.cur {
			f.Close()
			delete(b.open, idx)
		}
	}
	return nil
}

func (b *blockSyncer) closeAll() {
	if b == nil {
		return
	}
	for idx, f := range b.open {
		f.Close()
		delete(b.open, idx)
	}
}

// blockIndex parses nats' block file name "<index>.blk".
func blockIndex(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, ".blk")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Stats are the figures of the committer's rounds, which the ingest
// service adds its batches and acks to (Config.Stats).
func (c *Committer) Stats() *Stats { return &c.stats }

// How says how a full round syncs ("syncfs", or "fsync of every file").
func (c *Committer) How() string { return c.how }

// InjectFault makes every sync fail with err from now on, as a disk that
// reports a write-back error would (for tests).
func (c *Committer) InjectFault(err error) { c.fault.Store(&err) }
