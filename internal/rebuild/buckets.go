package rebuild

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/processor"
)

// Buckets is the built-in projection's Target: the shadow is a bucket (and history index) of its
// own beside the live ones, folded by the same projection code, and copied into the live ones by
// the takeover (docs/rebuild.md, "The steps", 4, and "What a reader sees").
type Buckets struct {
	JS                jetstream.JetStream
	Live, LiveHistory string // the live buckets ("" history: no index)
	// Shadow is the shadow bucket's config; ShadowHistory its history index's stream (nil: none).
	ShadowBucket  jetstream.KeyValueConfig
	ShadowHistory *jetstream.StreamConfig
	// Projection wires a projection over records and history (nil: none), as the appliance does.
	Projection func(records, history jetstream.KeyValue) *processor.Projection
	// Reads switches the appliance's reads to the shadow (orders for which live is true still read
	// from the live projection), or back to the live projection (shadow nil).
	Reads func(shadow *processor.Projection, live func(orderID string) bool)
	// Forget drops the live processor's cached records.
	Forget func()
	// Sync makes the named streams' writes durable.
	Sync func(ctx context.Context, streams ...string) error
	Log  *slog.Logger // nil discards
}

func (b *Buckets) shadowStreams() []string {
	s := []string{"KV_" + b.ShadowBucket.Bucket}
	if b.ShadowHistory != nil {
		s = append(s, b.ShadowHistory.Name)
	}
	return s
}

// Shadow makes (fresh) or opens the shadow buckets.
func (b *Buckets) Shadow(ctx context.Context, fresh bool) (processor.Handler, error) {
	if fresh {
		if err := b.Discard(ctx); err != nil {
			return nil, err
		}
		if _, err := b.JS.CreateKeyValue(ctx, b.ShadowBucket); err != nil {
			return nil, fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
		}
		if b.ShadowHistory != nil {
			if _, err := b.JS.CreateStream(ctx, *b.ShadowHistory); err != nil {
				return nil, fmt.Errorf("shadow history index %q: %w", b.ShadowHistory.Name, err)
			}
		}
		// nats makes a stream in the directory of one it skipped at start (its meta.inf lost by a
		// power cut), with the messages of its files: another fold's records.
		for _, name := range b.shadowStreams() {
			s, err := b.JS.Stream(ctx, name)
			if err == nil {
				err = s.Purge(ctx)
			}
			if err != nil {
				return nil, fmt.Errorf("shadow %q: %w", name, err)
			}
		}
	}
	kv, hkv, err := b.openShadow(ctx)
	if err != nil {
		return nil, err
	}
	return b.Projection(kv, hkv), nil
}

// openShadow opens the shadow buckets; jetstream.ErrBucketNotFound when they are gone.
func (b *Buckets) openShadow(ctx context.Context) (kv, hkv jetstream.KeyValue, err error) {
	if kv, err = b.JS.KeyValue(ctx, b.ShadowBucket.Bucket); err != nil {
		return nil, nil, fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
	}
	if b.ShadowHistory != nil {
		if hkv, err = b.JS.KeyValue(ctx, strings.TrimPrefix(b.ShadowHistory.Name, "KV_")); err != nil {
			return nil, nil, fmt.Errorf("shadow history index %q: %w", b.ShadowHistory.Name, err)
		}
	}
	return kv, hkv, nil
}

// Durable syncs the shadow's streams.
func (b *Buckets) Durable(ctx context.Context) error { return b.Sync(ctx, b.shadowStreams()...) }

// Discard deletes the shadow's streams.
func (b *Buckets) Discard(ctx context.Context) error {
	var errs []error
	for _, s := range b.shadowStreams() {
		if err := b.JS.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("shadow %q: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// recordHead is what the takeover reads of a record.
type recordHead struct {
	Events        int    `json:"events"`
	FirstSeq      uint64 `json:"first_seq"`
	HistoryChunks int    `json:"history_chunks"`
}

// Takeover copies the rebuilt orders into the live buckets, read by watchers and written pipelined
// (copier). A copy is idempotent: a takeover cut short is done again whole.
func (b *Buckets) Takeover(ctx context.Context, t *Takeover) error {
	skv, shkv, err := b.openShadow(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Not dropped before the rebuild was recorded done: lost.
		return fmt.Errorf("%w: %w", ErrShadowLost, err)
	}
	if err != nil {
		return err
	}
	lkv, err := b.JS.KeyValue(ctx, b.Live)
	if err != nil {
		return fmt.Errorf("projection bucket %q: %w", b.Live, err)
	}
	var lhkv jetstream.KeyValue
	if b.LiveHistory != "" && shkv != nil {
		if lhkv, err = b.JS.KeyValue(ctx, b.LiveHistory); err != nil {
			return fmt.Errorf("history index %q: %w", b.LiveHistory, err)
		}
	}
	// The live records' heads: which orders keep their live state (partial ones), and how many
	// history chunks each has. A record that cannot be read is replaced by the rebuilt one.
	live := map[string]recordHead{}
	var unreadable int
	if err := eachValue(ctx, lkv, func(id string, value []byte) error {
		var h recordHead
		if json.Unmarshal(value, &h) != nil {
			unreadable++
		}
		live[id] = h
		return nil
	}); err != nil {
		return fmt.Errorf("projection bucket %q: %w", b.Live, err)
	}
	log := cmp.Or(b.Log, slog.New(slog.DiscardHandler))
	if unreadable > 0 {
		log.Warn("projection rebuild: live records that cannot be read are replaced by the rebuilt ones", "unreadable", unreadable)
	}
	partialLive := func(id string) bool {
		h := live[id]
		return h.Events > 0 && h.FirstSeq < t.From && !t.ReplacePartial
	}
	keptLive := func(id string) bool { return t.Keep[id] || partialLive(id) }
	// The shadow's orders: what is copied, and what is kept.
	inShadow := map[string]bool{}
	var partial, conflicts, total uint64
	untouched := uint64(len(live)) // live orders the shadow does not hold
	if err := eachValue(ctx, skv, func(id string, _ []byte) error {
		if _, ok := live[id]; ok && !inShadow[id] { // once, were a key delivered twice
			untouched--
		}
		switch {
		case t.Keep[id]:
			conflicts++
		case partialLive(id):
			partial++
		default:
			total++
		}
		inShadow[id] = true
		return nil
	}); err != nil {
		return fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
	}
	shadow := b.Projection(skv, shkv)
	b.Reads(shadow, keptLive)
	defer b.Reads(nil, nil)
	t.Progress(0, total)
	// The history chunks first, then the records that name them (a reader of the live buckets meets
	// no record whose chunks are missing), then the old index's chunks past the new one's end.
	if lhkv != nil {
		w := newCopier(ctx, b.JS)
		err := eachValue(ctx, shkv, func(key string, value []byte) error {
			if dot := strings.LastIndexByte(key, '.'); dot <= 0 || keptLive(key[:dot]) || !inShadow[key[:dot]] {
				return nil // kept, or an order the shadow does not hold
			}
			return w.send(&nats.Msg{Subject: "$KV." + b.LiveHistory + "." + key, Data: value})
		})
		if err := errors.Join(err, w.wait()); err != nil {
			return fmt.Errorf("copying the history index into %q: %w", b.LiveHistory, err)
		}
	}
	w := newCopier(ctx, b.JS)
	var copied uint64
	err = eachValue(ctx, skv, func(id string, value []byte) error {
		if keptLive(id) {
			return nil
		}
		var h recordHead
		if err := json.Unmarshal(value, &h); err != nil {
			return fmt.Errorf("order %q: %w", id, err)
		}
		if err := w.send(&nats.Msg{Subject: "$KV." + b.Live + "." + id, Data: value}); err != nil {
			return err
		}
		if lhkv != nil {
			for n := h.HistoryChunks; n < live[id].HistoryChunks; n++ { // deleted
				del := nats.Header{"KV-Operation": {"DEL"}}
				if err := w.send(&nats.Msg{Subject: "$KV." + b.LiveHistory + "." + id + "." + strconv.Itoa(n), Header: del}); err != nil {
					return err
				}
			}
		}
		copied++
		if copied%256 == 0 {
			t.Progress(copied, total)
		}
		return nil
	})
	if err := errors.Join(err, w.wait()); err != nil {
		return fmt.Errorf("copying the records into %q: %w", b.Live, err)
	}
	t.Progress(copied, total)
	streams := []string{"KV_" + b.Live}
	if lhkv != nil {
		streams = append(streams, "KV_"+b.LiveHistory)
	}
	if err := b.Sync(ctx, streams...); err != nil {
		return fmt.Errorf("making the copy durable: %w", err)
	}
	t.Rebuilt, t.Partial, t.Conflicts, t.Untouched = copied, partial, conflicts, untouched
	b.Reads(nil, nil)
	if b.Forget != nil {
		b.Forget()
	}
	log.Info("projection rebuild: copied into the live projection", "rebuilt", t.Rebuilt, "partial_kept", t.Partial, "conflicts_kept", t.Conflicts, "untouched", untouched)
	return nil
}

// eachValue calls fn with every key of kv and its last value (deleted keys left out).
func eachValue(ctx context.Context, kv jetstream.KeyValue, fn func(key string, value []byte) error) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer orderindex.StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watcher stopped before it delivered every key")
			}
			if e == nil {
				return nil // every key delivered
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}

// copyWindow is how many of the takeover's writes are unacknowledged at
// most; copyAckWait how long one may go unanswered.
const (
	copyWindow  = 1024
	copyAckWait = 30 * time.Second
)

// copier pipelines the takeover's KV writes: published without waiting for each ack, copyWindow in
// flight at most, every ack checked. Its first failure cancels ctx, with it as the cause.
type copier struct {
	ctx      context.Context
	fail     context.CancelCauseFunc
	js       jetstream.JetStream
	inflight chan jetstream.PubAckFuture
	done     chan struct{}
}

// newCopier starts a copier and its ack collector, which wait joins: wait for every copier.
func newCopier(ctx context.Context, js jetstream.JetStream) *copier {
	c := &copier{js: js, inflight: make(chan jetstream.PubAckFuture, copyWindow), done: make(chan struct{})}
	c.ctx, c.fail = context.WithCancelCause(ctx)
	go c.collect()
	return c
}

func (c *copier) collect() {
	defer close(c.done)
	timer := time.NewTimer(copyAckWait)
	defer timer.Stop()
	for f := range c.inflight {
		if c.ctx.Err() != nil {
			continue // drain
		}
		timer.Reset(copyAckWait)
		select {
		case <-f.Ok():
		case err := <-f.Err():
			c.fail(fmt.Errorf("%s: %w", f.Msg().Subject, err))
		case <-timer.C:
			c.fail(fmt.Errorf("%s: no ack in %s", f.Msg().Subject, copyAckWait))
		case <-c.ctx.Done():
		}
	}
}

func (c *copier) send(m *nats.Msg) error {
	if err := context.Cause(c.ctx); err != nil {
		return err
	}
	f, err := c.js.PublishMsgAsync(m)
	if err != nil {
		return fmt.Errorf("%s: %w", m.Subject, err)
	}
	select {
	case c.inflight <- f:
		return nil
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
}

// wait waits for every write's ack; the first failure.
func (c *copier) wait() error {
	close(c.inflight)
	<-c.done
	err := context.Cause(c.ctx)
	c.fail(nil)
	return err
}

// highWaterScan is how many of the shadow's last writes HighWater reads.
const highWaterScan = 8192

// HighWater is the highest stream sequence among the shadow bucket's last writes.
func (b *Buckets) HighWater(ctx context.Context) (uint64, error) {
	kv, hkv, err := b.openShadow(ctx)
	if err != nil {
		return 0, err
	}
	return b.Projection(kv, hkv).HighWater(ctx, highWaterScan)
}
