package processor

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"time"
)

func TestRecordApplyIsOrderIndependent(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := []Event{
		{OrderID: "a", Type: "created", Sequence: 3, Time: base},
		{OrderID: "a", Type: "paid", Sequence: 9, Time: base.Add(time.Minute)},
		{OrderID: "a", Type: "shipped", Status: "in-transit", Sequence: 20, Time: base.Add(2 * time.Minute)},
	}
	var want record
	for _, ev := range evs {
		want.apply(ev)
	}
	for _, perm := range [][]int{{2, 0, 1}, {1, 2, 0}, {2, 1, 0, 2, 1}} {
		var r record
		for _, i := range perm {
			r.apply(evs[i])
		}
		o := r.Order
		if o.Status != "in-transit" || o.LastEvent != "shipped" || o.Events != 3 || o.FirstSeq != 3 || o.LastSeq != 20 || !o.FirstEventAt.Equal(base) {
			t.Errorf("order %v: %+v, want %+v", perm, o, want.Order)
		}
		if !slices.Equal(r.Applied, []uint64{3, 9, 20}) {
			t.Errorf("order %v: applied %v, want [3 9 20]", perm, r.Applied)
		}
	}
}

func TestRecordHasAppliedAndPrune(t *testing.T) {
	r := record{Applied: []uint64{4, 7, 9}, AppliedFloor: 2}
	for seq, want := range map[uint64]bool{1: true, 2: true, 3: false, 4: true, 7: true, 8: false, 9: true, 10: false} {
		if got := r.hasApplied(seq); got != want {
			t.Errorf("hasApplied(%d) = %t, want %t", seq, got, want)
		}
	}
	if r.apply(Event{Sequence: 7}) || r.apply(Event{Sequence: 1}) {
		t.Error("apply of an applied sequence changed the record")
	}
	r.prune(7)
	if r.AppliedFloor != 7 || !slices.Equal(r.Applied, []uint64{9}) {
		t.Errorf("after prune(7): floor %d, applied %v; want 7, [9]", r.AppliedFloor, r.Applied)
	}
	r.prune(3) // never lowers the floor
	if r.AppliedFloor != 7 {
		t.Errorf("prune(3) moved the floor to %d", r.AppliedFloor)
	}
	r.prune(9)
	if r.Applied != nil || !r.hasApplied(8) {
		t.Errorf("after prune(9): applied %v, want nil", r.Applied)
	}
}

// A withheld sequence counts as handled (a later apply is a duplicate)
// and is pruned with the applied ones.
func TestRecordWithheld(t *testing.T) {
	r := record{Applied: []uint64{4}, Withheld: []uint64{6, 9}, AppliedFloor: 2}
	if !r.hasApplied(6) || !r.hasApplied(9) || r.hasApplied(7) {
		t.Errorf("hasApplied with withheld %v: 6 %t, 9 %t, 7 %t; want true, true, false", r.Withheld, r.hasApplied(6), r.hasApplied(9), r.hasApplied(7))
	}
	if r.apply(Event{Sequence: 6}) || r.Events != 0 {
		t.Errorf("apply of a withheld event changed the record: %+v", r)
	}
	r.prune(6)
	if r.Applied != nil || !slices.Equal(r.Withheld, []uint64{9}) {
		t.Errorf("after prune(6): applied %v, withheld %v; want nil, [9]", r.Applied, r.Withheld)
	}
}

// The bucket's values keep the JSON they had when Order carried the
// bookkeeping itself: a store written before reads the same, and what is
// written now reads the same in a binary from before.
func TestRecordJSONIsUnchanged(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		rec  record
		json string // as json.Marshal(Order) wrote it when Order had Applied and AppliedFloor
	}{
		{
			name: "with bookkeeping",
			rec: record{Order: Order{OrderID: "o-1", Status: "in-transit", LastEvent: "shipped", LastSeq: 9, FirstSeq: 3, Events: 3,
				FirstEventAt: at, LastEventAt: at.Add(time.Minute), UpdatedAt: at.Add(2 * time.Minute)}, Applied: []uint64{7, 9}, AppliedFloor: 5},
			json: `{"order_id":"o-1","status":"in-transit","last_event":"shipped","last_seq":9,"first_seq":3,"events":3,"first_event_at":"2026-03-01T12:00:00.123456789Z","last_event_at":"2026-03-01T12:01:00.123456789Z","updated_at":"2026-03-01T12:02:00.123456789Z","applied":[7,9],"applied_floor":5}`,
		},
		{
			name: "pruned",
			rec: record{Order: Order{OrderID: "o-2", Status: "created", LastEvent: "created", LastSeq: 4, FirstSeq: 4, Events: 1,
				FirstEventAt: at, LastEventAt: at, UpdatedAt: at}},
			json: `{"order_id":"o-2","status":"created","last_event":"created","last_seq":4,"first_seq":4,"events":1,"first_event_at":"2026-03-01T12:00:00.123456789Z","last_event_at":"2026-03-01T12:00:00.123456789Z","updated_at":"2026-03-01T12:00:00.123456789Z"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.json {
				t.Errorf("json.Marshal(record) =\n%s\nwant\n%s", b, tt.json)
			}
			var r record
			if err := json.Unmarshal([]byte(tt.json), &r); err != nil {
				t.Fatal(err)
			}
			if r.OrderID != tt.rec.OrderID || r.LastSeq != tt.rec.LastSeq || !r.UpdatedAt.Equal(tt.rec.UpdatedAt) ||
				!slices.Equal(r.Applied, tt.rec.Applied) || r.AppliedFloor != tt.rec.AppliedFloor {
				t.Errorf("json.Unmarshal = %+v, want %+v", r, tt.rec)
			}
			// The public Order carries the state only.
			ob, err := json.Marshal(r.Order)
			if err != nil {
				t.Fatal(err)
			}
			var keys map[string]any
			if err := json.Unmarshal(ob, &keys); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"applied", "applied_floor"} {
				if _, ok := keys[k]; ok {
					t.Errorf("Order JSON has %q: %s", k, ob)
				}
			}
			if len(keys) != 9 {
				t.Errorf("Order JSON has %d keys, want the 9 of the projected state: %s", len(keys), ob)
			}
		})
	}
}

// A tail past maxHistoryTail is sealed above the ack floor; an event that
// arrives below what was sealed marks the index out of order.
func TestHistoryTailBound(t *testing.T) {
	var r record
	for seq := uint64(1001); seq <= 2300; seq++ {
		r.indexHistory(seq)
	}
	chunks := r.sealable()
	if len(chunks) != 1 || chunks[0][0] != 1001 || len(chunks[0]) != HistoryChunk {
		t.Fatalf("sealable: %d chunks", len(chunks))
	}
	p := &Projection{hist: nil}
	if msgs := p.sealWrites("o", &r, r.History); msgs != nil {
		t.Fatal("sealed without a history bucket")
	}
	p.histPrefix = "$KV.H."
	p.hist = fakeKV{}
	msgs := p.sealWrites("o", &r, r.History)
	if len(msgs) != 1 || msgs[0].Subject != "$KV.H.o.0" || r.HistoryChunks != 1 || len(r.History) != 1300-HistoryChunk || r.HistorySealedMax != 1256 {
		t.Fatalf("sealWrites: %v, %d chunks, tail %d, sealed max %d", msgs, r.HistoryChunks, len(r.History), r.HistorySealedMax)
	}
	if r.HistoryUnordered {
		t.Fatal("out of order before any late event")
	}
	r.indexHistory(999) // a retry, late
	if !r.HistoryUnordered || r.History[0] != 999 {
		t.Fatalf("a late event: unordered %v, tail starts %d", r.HistoryUnordered, r.History[0])
	}
}

// Two processors (two cluster nodes) applying events of one order from the same record both seal
// its next chunk, and the chunk write has no compare-and-set: the record that wins may name the
// other's chunk, so both must write the same one, whatever event each applied (here a late retry
// on one, below the tail, and a new event on the other).
func TestHistorySealSameFromSameRecord(t *testing.T) {
	var base record
	for seq := uint64(1001); seq < 1001+maxHistoryTail+HistoryChunk; seq++ {
		base.apply(Event{OrderID: "o", Sequence: seq})
		base.indexHistory(seq)
	}
	p := &Projection{hist: fakeKV{}, histPrefix: "$KV.H."}
	var chunks []string
	for _, seq := range []uint64{9000, 999} {
		next := base
		next.Applied, next.History = slices.Clone(base.Applied), slices.Clone(base.History)
		next.apply(Event{OrderID: "o", Sequence: seq})
		next.indexHistory(seq)
		msgs := p.sealWrites("o", &next, base.History)
		var data []byte
		for _, m := range msgs {
			data = append(data, m.Data...)
		}
		chunks = append(chunks, string(data))
		if !slices.Contains(next.History, seq) && !strings.Contains(string(data), strconv.FormatUint(seq, 10)) {
			t.Errorf("event %d: neither in the tail nor sealed", seq)
		}
		if n := next.historyCount(); n != next.Events {
			t.Errorf("event %d: the index lists %d of %d events", seq, n, next.Events)
		}
		if len(msgs) != 1 {
			t.Fatalf("event %d: %d chunks sealed, want 1 (the tail is past its bound)", seq, len(msgs))
		}
		if seq == 999 && next.History[0] == 999 && !next.HistoryUnordered {
			t.Errorf("event %d stayed in the tail below the sealed chunk, but the index says it is in order", seq)
		}
	}
	if chunks[0] != chunks[1] {
		t.Fatalf("two processors sealed chunk 0 of one record differently:\n%.80s...\n%.80s...", chunks[0], chunks[1])
	}
}

// fakeKV stands for a history bucket sealWrites never calls.
type fakeKV struct{ jetstream.KeyValue }

// A recovered event's retry that fell due while the processor was paused
// (no Run) is handed to the next Run, not dropped.
func TestRetryDueDuringPauseFiresOnResume(t *testing.T) {
	p := &Processor{retries: retries{pending: map[*retry]struct{}{}}}
	got := make(chan uint64, 1)
	enqueue := func(m delivery) bool {
		md, _ := m.Metadata()
		got <- md.Sequence.Stream
		return true
	}
	r := &recoveredMsg{m: &jetstream.RawStreamMsg{Sequence: 7}, p: p}
	p.retries.mu.Lock()
	p.retries.arm(&retry{r: r, due: time.Now().Add(time.Hour)})
	p.retries.mu.Unlock()
	p.retries.stop() // Run returns: the retry is held
	for e := range slices.Values(p.retries.held) {
		e.due = time.Now().Add(-time.Minute) // it fell due during the pause
	}
	p.requeue.Store(&enqueue)
	p.retries.start() // the next Run
	defer p.retries.stop()
	select {
	case seq := <-got:
		if seq != 7 {
			t.Fatalf("redelivered %d, want 7", seq)
		}
	case <-time.After(time.Minute):
		t.Fatal("the retry that fell due during the pause was never redelivered")
	}
}
