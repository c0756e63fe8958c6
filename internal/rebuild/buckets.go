package rebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// Buckets is the built-in projection's Target. The shadow is a bucket
// (and history index) of its own beside the live ones, folded by the same
// projection code. The takeover copies each rebuilt order's record and
// history chunks into the live buckets, with the live processor paused
// and the appliance's reads served from the shadow meanwhile: a reader
// sees the old projection until the copy begins and the new one from
// then on, never a mix.
type Buckets struct {
	JS                jetstream.JetStream
	Live, LiveHistory string // the live buckets ("" history: no index)
	// Shadow is the shadow bucket's config; ShadowHistory its history
	// index's stream (nil: no index).
	ShadowBucket  jetstream.KeyValueConfig
	ShadowHistory *jetstream.StreamConfig
	// Projection wires a projection over records and history (nil: no
	// index) as the appliance wires its own.
	Projection func(records, history jetstream.KeyValue) *processor.Projection
	// Reads switches the appliance's reads to the shadow (orders for
	// which live is true still read from the live projection), or back
	// to the live projection (shadow nil).
	Reads func(shadow *processor.Projection, live func(orderID string) bool)
	// Forget drops the live processor's cached records.
	Forget func()
	// Sync makes the named streams' writes durable.
	Sync func(ctx context.Context, streams ...string) error
	Log  *slog.Logger
}

// Parallel copies at once during the takeover.
const copyParallel = 32

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
		kv, err := b.JS.CreateKeyValue(ctx, b.ShadowBucket)
		if err != nil {
			return nil, fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
		}
		var hkv jetstream.KeyValue
		if b.ShadowHistory != nil {
			if _, err := b.JS.CreateStream(ctx, *b.ShadowHistory); err != nil {
				return nil, fmt.Errorf("shadow history index %q: %w", b.ShadowHistory.Name, err)
			}
			if hkv, err = b.JS.KeyValue(ctx, historyBucket(b.ShadowHistory)); err != nil {
				return nil, fmt.Errorf("shadow history index %q: %w", b.ShadowHistory.Name, err)
			}
		}
		return b.Projection(kv, hkv), nil
	}
	kv, hkv, err := b.openShadow(ctx)
	if err != nil {
		return nil, err
	}
	return b.Projection(kv, hkv), nil
}

func historyBucket(s *jetstream.StreamConfig) string { return s.Name[len("KV_"):] }

// openShadow opens the shadow buckets; jetstream.ErrBucketNotFound when
// they are gone.
func (b *Buckets) openShadow(ctx context.Context) (kv, hkv jetstream.KeyValue, err error) {
	if kv, err = b.JS.KeyValue(ctx, b.ShadowBucket.Bucket); err != nil {
		return nil, nil, fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
	}
	if b.ShadowHistory != nil {
		if hkv, err = b.JS.KeyValue(ctx, historyBucket(b.ShadowHistory)); err != nil {
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

func readHead(ctx context.Context, kv jetstream.KeyValue, id string) (recordHead, jetstream.KeyValueEntry, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return recordHead{}, nil, nil
	}
	if err != nil {
		return recordHead{}, nil, err
	}
	var h recordHead
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return recordHead{}, nil, fmt.Errorf("order %q: %w", id, err)
	}
	return h, e, nil
}

// Takeover copies the rebuilt orders into the live buckets.
func (b *Buckets) Takeover(ctx context.Context, t *Takeover) error {
	skv, shkv, err := b.openShadow(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Dropped after a copy that finished: nothing is left to do.
		return nil
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
	ids, err := listKeys(ctx, skv)
	if err != nil {
		return fmt.Errorf("shadow bucket %q: %w", b.ShadowBucket.Bucket, err)
	}
	inShadow := make(map[string]bool, len(ids))
	for _, id := range ids {
		inShadow[id] = true
	}
	// Which orders keep their live state: conflicts, and partial ones.
	kept := make([]bool, len(ids))
	liveChunks := make([]int, len(ids))
	var partial, conflicts atomic.Uint64
	if err := parallel(ctx, len(ids), func(i int) error {
		id := ids[i]
		if t.Keep[id] {
			kept[i] = true
			conflicts.Add(1)
			return nil
		}
		h, _, err := readHead(ctx, lkv, id)
		if err != nil {
			return err
		}
		liveChunks[i] = h.HistoryChunks
		if h.Events > 0 && h.FirstSeq < t.From && !t.ReplacePartial {
			kept[i] = true
			partial.Add(1)
		}
		return nil
	}); err != nil {
		return err
	}
	keptSet := map[string]bool{}
	var todo []int
	for i, id := range ids {
		if kept[i] {
			keptSet[id] = true
		} else {
			todo = append(todo, i)
		}
	}
	shadow := b.Projection(skv, shkv)
	b.Reads(shadow, func(id string) bool { return keptSet[id] })
	defer b.Reads(nil, nil)
	var copied atomic.Uint64
	total := uint64(len(todo))
	if t.Progress != nil {
		t.Progress(0, total)
	}
	if err := parallel(ctx, len(todo), func(k int) error {
		i := todo[k]
		id := ids[i]
		h, e, err := readHead(ctx, skv, id)
		if err != nil || e == nil {
			return err
		}
		if lhkv != nil {
			for n := range h.HistoryChunks {
				key := id + "." + strconv.Itoa(n)
				c, err := shkv.Get(ctx, key)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					continue // gone by its limits: read as not retained
				}
				if err != nil {
					return fmt.Errorf("shadow history of %q: %w", id, err)
				}
				if _, err := lhkv.Put(ctx, key, c.Value()); err != nil {
					return fmt.Errorf("history of %q: %w", id, err)
				}
			}
		}
		if _, err := lkv.Put(ctx, id, e.Value()); err != nil {
			return fmt.Errorf("order %q: %w", id, err)
		}
		if lhkv != nil {
			// Chunks of the old index past the new one's end.
			for n := h.HistoryChunks; n < liveChunks[i]; n++ {
				if err := lhkv.Delete(ctx, id+"."+strconv.Itoa(n)); err != nil {
					return fmt.Errorf("history of %q: %w", id, err)
				}
			}
		}
		c := copied.Add(1)
		if t.Progress != nil && (c%256 == 0 || c == total) {
			t.Progress(c, total)
		}
		return nil
	}); err != nil {
		return err
	}
	live := []string{"KV_" + b.Live}
	if lhkv != nil {
		live = append(live, "KV_"+b.LiveHistory)
	}
	if err := b.Sync(ctx, live...); err != nil {
		return fmt.Errorf("making the copy durable: %w", err)
	}
	liveIDs, err := listKeys(ctx, lkv)
	if err != nil {
		return fmt.Errorf("projection bucket %q: %w", b.Live, err)
	}
	var untouched uint64
	for _, id := range liveIDs {
		if !inShadow[id] {
			untouched++
		}
	}
	t.Rebuilt, t.Partial, t.Conflicts, t.Untouched = copied.Load(), partial.Load(), conflicts.Load(), untouched
	b.Reads(nil, nil)
	if b.Forget != nil {
		b.Forget()
	}
	if b.Log != nil {
		b.Log.Info("projection rebuild: copied into the live projection", "rebuilt", t.Rebuilt, "partial_kept", t.Partial, "conflicts_kept", t.Conflicts, "untouched", untouched)
	}
	return nil
}

// HighWater is the highest stream sequence among the shadow bucket's
// last writes.
func (b *Buckets) HighWater(ctx context.Context) (uint64, error) {
	kv, hkv, err := b.openShadow(ctx)
	if err != nil {
		return 0, err
	}
	return b.Projection(kv, hkv).HighWater(ctx, 4*copyParallel*64)
}

// listKeys lists a bucket's keys (none: empty, not an error).
func listKeys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	l, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	_ = l.Stop() // the lister stopped itself once it listed every key
	return out, nil
}

// parallel runs fn(0..n-1), copyParallel at once; the first error stops it.
func parallel(ctx context.Context, n int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(copyParallel, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
