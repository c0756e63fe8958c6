package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/orderstore/orderstore/internal/leaderget"
)

// cached is an order's record as last read or written, at its revision.
type cached struct {
	rec record
	rev uint64
}

const (
	cacheMax     = 200_000
	loadParallel = 64
)

// atomicBatchMax is nats-server's limit of messages per atomic batch.
const atomicBatchMax = 1000

// SetAtomicBatches turns atomic batch commits off (false) or leaves them on where the bucket allows
// them (true, the default). They pay off when every write is fsynced (sync_interval "always": one
// fsync per batch); with a relaxed sync interval, pipelined single writes are faster. Call it
// before the first batch.
func (p *Projection) SetAtomicBatches(on bool) { p.atomicOff = !on }

// useAtomic reports, once, whether the bucket's stream allows atomic batches.
func (p *Projection) useAtomic(ctx context.Context) bool {
	atomic, _ := p.bucketOnce(ctx)
	return atomic && !p.atomicOff
}

// bucketOnce reads what the projection needs to know of its bucket's stream, until a read succeeds:
// whether it accepts atomic batches and whether it has replicas. While unknown: no atomic batches,
// reads from the leader.
func (p *Projection) bucketOnce(ctx context.Context) (atomic, replicated bool) {
	p.bucketMu.Lock()
	defer p.bucketMu.Unlock()
	defer func() { atomic, replicated = p.atomic, p.replicated }()
	if p.bucketRead {
		return
	}
	p.atomic, p.replicated = false, true
	st, err := p.kv.Status(ctx)
	if ks, ok := st.(*jetstream.KeyValueBucketStatus); err == nil && ok {
		cfg := ks.StreamInfo().Config
		p.atomic = cfg.AllowAtomicPublish
		p.replicated = cfg.Replicas > 1
		p.bucketRead = true
	}
	return
}

// loadLatest is load where its answer must be the latest: from the bucket's leader when the bucket
// has replicas (a direct get may be answered by one that lags), else a direct get (its only server
// is the leader, and direct gets do not queue behind the JetStream API), unless that finds no
// order: a deleted one's marker has a revision a write must expect, which only the leader gives.
func (p *Projection) loadLatest(ctx context.Context, id string) (record, uint64, error) {
	if _, replicated := p.bucketOnce(ctx); !replicated {
		if r, rev, err := p.load(ctx, id); err != nil || rev != 0 {
			return r, rev, err
		}
	}
	return p.loadFromLeader(ctx, id)
}

// commitAtomic publishes the writes as one atomic batch and returns the
// stream sequence of the first: a batch is stored contiguously.
func (p *Projection) commitAtomic(ctx context.Context, writes []write) (uint64, error) {
	defer func() {
		for _, w := range writes { // the fallback path must not carry batch headers
			w.msg.Header.Del(headerBatchID)
			w.msg.Header.Del(headerBatchSeq)
			w.msg.Header.Del(headerBatchCommit)
		}
	}()
	nc := p.js.Conn()
	id := nuid.Next()
	for k, w := range writes {
		w.msg.Header.Set(headerBatchID, id)
		w.msg.Header.Set(headerBatchSeq, strconv.Itoa(k+1))
		if k < len(writes)-1 {
			if err := nc.PublishMsg(w.msg); err != nil {
				return 0, err
			}
		}
	}
	last := writes[len(writes)-1].msg
	last.Header.Set(headerBatchCommit, "1")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(rctx, last)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64              `json:"seq"`
		Count int                 `json:"count"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, err
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("atomic batch: %s (err_code %d)", ack.Error.Description, ack.Error.ErrorCode)
	}
	if ack.Count != len(writes) || ack.Seq < uint64(len(writes)) {
		return 0, fmt.Errorf("atomic batch: ack for %d messages at seq %d, sent %d", ack.Count, ack.Seq, len(writes))
	}
	return ack.Seq - uint64(len(writes)) + 1, nil
}

const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
)

// isWrongLastSequence reports a compare-and-set that lost its race: the
// key moved (10071, with the key's last sequence), or, on a replicated
// bucket, a write to it is in flight at the leader (10164, without it).
func isWrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// inFlightAtLeader reports the 10164 of isWrongLastSequence: the other write has not been applied
// yet, and a read now would most likely find the record it replaces.
func inFlightAtLeader(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// conflictPause waits a moment before the attempt-th retry of a write that found another in flight
// at the leader (a few milliseconds, longer with each attempt, jittered so that two writers part):
// the other write is then applied, and the read that follows finds it.
func conflictPause(ctx context.Context, attempt int) {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond)))) + time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// loadMany returns each order's last known state: from the cache, else
// read from the bucket, up to loadParallel reads at once.
func (p *Projection) loadMany(ctx context.Context, ids []string, fromLeader bool) ([]cached, []error) {
	out := make([]cached, len(ids))
	errs := make([]error, len(ids))
	var misses []int
	p.mu.Lock()
	for k, id := range ids {
		if c, ok := p.cache[id]; ok && !fromLeader {
			out[k] = c
		} else {
			misses = append(misses, k)
		}
	}
	p.mu.Unlock()
	load := p.load
	if fromLeader {
		load = p.loadLatest
	}
	parallel(len(misses), loadParallel, func(i int) {
		k := misses[i]
		out[k].rec, out[k].rev, errs[k] = load(ctx, ids[k])
	})
	return out, errs
}

// load reads one order's record from the bucket; not found is the zero
// record at revision 0 (a write then expects no previous value).
func (p *Projection) load(ctx context.Context, id string) (record, uint64, error) {
	e, err := p.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, 0, nil
	}
	if err != nil {
		return record{}, 0, fmt.Errorf("projection %q: %w", id, err)
	}
	return decodeRecord(id, e.Value(), e.Revision())
}

func decodeRecord(id string, data []byte, rev uint64) (record, uint64, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, 0, fmt.Errorf("projection %q: stored value is not an order: %w", id, err)
	}
	return r, rev, nil
}

// loadFromLeader is load answered by the bucket's stream leader (the JetStream API's message get,
// where load's direct get may be answered by any replica).
func (p *Projection) loadFromLeader(ctx context.Context, id string) (record, uint64, error) {
	data, seq, deleted, err := leaderget.LastBySubject(ctx, p.js, "KV_"+p.kv.Bucket(), p.prefix+id)
	switch {
	case err != nil:
		return record{}, 0, fmt.Errorf("projection %q: read from the leader: %w", id, err)
	case seq == 0:
		return record{}, 0, nil
	case deleted:
		return record{}, seq, nil // deleted: a write expects the marker
	}
	return decodeRecord(id, data, seq)
}

// parallel calls fn(i) for each i below n, width calls at most at once, on as many goroutines (not
// one per call, whose stack would grow anew through the request path each time).
func parallel(n, width int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func (p *Projection) store(id string, r record, rev uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cache) >= cacheMax {
		// Drop an arbitrary tenth: a miss only costs one KV read.
		n := 0
		for k := range p.cache {
			delete(p.cache, k)
			if n++; n >= cacheMax/10 {
				break
			}
		}
	}
	p.cache[id] = cached{r, rev}
}

// forget drops id's cached record: its next write reads it again.
func (p *Projection) forget(id string) {
	p.mu.Lock()
	delete(p.cache, id)
	p.mu.Unlock()
}

// ForgetAll drops every cached record: another writer (a rebuild's takeover) rewrote the bucket. A
// write from a stale cache entry would only be refused and read again; this saves the round trips.
func (p *Projection) ForgetAll() {
	p.mu.Lock()
	clear(p.cache)
	p.mu.Unlock()
}
