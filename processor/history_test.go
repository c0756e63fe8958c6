package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// checkHistory compares, for up to n orders (the hottest first, then
// random ones), the history index with the oracle: every event listed in
// stream order with its bytes, and the state as of random sequences and
// times equal to the oracle's fold up to there.
func (e *env) checkHistory(t testing.TB, p *processor.Projection, n int, r *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	want := e.oracle(t)
	s, err := e.js.Stream(ctx, e.cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.SortStableFunc(ids, func(a, b string) int { return len(want[b]) - len(want[a]) })
	hot, rest := ids[:min(3, len(ids))], ids[min(3, len(ids)):]
	r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	sample := append(slices.Clone(hot), rest[:min(max(n-len(hot), 0), len(rest))]...)
	for _, id := range sample {
		evs := want[id]
		var got []processor.HistoryEvent
		for from := 0; ; {
			page, err := p.History(ctx, s, id, from, 1+r.IntN(300))
			if err != nil {
				t.Fatalf("history of %q from %d: %v", id, from, err)
			}
			if page.Total != len(evs) || page.Unindexed != 0 {
				t.Fatalf("history of %q: total %d, unindexed %d; the stream holds %d of its events", id, page.Total, page.Unindexed, len(evs))
			}
			got = append(got, page.Events...)
			if page.Next == 0 {
				break
			}
			if page.Next != from+len(page.Events) {
				t.Fatalf("history of %q: page from %d has %d events but next is %d", id, from, len(page.Events), page.Next)
			}
			from = page.Next
		}
		if len(got) != len(evs) {
			t.Fatalf("history of %q lists %d events, the oracle %d", id, len(got), len(evs))
		}
		for i, g := range got {
			w := evs[i]
			if g.Position != i || g.Sequence != w.Seq || !g.Retained || g.Replaced || g.Subject != w.Subject || string(g.Data) != string(w.Data) || !g.Time.Equal(w.Time) ||
				g.Header.Get("Nats-Sequence") != "" || g.Header.Get("Nats-Stream") != "" {
				t.Fatalf("history of %q, event %d: got %+v, want seq %d %s %s", id, i, g, w.Seq, w.Subject, w.Data)
			}
		}
		// As of random points, by sequence and by time.
		for range 4 {
			k := r.IntN(len(evs))
			for _, point := range []processor.AsOfPoint{{Seq: evs[k].Seq}, {Time: evs[k].Time}} {
				var upto []oracleEvent
				for _, ev := range evs {
					if (point.Seq == 0 || ev.Seq <= point.Seq) && (point.Time.IsZero() || !ev.Time.After(point.Time)) {
						upto = append(upto, ev)
					}
				}
				st, err := p.AsOf(ctx, s, id, point)
				if err != nil {
					t.Fatalf("%q as of %+v: %v", id, point, err)
				}
				wo := foldOracle(id, upto)
				wo.UpdatedAt = wo.LastEventAt
				if st.Order != wo || !st.Complete || st.Folded != len(upto) {
					t.Fatalf("%q as of %+v:\n got %+v (folded %d, complete %v)\nwant %+v (%d events)", id, point, st.Order, st.Folded, st.Complete, wo, len(upto))
				}
			}
		}
		// Before its first event, the order did not exist.
		if evs[0].Seq > 1 {
			if _, err := p.AsOf(ctx, s, id, processor.AsOfPoint{Seq: evs[0].Seq - 1}); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("%q as of sequence %d, before its first event: %v, want not found", id, evs[0].Seq-1, err)
			}
		}
		// At its last event, the fold is the live projection's state.
		live, err := p.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.AsOf(ctx, s, id, processor.AsOfPoint{})
		if err != nil {
			t.Fatal(err)
		}
		live.UpdatedAt = st.Order.UpdatedAt
		if st.Order != live {
			t.Fatalf("%q as of now: %+v, live projection %+v", id, st.Order, live)
		}
	}
}

// An order's history index lists every event it applied, in stream
// order, across sealed chunks and the record's tail; the record stays
// small however many events the order has; as-of folds match an
// independent fold.
func TestHistoryIndex(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(7, 7))
	var msgs []*nats.Msg
	// One hot order (several chunks), a few warm ones, many cold ones,
	// interleaved; retried deliveries reorder some of them.
	for i := range 3000 {
		id := fmt.Sprintf("cold-%d", r.IntN(400))
		switch x := r.IntN(10); {
		case x < 4:
			id = "hot"
		case x < 6:
			id = fmt.Sprintf("warm-%d", r.IntN(5))
		}
		msgs = append(msgs, event("orders."+[]string{"created", "paid", "shipped"}[i%3], id, []string{"", "open", "done"}[r.IntN(3)], ""))
	}
	p := e.projection(t)
	e.start(t, &flaky{inner: p, failShare: 17})
	// In waves: a chunk is sealed once the consumer's ack floor has
	// passed its events, which a later event of the order carries.
	for wave := range 3 {
		e.publish(t, msgs[wave*1000:(wave+1)*1000])
		e.waitCaughtUp(t, 60*time.Second)
	}
	kv, err := e.js.KeyValue(context.Background(), e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Events        int      `json:"events"`
		History       []uint64 `json:"history"`
		HistoryChunks int      `json:"history_chunks"`
	}
	var size int
	// The hot order's record keeps only the unsealed tail: once the
	// processor's view of the ack floor (refreshed every second) has
	// passed the earlier waves, the next event seals them.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		e.publish(t, []*nats.Msg{event("orders.paid", "hot", "", "")})
		e.waitCaughtUp(t, 60*time.Second)
		entry, err := kv.Get(context.Background(), "hot")
		if err != nil {
			return err
		}
		size = len(entry.Value())
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.HistoryChunks*processor.HistoryChunk+len(rec.History) != rec.Events {
			t.Fatalf("hot order: %d events, but %d chunks and a tail of %d", rec.Events, rec.HistoryChunks, len(rec.History))
		}
		if len(rec.History) >= processor.HistoryChunk {
			return fmt.Errorf("hot order: a tail of %d sequences, %d chunks", len(rec.History), rec.HistoryChunks)
		}
		return nil
	})
	t.Logf("hot order: %d events, %d chunks, a tail of %d, record %d bytes", rec.Events, rec.HistoryChunks, len(rec.History), size)
	e.checkProjection(t)
	e.checkHistory(t, p, 40, r)

	// A chunk the history bucket's limits dropped: its events show as no
	// longer retained (sequences unknown), and a fold past them says it
	// is incomplete.
	ctx := context.Background()
	hs, err := e.js.Stream(ctx, "KV_"+e.cfg.Processor.HistoryBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := hs.Purge(ctx, jetstream.WithPurgeSubject("$KV."+e.cfg.Processor.HistoryBucket()+".hot.0")); err != nil {
		t.Fatal(err)
	}
	s, _ := e.js.Stream(ctx, e.cfg.Stream.Name)
	page, err := p.History(ctx, s, "hot", 250, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if gone := ev.Position < processor.HistoryChunk; ev.Retained == gone || gone && ev.Sequence != 0 {
			t.Errorf("after chunk 0 went: %+v", ev)
		}
	}
	st, err := p.AsOf(ctx, s, "hot", processor.AsOfPoint{})
	if err != nil || st.Complete || st.NotRetained != processor.HistoryChunk || st.Folded != rec.Events-processor.HistoryChunk {
		t.Errorf("as of now after chunk 0 went: %+v, %v", st, err)
	}
	// A record whose index was written by hand to claim more than it has
	// is refused with an error, not followed.
	if _, err := kv.Put(ctx, "forged", []byte(`{"order_id":"forged","events":3,"history_chunks":4611686018427387904}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.History(ctx, s, "forged", 0, 10); err == nil || !strings.Contains(err.Error(), "history index lists") {
		t.Errorf("forged record: %v", err)
	}
}

// Events the stream no longer holds are listed as such, by sequence; a
// point before the first retained one says so; a later point folds what
// is left and says it is incomplete.
func TestHistoryRetention(t *testing.T) {
	e := newEnv(t)
	var msgs []*nats.Msg
	for i := range 20 {
		msgs = append(msgs, event("orders.step", "o-1", fmt.Sprintf("s%d", i), ""))
	}
	seqs := e.publish(t, msgs)
	p := e.projection(t)
	e.start(t, p)
	e.waitCaughtUp(t, 30*time.Second)
	ctx := context.Background()
	s, err := e.js.Stream(ctx, e.cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Retention removes the first 8 (a purge up to them does the same).
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(seqs[8])); err != nil {
		t.Fatal(err)
	}
	page, err := p.History(ctx, s, "o-1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 20 || page.Next != 0 {
		t.Fatalf("history lists %d events (next %d), want all 20", len(page.Events), page.Next)
	}
	for i, ev := range page.Events {
		if ev.Sequence != seqs[i] || ev.Retained != (i >= 8) {
			t.Errorf("event %d: sequence %d retained %v; want sequence %d retained %v", i, ev.Sequence, ev.Retained, seqs[i], i >= 8)
		}
	}
	if _, err := p.AsOf(ctx, s, "o-1", processor.AsOfPoint{Seq: seqs[5]}); !errors.Is(err, processor.ErrNotRetained) {
		t.Errorf("as of sequence %d (removed): %v, want ErrNotRetained", seqs[5], err)
	}
	st, err := p.AsOf(ctx, s, "o-1", processor.AsOfPoint{Seq: seqs[12]})
	if err != nil {
		t.Fatal(err)
	}
	if st.Complete || st.NotRetained != 8 || st.Folded != 5 || st.Order.Status != "s12" || st.Last != seqs[12] {
		t.Errorf("as of sequence %d: %+v; want 5 folded, 8 not retained, status s12, incomplete", seqs[12], st)
	}
	// Paging bounds: a negative position is refused, a huge limit capped.
	if _, err := p.History(ctx, s, "o-1", -1, 10); err == nil {
		t.Error("a negative position was accepted")
	}
	if page, err := p.History(ctx, s, "o-1", 25, 1<<30); err != nil || len(page.Events) != 0 || page.Next != 0 {
		t.Errorf("past the end: %+v, %v", page, err)
	}
	if _, err := p.History(ctx, s, "nobody", 0, 10); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("unknown order: %v", err)
	}

	// An index that names another order's event (planted by hand, or a
	// sequence reused after a power cut): listed as replaced, not folded.
	other := e.publish(t, []*nats.Msg{event("orders.step", "o-2", "theirs", "")})[0]
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.Unmarshal(entry.Value(), &raw)
	raw["history"].([]any)[19] = other
	forged, _ := json.Marshal(raw)
	if _, err := kv.Put(ctx, "o-1", forged); err != nil {
		t.Fatal(err)
	}
	page, err = p.History(ctx, s, "o-1", 19, 1)
	if err != nil || len(page.Events) != 1 || !page.Events[0].Replaced || page.Events[0].Sequence != other {
		t.Errorf("a planted sequence: %+v, %v", page, err)
	}
	st, err = p.AsOf(ctx, s, "o-1", processor.AsOfPoint{})
	if err != nil || st.Order.Status != "s18" || st.Folded != 11 || st.NotRetained != 9 {
		t.Errorf("as of now with a planted sequence: %+v, %v; want status s18 of 11 folded, 9 not retained (the lost one too)", st, err)
	}
}

var hotEvents = flag.Int("history.hot", 100_000, "events of the one hot order in TestHistoryOfAHotOrder")

// An order with 100,000 events: its record stays small (the index is
// sealed into chunks as the ack floor passes), a page anywhere in its
// history costs one chunk read and its events, and a fold over all of it
// holds one chunk of events at a time.
func TestHistoryOfAHotOrder(t *testing.T) {
	e := newEnv(t, func(c *orderstore.Config) { c.Processor.MaxAckPending = 2000 })
	p := e.projection(t)
	e.start(t, p)
	n := *hotEvents
	msgs := make([]*nats.Msg, 0, 10_000)
	for i := range n {
		msgs = append(msgs, event("orders.step", "hot", fmt.Sprintf("s%d", i), ""))
		if len(msgs) == cap(msgs) || i == n-1 {
			e.publish(t, msgs)
			msgs = msgs[:0]
		}
	}
	e.waitCaughtUp(t, 5*time.Minute)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	// The tail holds at most 4 chunks' worth, and the record (with the
	// idempotency bookkeeping, which the ack floor prunes) stays far below
	// max_payload.
	var tail struct {
		History []uint64 `json:"history"`
	}
	json.Unmarshal(entry.Value(), &tail)
	if size := len(entry.Value()); size > 256<<10 || len(tail.History) > 5*processor.HistoryChunk {
		t.Errorf("the hot order's record is %d bytes, its history tail %d sequences", size, len(tail.History))
	}
	s, _ := e.js.Stream(ctx, e.cfg.Stream.Name)
	page, err := p.History(ctx, s, "hot", n-100, 1000)
	if err != nil || len(page.Events) != 100 || page.Next != 0 || page.Events[99].Status != fmt.Sprintf("s%d", n-1) || page.Total != n {
		t.Fatalf("the last page: %d events, next %d, total %d, %v", len(page.Events), page.Next, page.Total, err)
	}
	page, err = p.History(ctx, s, "hot", n/2, 10)
	if err != nil || len(page.Events) != 10 || page.Events[0].Status != fmt.Sprintf("s%d", n/2) {
		t.Fatalf("a page in the middle: %+v, %v", page.Events, err)
	}
	st, err := p.AsOf(ctx, s, "hot", processor.AsOfPoint{Seq: page.Events[0].Sequence})
	if err != nil || st.Folded != n/2+1 || st.Order.Status != fmt.Sprintf("s%d", n/2) || !st.Complete {
		t.Fatalf("as of the middle: %+v, %v", st, err)
	}
	var rec struct {
		History       []uint64 `json:"history"`
		HistoryChunks int      `json:"history_chunks"`
	}
	json.Unmarshal(entry.Value(), &rec)
	t.Logf("%d events: record %d bytes, %d chunks, a tail of %d", n, len(entry.Value()), rec.HistoryChunks, len(rec.History))
}

// A processor whose view of an order's record is stale (its cache, or a
// replica catching up, as a node that restarted in a cluster has) never
// seals a history chunk from it: its record write loses the
// compare-and-set and is retried, but the chunk it would have written
// first has no such guard and would replace the one the current record
// names. Two projections share the buckets, as two nodes' processors do.
func TestStaleRecordSealsNoChunk(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	stale, current := e.projection(t), e.projection(t)
	ev := func(seq, floor uint64) processor.Event {
		return processor.Event{OrderID: "o", Status: "paid", Type: "paid", Sequence: seq, AckFloor: floor, Time: time.Now()}
	}
	apply := func(p *processor.Projection, evs ...processor.Event) {
		t.Helper()
		for _, err := range p.HandleBatch(ctx, [][]processor.Event{evs})[0] {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// stale writes (and caches) events 1..255 and 257; 256 is late.
	var first []processor.Event
	for seq := uint64(1); seq <= 257; seq++ {
		if seq != 256 {
			first = append(first, ev(seq, 0))
		}
	}
	apply(stale, first...)
	// current applies 256, then 258 once the floor passed 257: it seals
	// chunk 0 = 1..256.
	apply(current, ev(256, 255))
	apply(current, ev(258, 257))
	// stale, from its cached record (no 256), gets event 400 with the
	// floor at 300: every sequence it holds is below it.
	apply(stale, ev(400, 300))
	hkv, err := e.js.KeyValue(ctx, e.cfg.Processor.HistoryBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := hkv.Get(ctx, "o.0")
	if err != nil {
		t.Fatal(err)
	}
	var chunk []uint64
	if err := json.Unmarshal(entry.Value(), &chunk); err != nil {
		t.Fatal(err)
	}
	for i, seq := range chunk {
		if seq != uint64(i+1) {
			t.Fatalf("chunk 0 of o holds %d at %d, want 1..256 (written from a stale record without 256): %v", seq, i, chunk[max(0, i-2):min(len(chunk), i+3)])
		}
	}
	if len(chunk) != processor.HistoryChunk {
		t.Fatalf("chunk 0 of o holds %d sequences, want %d", len(chunk), processor.HistoryChunk)
	}
	// And stale's event is in the record, after the chunk.
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := kv.Get(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		History       []uint64 `json:"history"`
		HistoryChunks int      `json:"history_chunks"`
	}
	if err := json.Unmarshal(rec.Value(), &r); err != nil {
		t.Fatal(err)
	}
	if r.HistoryChunks != 1 || !slices.Equal(r.History, []uint64{257, 258, 400}) {
		t.Fatalf("record of o: %d chunks, tail %v; want 1 chunk, tail [257 258 400]", r.HistoryChunks, r.History)
	}
}

// Events far larger than usual (a producer may send max_payload each) are
// read a window at a time: a page reads little more than its byte bound,
// not all its events (up to 1,000) to keep 4 MiB of them, and a fold holds
// a window of events ahead of it, not a chunk (256): memory stays bounded
// whatever the events' sizes. The bytes the reading connection received
// tell what was read.
func TestHistoryReadsLargeEventsAWindowAtATime(t *testing.T) {
	e := newEnv(t)
	pad := strings.Repeat("x", 300<<10)
	var msgs []*nats.Msg
	for range 100 {
		m := nats.NewMsg("orders.step")
		m.Data = []byte(`{"order_id":"big","pad":"` + pad + `"}`)
		msgs = append(msgs, m)
	}
	e.publish(t, msgs)
	p := e.projection(t)
	e.start(t, p)
	e.waitCaughtUp(t, 30*time.Second)
	ctx := context.Background()
	nc := embeddedtest.Connect(t, e.srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, e.cfg.Stream.Name) // the events are read on nc
	if err != nil {
		t.Fatal(err)
	}
	received := func() int { return int(nc.Stats().InBytes) }
	// One window of reads, with room for a get's own encoding.
	window := processor.HistoryGetParallel * 2 * len(msgs[0].Data)

	before := received()
	page, err := p.History(ctx, s, "big", 0, len(msgs))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Events); n == 0 || n >= len(msgs) || page.Next != n {
		t.Fatalf("a page of 100 events of 300 KiB lists %d (next %d), want it to stop at %d bytes", n, page.Next, processor.MaxHistoryPageBytes)
	}
	if got, most := received()-before, processor.MaxHistoryPageBytes+window; got > most {
		t.Errorf("a page of %d events read %d bytes of events, want at most %d (its bound and one window of reads)", len(page.Events), got, most)
	}

	before = received()
	folded, ahead := 0, 0
	st, err := p.FoldEvents(ctx, s, "big", processor.AsOfPoint{}, func(ev processor.Event) error {
		ahead = max(ahead, received()-before-folded)
		folded += len(ev.Data)
		return nil
	})
	if err != nil || st.Folded != len(msgs) {
		t.Fatalf("fold: %d events, %v; want %d", st.Folded, err, len(msgs))
	}
	if ahead > window {
		t.Errorf("the fold read %d bytes of events ahead of what it had folded, want at most one window of reads (%d)", ahead, window)
	}
}
