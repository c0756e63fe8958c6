package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is one order's projected state: the value stored under the order id
// in the projection bucket.
type Order struct {
	OrderID string `json:"order_id"`
	// Status is the status of the latest event (by stream sequence): its
	// "status" field, else its type.
	Status string `json:"status"`
	// LastEvent is the type of the latest event.
	LastEvent string `json:"last_event"`
	// LastSeq and FirstSeq are the stream sequences of the latest and the
	// earliest applied event.
	LastSeq  uint64 `json:"last_seq"`
	FirstSeq uint64 `json:"first_seq"`
	// Events counts the events applied.
	Events int `json:"events"`
	// FirstEventAt and LastEventAt are the stream times of the earliest and
	// the latest applied event.
	FirstEventAt time.Time `json:"first_event_at"`
	LastEventAt  time.Time `json:"last_event_at"`
	// UpdatedAt is when this record was last written.
	UpdatedAt time.Time `json:"updated_at"`

	// Applied lists the sequences applied above AppliedFloor; every event of
	// this order at or below AppliedFloor was applied or dead-lettered. Together
	// they make applying idempotent under any redelivery or reordering.
	Applied      []uint64 `json:"applied,omitempty"`
	AppliedFloor uint64   `json:"applied_floor,omitempty"`
}

// HasApplied reports whether the event with sequence seq is in the record.
func (o *Order) HasApplied(seq uint64) bool {
	return seq <= o.AppliedFloor || slices.Contains(o.Applied, seq)
}

// Apply folds ev into o. The result depends only on the set of applied
// events, not on the order they arrive in: the latest event by sequence
// sets Status and LastEvent, the earliest sets FirstEventAt. It returns
// false, changing nothing, if ev was applied before.
func (o *Order) Apply(ev Event) bool {
	if o.HasApplied(ev.Sequence) {
		return false
	}
	if o.OrderID == "" {
		o.OrderID = ev.OrderID
	}
	if o.Events == 0 || ev.Sequence > o.LastSeq {
		o.LastSeq = ev.Sequence
		o.LastEvent = ev.Type
		o.Status = ev.Status
		if o.Status == "" {
			o.Status = ev.Type
		}
		o.LastEventAt = ev.Time.UTC()
	}
	if o.Events == 0 || ev.Sequence < o.FirstSeq {
		o.FirstSeq = ev.Sequence
		o.FirstEventAt = ev.Time.UTC()
	}
	o.Events++
	i, _ := slices.BinarySearch(o.Applied, ev.Sequence)
	o.Applied = slices.Insert(o.Applied, i, ev.Sequence)
	return true
}

// prune forgets applied sequences at or below floor: the consumer will not
// deliver them again.
func (o *Order) prune(floor uint64) {
	if floor <= o.AppliedFloor {
		return
	}
	o.AppliedFloor = floor
	i, _ := slices.BinarySearch(o.Applied, floor+1)
	o.Applied = slices.Delete(o.Applied, 0, i)
	if len(o.Applied) == 0 {
		o.Applied = nil
	}
}

// ErrDuplicate is returned (wrapped) by a Handler for an event it had
// already applied: the processor acks it and counts it as a duplicate.
var ErrDuplicate = errors.New("already applied")

// Projection is the built-in Handler: it keeps each order's state in a KV
// bucket, one key per order, updated by compare-and-set on the key's
// revision so concurrent processors never overwrite each other. The writes
// of one batch are pipelined: every order's update is in flight at once,
// which makes a batch cost about one round trip instead of one per order.
type Projection struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // "$KV.<bucket>."
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cached // last known value and revision per order
}

type cached struct {
	order Order
	rev   uint64
}

const (
	cacheMax     = 200_000
	loadParallel = 64
)

// NewProjection returns the projection over kv; js publishes its writes.
func NewProjection(js jetstream.JetStream, kv jetstream.KeyValue) *Projection {
	return &Projection{js: js, kv: kv, prefix: "$KV." + kv.Bucket() + ".", now: time.Now, cache: make(map[string]cached)}
}

// Get returns an order's projected state, or jetstream.ErrKeyNotFound.
func (p *Projection) Get(ctx context.Context, orderID string) (Order, error) {
	e, err := p.kv.Get(ctx, orderID)
	if err != nil {
		return Order{}, err
	}
	var o Order
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return Order{}, fmt.Errorf("projection %q: %w", orderID, err)
	}
	return o, nil
}

// Applied reports whether ev is in its order's record, reading the bucket.
func (p *Projection) Applied(ctx context.Context, ev Event) (bool, error) {
	o, _, err := p.load(ctx, ev.OrderID)
	if err != nil {
		return false, err
	}
	return o.HasApplied(ev.Sequence), nil
}

// Handle applies one event.
func (p *Projection) Handle(ctx context.Context, ev Event) error {
	return p.HandleOrder(ctx, ev.OrderID, []Event{ev})[0]
}

// HandleOrder applies the events of one order with a single KV update.
func (p *Projection) HandleOrder(ctx context.Context, orderID string, events []Event) []error {
	return p.HandleBatch(ctx, [][]Event{events})[0]
}

// HandleBatch applies several orders' events: one KV update per order, all
// in flight at once. An update that loses a race with another processor
// (the key's revision moved) is read again and re-applied.
func (p *Projection) HandleBatch(ctx context.Context, orders [][]Event) [][]error {
	results := make([][]error, len(orders))
	todo := make([]int, 0, len(orders))
	for i, evs := range orders {
		if len(evs) > 0 {
			todo = append(todo, i)
		}
		results[i] = make([]error, len(evs))
	}
	type write struct {
		i    int
		id   string
		next Order
		fut  jetstream.PubAckFuture
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		ids := make([]string, len(todo))
		for k, i := range todo {
			ids[k] = orders[i][0].OrderID
		}
		states := p.loadMany(ctx, ids)
		var writes []write
		for k, i := range todo {
			id, evs, errs := ids[k], orders[i], results[i]
			st := states[k]
			if st.err != nil {
				fill(errs, st.err)
				continue
			}
			next := st.order
			next.Applied = slices.Clone(st.order.Applied)
			changed := false
			var floor uint64
			for j, ev := range evs {
				floor = max(floor, ev.AckFloor)
				if next.Apply(ev) {
					changed, errs[j] = true, nil
				} else {
					errs[j] = ErrDuplicate
				}
			}
			if !changed {
				continue
			}
			next.prune(floor)
			next.UpdatedAt = p.now().UTC()
			data, err := json.Marshal(next)
			if err != nil {
				fill(errs, err)
				continue
			}
			fut, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.prefix + id, Data: data},
				jetstream.WithExpectLastSequencePerSubject(st.rev))
			if err != nil {
				p.forget(id)
				fill(errs, fmt.Errorf("projection %q: %w", id, err))
				continue
			}
			writes = append(writes, write{i, id, next, fut})
		}
		todo = todo[:0]
		for _, w := range writes {
			select {
			case ack := <-w.fut.Ok():
				p.store(w.id, w.next, ack.Sequence)
			case err := <-w.fut.Err():
				p.forget(w.id)
				if isWrongLastSequence(err) && attempt < 50 {
					// Another processor wrote it first: read again, re-apply.
					todo = append(todo, w.i)
					continue
				}
				fill(results[w.i], fmt.Errorf("projection %q: %w", w.id, err))
			case <-ctx.Done():
				p.forget(w.id)
				fill(results[w.i], fmt.Errorf("projection %q: %w", w.id, ctx.Err()))
			}
		}
	}
	return results
}

func isWrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

type loaded struct {
	order Order
	rev   uint64
	err   error
}

// loadMany returns each order's last known state: from the cache, else
// read from the bucket, up to loadParallel reads at once.
func (p *Projection) loadMany(ctx context.Context, ids []string) []loaded {
	out := make([]loaded, len(ids))
	var misses []int
	p.mu.Lock()
	for k, id := range ids {
		if c, ok := p.cache[id]; ok {
			out[k] = loaded{order: c.order, rev: c.rev}
		} else {
			misses = append(misses, k)
		}
	}
	p.mu.Unlock()
	if len(misses) == 0 {
		return out
	}
	sem := make(chan struct{}, loadParallel)
	var wg sync.WaitGroup
	for _, k := range misses {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			o, rev, err := p.load(ctx, ids[k])
			out[k] = loaded{o, rev, err}
		}()
	}
	wg.Wait()
	return out
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// load reads one order from the bucket; not found is the zero Order at
// revision 0 (a write then expects no previous value).
func (p *Projection) load(ctx context.Context, id string) (Order, uint64, error) {
	e, err := p.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Order{}, 0, nil
	}
	if err != nil {
		return Order{}, 0, fmt.Errorf("projection %q: %w", id, err)
	}
	var o Order
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return Order{}, 0, fmt.Errorf("projection %q: stored value is not an order: %w", id, err)
	}
	return o, e.Revision(), nil
}

func (p *Projection) store(id string, o Order, rev uint64) {
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
	p.cache[id] = cached{o, rev}
}

func (p *Projection) forget(id string) {
	p.mu.Lock()
	delete(p.cache, id)
	p.mu.Unlock()
}
