package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

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
