package processor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is one order's projected state, as [Projection.Get] returns it.
type Order struct {
	OrderID string `json:"order_id"`
	// Status is the latest event's (by stream sequence) "status" field, else its type.
	Status string `json:"status"`
	// LastEvent is the type of the latest event.
	LastEvent string `json:"last_event"`
	// LastSeq and FirstSeq are the stream sequences of the latest and the earliest applied event.
	LastSeq  uint64 `json:"last_seq"`
	FirstSeq uint64 `json:"first_seq"`
	// Events counts the events applied.
	Events int `json:"events"`
	// FirstEventAt and LastEventAt are the stream times of the first and the last applied event.
	FirstEventAt time.Time `json:"first_event_at"`
	LastEventAt  time.Time `json:"last_event_at"`
	// UpdatedAt is when this record was last written.
	UpdatedAt time.Time `json:"updated_at"`
}

// record is the value stored under the order id in the projection bucket: the order's state and the
// idempotency bookkeeping, which is not part of the order. Its JSON is the Order's fields followed
// by "applied" and "applied_floor", the shape the bucket has always held (Order must not get a
// MarshalJSON of its own: it would replace record's).
type record struct {
	Order
	// Applied lists the sequences applied above AppliedFloor; every event of
	// this order at or below AppliedFloor was applied or dead-lettered. Together
	// they make applying idempotent under any redelivery or reordering.
	Applied      []uint64 `json:"applied,omitempty"`
	AppliedFloor uint64   `json:"applied_floor,omitempty"`
	// Withheld lists the sequences above AppliedFloor that were not applied and never will be:
	// dead-lettered when their deliveries ran out ([Projection.Withhold]).
	Withheld []uint64 `json:"withheld,omitempty"`
	// History is the history index's tail: the sequences of applied events not yet sealed into one
	// of the order's HistoryChunks chunks in the history bucket (see history.go). HistoryBase
	// counts the events applied before the index began, which it does not list.
	History       []uint64 `json:"history,omitempty"`
	HistoryChunks int      `json:"history_chunks,omitempty"`
	HistoryBase   int      `json:"history_base,omitempty"`
	// HistorySealedMax is the highest sequence sealed into a chunk; HistoryUnordered is set once an
	// event below it was indexed (a retry that arrived after its order's tail had to be sealed
	// early): the index is then not in stream order, and folds read all of it.
	HistorySealedMax uint64 `json:"history_sealed_max,omitempty"`
	HistoryUnordered bool   `json:"history_unordered,omitempty"`
}

// hasApplied reports whether event seq is in the record: applied, or withheld from it.
func (r *record) hasApplied(seq uint64) bool {
	return seq <= r.AppliedFloor || slices.Contains(r.Applied, seq) || slices.Contains(r.Withheld, seq)
}

// apply folds ev into r. The result depends only on the set of applied events, not on the order
// they arrive in: the latest event by sequence sets Status and LastEvent, the earliest sets
// FirstEventAt. It returns false, changing nothing, if ev was applied before.
func (r *record) apply(ev Event) bool {
	if r.hasApplied(ev.Sequence) {
		return false
	}
	o := &r.Order
	o.OrderID = cmp.Or(o.OrderID, ev.OrderID)
	if o.Events == 0 || ev.Sequence > o.LastSeq {
		o.LastSeq = ev.Sequence
		o.LastEvent = ev.Type
		o.Status = cmp.Or(ev.Status, ev.Type)
		o.LastEventAt = ev.Time.UTC()
	}
	if o.Events == 0 || ev.Sequence < o.FirstSeq {
		o.FirstSeq = ev.Sequence
		o.FirstEventAt = ev.Time.UTC()
	}
	o.Events++
	i, _ := slices.BinarySearch(r.Applied, ev.Sequence)
	r.Applied = slices.Insert(r.Applied, i, ev.Sequence)
	return true
}

// prune forgets applied sequences at or below floor: the consumer will not deliver them again.
func (r *record) prune(floor uint64) {
	if floor <= r.AppliedFloor {
		return
	}
	r.AppliedFloor = floor
	r.Applied = pruned(r.Applied, floor)
	r.Withheld = pruned(r.Withheld, floor)
}

// pruned is seqs (sorted) without those at or below floor.
func pruned(seqs []uint64, floor uint64) []uint64 {
	i, _ := slices.BinarySearch(seqs, floor+1)
	seqs = slices.Delete(seqs, 0, i)
	if len(seqs) == 0 {
		return nil
	}
	return seqs
}

// ErrDuplicate is returned (wrapped) by a Handler for an event it had
// already applied: the processor acks it and counts it as a duplicate.
var ErrDuplicate = errors.New("already applied")

// Projection, the built-in Handler, keeps each order's state in a KV bucket, one key per order,
// updated by compare-and-set on its revision so concurrent processors never overwrite each other.
//
// The writes of one batch go to the server together: as one atomic batch where the bucket's stream
// allows it (see [Projection.SetAtomicBatches]), else, or when the batch is refused (another
// processor moved a key), pipelined one by one: every order's update in flight at once.
type Projection struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // "$KV.<bucket>."

	bucketMu   sync.Mutex
	bucketRead bool // atomic and replicated are known
	atomic     bool // the bucket's stream accepts atomic batches
	atomicOff  bool
	replicated bool // the bucket has replicas, which may lag

	hist       jetstream.KeyValue // the history index's chunks; nil: no index
	histPrefix string             // "$KV.<history bucket>."

	mu    sync.Mutex
	cache map[string]cached // last known value and revision per order
}

// NewProjection returns the projection over kv; js publishes its writes. Give js a bound on the
// wait for a write's ack (jetstream.WithPublishAsyncTimeout; the appliance uses 10s): a write whose
// ack is lost with a dead cluster node would otherwise hold the processor's partition for good.
func NewProjection(js jetstream.JetStream, kv jetstream.KeyValue) *Projection {
	return &Projection{js: js, kv: kv, prefix: "$KV." + kv.Bucket() + ".", cache: make(map[string]cached)}
}

// Get returns an order's projected state, or jetstream.ErrKeyNotFound.
func (p *Projection) Get(ctx context.Context, orderID string) (Order, error) {
	r, err := p.readRecord(ctx, orderID)
	return r.Order, err
}

// Withhold records that ev will not be applied (it is dead-lettered), in its order's record, unless
// it was applied already: see [Withholder]. It reads the order from the bucket's leader and writes
// by compare-and-set, so a processor applying ev at the same moment either wins (Withhold reports
// it applied) or finds it withheld (a duplicate). An order with no applied event gets a record with
// its id, 0 events and the withheld sequence; Get reports it not found.
func (p *Projection) Withhold(ctx context.Context, ev Event) (applied bool, err error) {
	for attempt := 0; attempt < 50; attempt++ {
		r, rev, err := p.loadLatest(ctx, ev.OrderID)
		if err != nil {
			return false, err
		}
		if slices.Contains(r.Withheld, ev.Sequence) {
			return false, nil // by an earlier try, whose dead letter failed
		}
		if r.hasApplied(ev.Sequence) {
			return true, nil
		}
		r.OrderID = cmp.Or(r.OrderID, ev.OrderID)
		i, _ := slices.BinarySearch(r.Withheld, ev.Sequence)
		r.Withheld = slices.Insert(slices.Clone(r.Withheld), i, ev.Sequence)
		r.prune(ev.AckFloor)
		r.UpdatedAt = time.Now().UTC()
		data, err := marshalRecord(&r)
		if err != nil {
			return false, err
		}
		msg := &nats.Msg{Subject: p.prefix + ev.OrderID, Data: data, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}}
		ack, err := p.js.PublishMsg(ctx, msg)
		if err == nil {
			p.store(ev.OrderID, r, ack.Sequence)
			return false, nil
		}
		p.forget(ev.OrderID)
		if !isWrongLastSequence(err) {
			return false, fmt.Errorf("projection %q: withhold event %d: %w", ev.OrderID, ev.Sequence, err)
		}
		if inFlightAtLeader(err) {
			conflictPause(ctx, attempt)
		}
	}
	return false, fmt.Errorf("projection %q: withhold event %d: the order kept changing under 50 tries", ev.OrderID, ev.Sequence)
}

// Applied reports whether ev is in its order's record, reading the bucket
// (a "no" from the leader: a replica may lag behind).
func (p *Projection) Applied(ctx context.Context, ev Event) (bool, error) {
	r, _, err := p.load(ctx, ev.OrderID)
	if err == nil && !r.hasApplied(ev.Sequence) {
		r, _, err = p.loadLatest(ctx, ev.OrderID)
	}
	return err == nil && r.hasApplied(ev.Sequence), err
}

// Handle applies one event.
func (p *Projection) Handle(ctx context.Context, ev Event) error {
	return p.HandleBatch(ctx, [][]Event{{ev}})[0][0]
}

// HandleBatch applies several orders' events: one KV update per order, all in flight at once. An
// update losing a race to another processor (the key's revision moved) is read and applied again.
func (p *Projection) HandleBatch(ctx context.Context, orders [][]Event) [][]error {
	results := make([][]error, len(orders))
	todo := make([]int, 0, len(orders))
	for i, evs := range orders {
		if len(evs) > 0 {
			todo = append(todo, i)
		}
		results[i] = make([]error, len(evs))
	}
	inFlight := false // a write of the last attempt found another in flight at the leader
	for attempt := 0; len(todo) > 0; attempt++ {
		if inFlight {
			conflictPause(ctx, attempt)
			inFlight = false
		}
		ids := make([]string, len(todo))
		for k, i := range todo {
			ids[k] = orders[i][0].OrderID
		}
		// A retry reads from the bucket's leader (loadLatest: a replica may lag).
		states, loadErrs := p.loadMany(ctx, ids, attempt > 0)
		var writes []write
		var reread []int // orders whose write seals a chunk: read again from the leader
		for k, i := range todo {
			id, evs, errs, st := ids[k], orders[i], results[i], states[k]
			if loadErrs[k] != nil {
				fill(errs, loadErrs[k])
				continue
			}
			next := st.rec
			next.Applied = slices.Clone(st.rec.Applied)
			next.Withheld = slices.Clone(st.rec.Withheld)
			next.History = slices.Clone(st.rec.History)
			if p.hist != nil {
				// Events of a record written before the index existed (or while it was off) are
				// counted as unindexed.
				next.HistoryBase = max(next.HistoryBase, next.Events-next.historyCount())
			}
			changed := false
			var floor uint64
			for j, ev := range evs {
				floor = max(floor, ev.AckFloor)
				if slices.Contains(next.Withheld, ev.Sequence) {
					errs[j] = fmt.Errorf("event %d of order %q: %w", ev.Sequence, id, ErrWithheld)
					continue
				}
				if next.apply(ev) {
					if p.hist != nil {
						next.indexHistory(ev.Sequence)
					}
					changed, errs[j] = true, nil
				} else {
					errs[j] = ErrDuplicate
				}
			}
			if !changed {
				continue
			}
			next.prune(floor)
			if p.hist != nil && attempt == 0 && len(next.sealable()) > 0 {
				// A chunk is written before its record, and no compare-and-set guards it: it is
				// sealed only from the record as the bucket's leader has it (the next attempt reads
				// it there). One sealed from a stale record (this processor's cache, a replica
				// catching up) would replace the chunk the current record names, and the record's
				// retry would not write it again.
				reread = append(reread, i)
				continue
			}
			seal := p.sealWrites(id, &next, st.rec.History)
			next.UpdatedAt = time.Now().UTC()
			data, err := marshalRecord(&next)
			if err != nil {
				fill(errs, err)
				continue
			}
			msg := &nats.Msg{Subject: p.prefix + id, Data: data, Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(st.rev, 10)}}}
			writes = append(writes, write{i: i, id: id, next: next, msg: msg, seal: seal})
		}
		// Sealed history chunks are written (and acknowledged) before the records that count them:
		// a record never names a chunk that is not there. A chunk written for a record that then
		// loses its compare-and-set is written again, the same, by the retry.
		writes = p.writeSeals(ctx, writes, results)
		todo = append(todo[:0], reread...)
		if len(writes) > 1 && p.useAtomic(ctx) {
			var rest []write
			for chunk := range slices.Chunk(writes, atomicBatchMax) {
				first, err := p.commitAtomic(ctx, chunk)
				if err != nil {
					// Refused as a whole: go one by one, which also tells which key moved.
					rest = append(rest, chunk...)
					continue
				}
				for k, w := range chunk {
					p.store(w.id, w.next, first+uint64(k))
				}
			}
			writes = rest
		}
		// The others one by one, all in flight at once.
		for k := range writes {
			w := &writes[k]
			fut, err := p.js.PublishMsgAsync(w.msg)
			if err != nil {
				p.forget(w.id)
				fill(results[w.i], fmt.Errorf("projection %q: %w", w.id, err))
				continue
			}
			w.fut = fut
		}
		for _, w := range writes {
			if w.fut == nil {
				continue
			}
			select {
			case ack := <-w.fut.Ok():
				p.store(w.id, w.next, ack.Sequence)
			case err := <-w.fut.Err():
				p.forget(w.id)
				if isWrongLastSequence(err) && attempt < 50 {
					// Another processor wrote it first, or is writing it (in a cluster every node's
					// processor takes events of any order): read again, re-apply.
					todo = append(todo, w.i)
					inFlight = inFlight || inFlightAtLeader(err)
					continue
				}
				fill(results[w.i], fmt.Errorf("projection %q: %w", w.id, err))
			case <-ctx.Done():
				p.forget(w.id)
				fill(results[w.i], fmt.Errorf("projection %q: %w", w.id, ctx.Err()))
			}
		}
	}
	for _, errs := range results {
		for j, err := range errs {
			if err != nil && err != ErrDuplicate {
				errs[j] = storeErr{err} // the store's, if it is no answer in time (storeFailed)
			}
		}
	}
	return results
}

// write is HandleBatch's write of order i's record.
type write struct {
	i    int
	id   string
	next record
	msg  *nats.Msg
	fut  jetstream.PubAckFuture
	seal []*nats.Msg // history chunks to write before msg
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// HighWater returns the highest stream sequence among the last window writes to the projection
// bucket: about the highest event the projection applied (writes land roughly in stream order). 0
// for an empty bucket. After a damaged store, a stream whose last sequence is below it lost events
// the projection had applied.
func (p *Projection) HighWater(ctx context.Context, window int) (uint64, error) {
	s, err := p.js.Stream(ctx, "KV_"+p.kv.Bucket())
	if err != nil {
		return 0, fmt.Errorf("projection %q: %w", p.kv.Bucket(), err)
	}
	st := s.CachedInfo().State
	var hw uint64
	for seq, n := st.LastSeq, 0; seq >= st.FirstSeq && seq > 0 && n < window; seq, n = seq-1, n+1 {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return hw, fmt.Errorf("projection %q: %w", p.kv.Bucket(), err)
		}
		var r record
		if json.Unmarshal(m.Data, &r) == nil {
			hw = max(hw, r.LastSeq)
		}
	}
	return hw, nil
}

// Unapplied looks, from sequence to down to from (at most max events, and none stored before
// notBefore), for a valid order event in stream s that the projection does not hold: an event
// acknowledged but whose projection write was lost (a power cut with a relaxed sync_interval, a
// damaged bucket file). Poison events and those deadLettered reports (never applied) are skipped.
// It returns the first one found.
func (p *Projection) Unapplied(ctx context.Context, s jetstream.Stream, from, to uint64, max int, notBefore time.Time, deadLettered func(uint64) (bool, error)) (uint64, bool, error) {
	for seq, n := to, 0; seq >= from && seq > 0 && n < max; seq, n = seq-1, n+1 {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		if m.Time.Before(notBefore) {
			break
		}
		id, _, perr := parse(m.Subject, m.Data)
		if perr != nil {
			continue
		}
		r, _, err := p.load(ctx, id)
		if err != nil {
			return 0, false, err
		}
		if !r.hasApplied(seq) {
			if dead, err := deadLettered(seq); err != nil || !dead {
				return seq, err == nil, err
			}
		}
	}
	return 0, false, nil
}

// ProjectionVersion is the version of the built-in projection's fold
// ([Versioned]): a new orderstore that folds events differently changes
// it, and the projection is rebuilt in the background at its first start.
const ProjectionVersion = "orders/1"

// Version returns ProjectionVersion.
func (p *Projection) Version() string { return ProjectionVersion }

// Bucket returns the name of the projection's bucket, and of its history index's ("" without one).
func (p *Projection) Bucket() (records, history string) {
	if p.hist != nil {
		history = p.hist.Bucket()
	}
	return p.kv.Bucket(), history
}
