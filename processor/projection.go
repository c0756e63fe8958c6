package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
// revision so concurrent processors never overwrite each other.
type Projection struct {
	kv  jetstream.KeyValue
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached // last known value and revision per order
}

type cached struct {
	order Order
	rev   uint64
}

const cacheMax = 200_000

// NewProjection returns the projection over kv.
func NewProjection(kv jetstream.KeyValue) *Projection {
	return &Projection{kv: kv, now: time.Now, cache: make(map[string]cached)}
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

// Handle applies one event.
func (p *Projection) Handle(ctx context.Context, ev Event) error {
	return p.HandleOrder(ctx, ev.OrderID, []Event{ev})[0]
}

// HandleOrder applies the events of one order with a single KV update.
func (p *Projection) HandleOrder(ctx context.Context, orderID string, events []Event) []error {
	errs := make([]error, len(events))
	var floor uint64
	for _, ev := range events {
		floor = max(floor, ev.AckFloor)
	}
	for attempt := 0; ; attempt++ {
		cur, rev, err := p.load(ctx, orderID)
		if err != nil {
			return fill(errs, err)
		}
		next := cur
		next.Applied = slices.Clone(cur.Applied)
		changed := false
		for i, ev := range events {
			if next.Apply(ev) {
				changed = true
				errs[i] = nil
			} else {
				errs[i] = ErrDuplicate
			}
		}
		if !changed {
			return errs
		}
		next.prune(floor)
		next.UpdatedAt = p.now().UTC()
		data, err := json.Marshal(next)
		if err != nil {
			return fill(errs, err)
		}
		var newRev uint64
		if rev == 0 {
			newRev, err = p.kv.Create(ctx, orderID, data)
		} else {
			newRev, err = p.kv.Update(ctx, orderID, data, rev)
		}
		if err == nil {
			p.store(orderID, next, newRev)
			return errs
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// Another processor wrote it first: read again and re-apply.
			p.forget(orderID)
			if attempt < 50 {
				continue
			}
		}
		p.forget(orderID)
		return fill(errs, fmt.Errorf("projection %q: %w", orderID, err))
	}
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (p *Projection) load(ctx context.Context, id string) (Order, uint64, error) {
	p.mu.Lock()
	c, ok := p.cache[id]
	p.mu.Unlock()
	if ok {
		return c.order, c.rev, nil
	}
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
