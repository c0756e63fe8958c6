package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// kvCeiling is an analysis step (-kv-ceiling N): how fast the projection
// bucket takes compare-and-set writes of order-sized values, outside the
// processor, three ways:
//
//   - sync: `workers` goroutines each doing kv.Create / kv.Update with the
//     known revision, one request in flight each: what the processor's 32
//     workers did before the projection pipelined its writes;
//   - pipelined: batches of `batch` distinct keys, every write of a batch
//     published at once (PublishMsgAsync on $KV.<bucket>.<key> with
//     Nats-Expected-Last-Subject-Sequence = the known revision), then all
//     acks awaited: the pipelined projection's write pattern;
//   - atomic: the same batches (at most 1000 keys), each as one atomic batch
//     publish (Nats-Batch-Id; the bucket's stream gets allow_atomic for it),
//     which under sync_interval=always costs one fsync per batch.
//
// Keys are "ceiling-<n>-NNNNNN" over `keys` keys, so no run touches the
// projection's own keys.
type kvCeilingResult struct {
	Writes          int
	Sync, Pipelined phase
	Atomic          phase
	Workers, Batch  int
}

func kvCeiling(ctx context.Context, e *env, writes, keys, workers, batch int) (kvCeilingResult, error) {
	res := kvCeilingResult{Writes: writes, Workers: workers, Batch: batch}
	js, err := e.connect(false, "bench-kv-ceiling")
	if err != nil {
		return res, err
	}
	bucket := e.cfg.Processor.ProjectionBucket
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return res, err
	}
	now := time.Now().UTC()
	value := func(key string, n int) []byte {
		// The projection's stored shape: the order and its bookkeeping.
		b, _ := json.Marshal(struct {
			processor.Order
			Applied      []uint64 `json:"applied,omitempty"`
			AppliedFloor uint64   `json:"applied_floor,omitempty"`
		}{processor.Order{OrderID: key, Status: "shipped", LastEvent: "shipped", LastSeq: uint64(n + 1000), FirstSeq: 1,
			Events: n + 1, FirstEventAt: now, LastEventAt: now, UpdatedAt: now}, []uint64{uint64(n + 1000)}, uint64(n + 900)})
		return b
	}

	// sync: one request in flight per worker, keys partitioned by worker.
	{
		key := func(i int) string { return fmt.Sprintf("ceiling-1-%06d", i) }
		var wg sync.WaitGroup
		errc := make(chan error, workers)
		t0, c0 := time.Now(), cpuTime()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				rev := map[int]uint64{}
				mine := max(1, keys/workers)
				for i := w; i < writes; i += workers {
					k := w + workers*r.IntN(mine)
					var nr uint64
					var err error
					if rv := rev[k]; rv == 0 {
						nr, err = kv.Create(ctx, key(k), value(key(k), i))
					} else {
						nr, err = kv.Update(ctx, key(k), value(key(k), i), rv)
					}
					if err != nil {
						errc <- err
						return
					}
					rev[k] = nr
				}
			}()
		}
		wg.Wait()
		res.Sync = phase{N: writes, Dur: time.Since(t0), CPU: cpuTime() - c0}
		select {
		case err := <-errc:
			return res, fmt.Errorf("sync writes: %w", err)
		default:
		}
	}

	// pipelined: a batch of distinct keys in flight at once.
	{
		pjs, err := e.connect(false, "bench-kv-ceiling-async", jetstream.WithPublishAsyncMaxPending(max(4000, 2*batch)))
		if err != nil {
			return res, err
		}
		key := func(i int) string { return fmt.Sprintf("ceiling-2-%06d", i) }
		rev := make([]uint64, keys)
		r := rand.New(rand.NewPCG(9, 9))
		perm := r.Perm(keys)
		pos := 0
		t0, c0 := time.Now(), cpuTime()
		futures := make([]jetstream.PubAckFuture, 0, batch)
		idx := make([]int, 0, batch)
		for done := 0; done < writes; {
			futures, idx = futures[:0], idx[:0]
			for len(idx) < min(batch, writes-done, keys) {
				if pos == len(perm) {
					perm, pos = r.Perm(keys), 0
				}
				k := perm[pos]
				pos++
				m := nats.NewMsg("$KV." + bucket + "." + key(k))
				m.Data = value(key(k), done+len(idx))
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev[k], 10))
				f, err := pjs.PublishMsgAsync(m)
				if err != nil {
					return res, fmt.Errorf("pipelined writes: %w", err)
				}
				futures = append(futures, f)
				idx = append(idx, k)
			}
			for j, f := range futures {
				select {
				case ack := <-f.Ok():
					rev[idx[j]] = ack.Sequence
				case err := <-f.Err():
					return res, fmt.Errorf("pipelined writes: %w", err)
				case <-ctx.Done():
					return res, ctx.Err()
				case <-time.After(60 * time.Second):
					return res, errors.New("pipelined writes: no ack after 60s")
				}
			}
			done += len(futures)
		}
		res.Pipelined = phase{N: writes, Dur: time.Since(t0), CPU: cpuTime() - c0}
	}

	// atomic: the same batches as one atomic batch publish each (the bucket's
	// stream gets allow_atomic for this; under sync_interval=always the
	// server fsyncs once per batch instead of once per write).
	{
		s, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return res, err
		}
		cfg := s.CachedInfo().Config
		cfg.AllowAtomicPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return res, fmt.Errorf("atomic writes: allow_atomic on KV_%s: %w", bucket, err)
		}
		nc := js.Conn()
		key := func(i int) string { return fmt.Sprintf("ceiling-3-%06d", i) }
		rev := make([]uint64, keys)
		r := rand.New(rand.NewPCG(10, 10))
		perm := r.Perm(keys)
		pos := 0
		size := min(batch, 1000) // the server's default max atomic batch
		t0, c0 := time.Now(), cpuTime()
		idx := make([]int, 0, size)
		for done, nb := 0, 0; done < writes; nb++ {
			idx = idx[:0]
			n := min(size, writes-done, keys)
			id := fmt.Sprintf("b%d", nb)
			var ackMsg *nats.Msg
			for len(idx) < n {
				if pos == len(perm) {
					perm, pos = r.Perm(keys), 0
				}
				k := perm[pos]
				pos++
				idx = append(idx, k)
				m := nats.NewMsg("$KV." + bucket + "." + key(k))
				m.Data = value(key(k), done+len(idx))
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev[k], 10))
				m.Header.Set("Nats-Batch-Id", id)
				m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(len(idx)))
				if len(idx) < n {
					if err := nc.PublishMsg(m); err != nil {
						return res, fmt.Errorf("atomic writes: %w", err)
					}
					continue
				}
				m.Header.Set("Nats-Batch-Commit", "1")
				ackMsg, err = nc.RequestMsgWithContext(ctx, m)
				if err != nil {
					return res, fmt.Errorf("atomic writes: commit: %w", err)
				}
			}
			var ack struct {
				Seq   uint64 `json:"seq"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(ackMsg.Data, &ack); err != nil || ack.Error != nil || ack.Seq == 0 {
				return res, fmt.Errorf("atomic writes: commit: %s", ackMsg.Data)
			}
			for j, k := range idx {
				rev[k] = ack.Seq - uint64(len(idx)-1-j)
			}
			done += n
		}
		res.Atomic = phase{N: writes, Dur: time.Since(t0), CPU: cpuTime() - c0}
	}
	return res, nil
}
