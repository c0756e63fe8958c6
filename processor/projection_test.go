package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// A bucket written before Order lost its bookkeeping fields keeps working:
// its "applied" and "applied_floor" still make applying idempotent, new
// writes keep them, and Get serves the order's state without them.
func TestProjectionKeepsAStoreWrittenBefore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	legacy := `{"order_id":"o-legacy","status":"paid","last_event":"paid","last_seq":9,"first_seq":3,"events":3,` +
		`"first_event_at":"2026-03-01T12:00:00Z","last_event_at":"2026-03-01T12:01:00Z","updated_at":"2026-03-01T12:02:00Z",` +
		`"applied":[7,9],"applied_floor":5}`
	if _, err := kv.Put(ctx, "o-legacy", []byte(legacy)); err != nil {
		t.Fatal(err)
	}
	proj := e.projection(t)
	at := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	ev := func(seq uint64, typ string) processor.Event {
		return processor.Event{Subject: "orders." + typ, Type: typ, OrderID: "o-legacy", Sequence: seq, Time: at}
	}
	for _, seq := range []uint64{4, 9} { // at or below the floor; in applied
		if err := proj.Handle(ctx, ev(seq, "created")); !errors.Is(err, processor.ErrDuplicate) {
			t.Errorf("Handle(seq %d) = %v, want ErrDuplicate", seq, err)
		}
	}
	if err := proj.Handle(ctx, ev(12, "shipped")); err != nil {
		t.Fatalf("Handle(seq 12) = %v", err)
	}

	o, err := proj.Get(ctx, "o-legacy")
	if err != nil {
		t.Fatal(err)
	}
	want := processor.Order{OrderID: "o-legacy", Status: "shipped", LastEvent: "shipped", LastSeq: 12, FirstSeq: 3, Events: 4,
		FirstEventAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), LastEventAt: at}
	if o.UpdatedAt.IsZero() {
		t.Error("Get: no updated_at")
	}
	o.UpdatedAt = time.Time{}
	if g, w := mustJSON(t, o), mustJSON(t, want); g != w {
		t.Errorf("Get =\n %s\nwant\n %s", g, w)
	}
	entry, err := kv.Get(ctx, "o-legacy")
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		Applied      []uint64 `json:"applied"`
		AppliedFloor uint64   `json:"applied_floor"`
		Events       int      `json:"events"`
	}
	if err := json.Unmarshal(entry.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Applied, []uint64{7, 9, 12}) || stored.AppliedFloor != 5 || stored.Events != 4 {
		t.Errorf("stored value %s: want applied [7 9 12], applied_floor 5, events 4", entry.Value())
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A retry after a write lost a race reads the order from the bucket's
// leader: the same record and revision as a direct get on a single node,
// for an order that exists, one that does not, and one deleted (a write
// then expects the delete marker, not revision 0).
func TestProjectionLoadFromLeader(t *testing.T) {
	e := newEnv(t)
	proj := e.projection(t)
	ctx := context.Background()
	if err := proj.Handle(ctx, processor.Event{OrderID: "o-1", Status: "created", Type: "created", Sequence: 1, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d, l, dr, lr, err := proj.LoadBoth(ctx, "o-1")
	if err != nil || d.Status != "created" || !reflect.DeepEqual(d, l) || dr == 0 || dr != lr {
		t.Errorf("o-1: direct %+v rev %d, leader %+v rev %d, err %v", d, dr, l, lr, err)
	}
	if _, _, dr, lr, err := proj.LoadBoth(ctx, "nope"); err != nil || dr != 0 || lr != 0 {
		t.Errorf("missing order: revisions %d %d, err %v", dr, lr, err)
	}
	kv, err := embeddedtest.JetStream(t, e.srv).KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "o-1"); err != nil {
		t.Fatal(err)
	}
	if _, l, _, lr, err := proj.LoadBoth(ctx, "o-1"); err != nil || lr <= dr || l.OrderID != "" {
		t.Errorf("deleted order: leader %+v rev %d (want the marker's, past %d), err %v", l, lr, dr, err)
	}
	// And the next event of the deleted order is applied (its write
	// expects the marker).
	if err := proj.Handle(ctx, processor.Event{OrderID: "o-1", Status: "paid", Type: "paid", Sequence: 2, Time: time.Now()}); err != nil {
		t.Errorf("an event of a deleted order: %v", err)
	}
}

// Withhold and Handle of one event exclude each other, in either order
// and from projections with their own (stale) caches.
func TestProjectionWithhold(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p1, p2 := e.projection(t), e.projection(t)
	ev := func(id string, seq uint64) processor.Event {
		return processor.Event{OrderID: id, Status: "paid", Type: "paid", Sequence: seq, Time: time.Now()}
	}
	// Withheld first: the apply is refused as withheld, also from a projection
	// whose cache holds the order as it was before.
	if err := p2.Handle(ctx, ev("o-1", 1)); err != nil {
		t.Fatal(err)
	}
	if applied, err := p1.Withhold(ctx, ev("o-1", 2)); err != nil || applied {
		t.Fatalf("Withhold of an event not applied = %t, %v; want false", applied, err)
	}
	if err := p2.Handle(ctx, ev("o-1", 2)); !errors.Is(err, processor.ErrWithheld) {
		t.Errorf("Handle of a withheld event (stale cache) = %v, want ErrWithheld", err)
	}
	if o, err := p1.Get(ctx, "o-1"); err != nil || o.Events != 1 || o.LastSeq != 1 {
		t.Errorf("o-1 = %+v, %v; want its one applied event", o, err)
	}
	// Withheld again (its dead letter failed and is retried): still not
	// applied, so it is dead-lettered again.
	if applied, err := p2.Withhold(ctx, ev("o-1", 2)); err != nil || applied {
		t.Errorf("Withhold again = %t, %v; want false", applied, err)
	}
	// Applied first: Withhold says so (the event is acked, not
	// dead-lettered).
	if err := p2.Handle(ctx, ev("o-1", 3)); err != nil {
		t.Fatal(err)
	}
	if applied, err := p1.Withhold(ctx, ev("o-1", 3)); err != nil || !applied {
		t.Errorf("Withhold of an applied event = %t, %v; want true", applied, err)
	}
	// An order whose only event is withheld does not exist.
	if applied, err := p1.Withhold(ctx, ev("o-2", 4)); err != nil || applied {
		t.Fatalf("Withhold on a new order = %t, %v", applied, err)
	}
	if o, err := p2.Get(ctx, "o-2"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("o-2 = %+v, %v; want not found", o, err)
	}
	if err := p2.Handle(ctx, ev("o-2", 5)); err != nil {
		t.Fatal(err)
	}
	if o, err := p1.Get(ctx, "o-2"); err != nil || o.Events != 1 || o.FirstSeq != 5 || o.OrderID != "o-2" {
		t.Errorf("o-2 after an applied event = %+v, %v", o, err)
	}
}
