package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/processor"
)

var types = []string{"created", "paid", "shipped", "delivered", "cancelled"}

// orderEvents makes n events over orders orders, each with a Nats-Msg-Id,
// and re-sends dup of them with the same id (stored once by the stream).
func orderEvents(n, orders, dup int, seed uint64) []*nats.Msg {
	r := rand.New(rand.NewPCG(seed, 1))
	var msgs []*nats.Msg
	for i := range n {
		id := fmt.Sprintf("order-%04d", r.IntN(orders))
		status := ""
		if r.IntN(10) == 0 {
			status = "on-hold"
		}
		msgs = append(msgs, event("orders."+types[r.IntN(len(types))], id, status, fmt.Sprintf("evt-%d-%d", seed, i)))
		if dup > 0 && r.IntN(n/dup) == 0 {
			msgs = append(msgs, msgs[len(msgs)-1]) // same Nats-Msg-Id: a publisher retry
		}
	}
	return msgs
}

// flaky wraps the projection: for a share of events it fails the first
// delivery before applying (a transient error), or applies and then fails
// (the crash-between-apply-and-ack case), forcing redeliveries.
type flaky struct {
	inner     *processor.Projection
	failShare int // 1 in failShare events fail their first delivery
	calls     atomic.Int64
}

func (f *flaky) Handle(ctx context.Context, ev processor.Event) error {
	return f.HandleBatch(ctx, [][]processor.Event{{ev}})[0][0]
}

// Withhold is the projection's: the processor's dead-letter path needs it.
func (f *flaky) Withhold(ctx context.Context, ev processor.Event) (bool, error) {
	return f.inner.Withhold(ctx, ev)
}

func (f *flaky) HandleBatch(ctx context.Context, orders [][]processor.Event) [][]error {
	f.calls.Add(1)
	out := make([][]error, len(orders))
	var pass [][]processor.Event
	type pos struct{ order, ev int }
	var where [][]pos
	applyThenFail := map[pos]bool{}
	for o, evs := range orders {
		out[o] = make([]error, len(evs))
		var keep []processor.Event
		var at []pos
		for i, ev := range evs {
			if ev.Delivered == 1 && ev.Sequence%uint64(f.failShare) == 0 {
				if (ev.Sequence/uint64(f.failShare))%2 == 0 {
					out[o][i] = errors.New("transient: injected before apply")
					continue
				}
				applyThenFail[pos{o, i}] = true
			}
			keep = append(keep, ev)
			at = append(at, pos{o, i})
		}
		if len(keep) > 0 {
			pass = append(pass, keep)
			where = append(where, at)
		}
	}
	if len(pass) > 0 {
		res := f.inner.HandleBatch(ctx, pass)
		for k := range pass {
			for j, p := range where[k] {
				out[p.order][p.ev] = res[k][j]
				if applyThenFail[p] && res[k][j] == nil {
					out[p.order][p.ev] = errors.New("transient: injected after apply")
				}
			}
		}
	}
	return out
}

// Test 1: 10,000 events over 1,000 orders, with publisher duplicates and
// forced redeliveries: the projection equals the fold.
func TestProjectionEqualsFold(t *testing.T) {
	e := newEnv(t)
	msgs := orderEvents(10_000, 1_000, 500, 1)
	seqs := e.publish(t, msgs)
	if last := seqs[len(seqs)-1]; last != 10_000 {
		t.Fatalf("stream holds %d events after dedupe, want 10000 (duplicates stored?)", last)
	}
	f := &flaky{inner: e.projection(t), failShare: 10}
	p, _ := e.start(t, f)
	e.waitCaughtUp(t, 60*time.Second)
	e.checkProjection(t)
	e.checkHistory(t, f.inner, 30, rand.New(rand.NewPCG(1, 1)))
	// The projection's writes went in atomic batches (one fsync per batch
	// under sync_interval "always"), not one by one.
	kvs, _ := e.js.Stream(context.Background(), "KV_"+e.cfg.Processor.ProjectionBucket)
	batched := 0
	kinfo, _ := kvs.Info(context.Background())
	for seq := kinfo.State.LastSeq - 200; seq <= kinfo.State.LastSeq; seq++ {
		if m, err := kvs.GetMsg(context.Background(), seq); err == nil && m.Header.Get("Nats-Batch-Id") != "" {
			batched++
		}
	}
	if batched == 0 {
		t.Error("no projection write went in an atomic batch")
	}
	st := p.Stats()
	if st.Failed < 500 || st.Duplicates < 200 {
		t.Errorf("stats %+v: the test did not force redeliveries (want >=500 failures, >=200 duplicates)", st)
	}
	if st.DeadLettered != 0 || st.Processed+st.Duplicates < 10_000 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("stats: %+v", st)
}

// Test 3: two processors on the same durable at once, each with its own
// connection and projection cache, with redeliveries: same result.
func TestTwoProcessorsSameDurable(t *testing.T) {
	e := newEnv(t)
	e.publish(t, orderEvents(6_000, 300, 0, 3))
	p1, _ := e.start(t, &flaky{inner: e.projection(t), failShare: 7})
	p2, _ := e.start(t, &flaky{inner: e.projection(t), failShare: 7})
	// More while both run.
	e.publish(t, orderEvents(4_000, 300, 0, 4))
	e.waitCaughtUp(t, 60*time.Second)
	e.checkProjection(t)
	e.checkHistory(t, e.projection(t), 30, rand.New(rand.NewPCG(3, 3)))
	s1, s2 := p1.Stats(), p2.Stats()
	if s1.Processed == 0 || s2.Processed == 0 {
		t.Errorf("one processor did nothing: %+v %+v", s1, s2)
	}
	t.Logf("p1 %+v\np2 %+v", s1, s2)
}

// Test 4a: poison events are dead-lettered at once with the documented headers.
func TestPoisonGoesToDLQAtOnce(t *testing.T) {
	e := newEnv(t)
	bad := []*nats.Msg{
		{Subject: "orders.created", Data: []byte("not json"), Header: nats.Header{"Nats-Msg-Id": {"bad-1"}, "X-Trace": {"t1"}}},
		{Subject: "orders.created", Data: []byte(`{"status":"x"}`)},
		{Subject: "orders.paid", Data: []byte(`{"order_id":"has space"}`)},
		{Subject: "orders.paid", Data: []byte(`{"order_id":42}`)},
		{Subject: "orders.paid", Data: []byte(`[1,2]`)},
	}
	good := event("orders.created", "o-1", "", "")
	seqs := e.publish(t, append(bad, good))
	var seen atomic.Int64
	p, _ := e.start(t, processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		seen.Add(1)
		return nil
	}))
	e.waitCaughtUp(t, 10*time.Second)
	if seen.Load() != 1 {
		t.Errorf("handler saw %d events, want only the good one", seen.Load())
	}
	dls, _, err := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dls), len(bad))
	}
	for i, d := range dls {
		if d.Subject != bad[i].Subject || d.OriginalSequence != seqs[i] || d.Deliveries != 1 || !d.Poison || d.Error == "" || string(d.Data) != string(bad[i].Data) {
			t.Errorf("dead letter %d = %+v, want subject %s seq %d, 1 delivery, poison, error, original data", i, d, bad[i].Subject, seqs[i])
		}
	}
	if h := dls[0].Header; h.Get("X-Trace") != "t1" || h.Get(processor.HeaderOriginalMsgID) != "bad-1" {
		t.Errorf("original headers not kept: %v", h)
	}
	for i, want := range []string{"not JSON: invalid character 'o' in literal null (expecting 'u') at byte 2 (line 1, column 2)", "no order_id", "cannot be a key", `"order_id" is a JSON number`, "the payload is a JSON array, want an object"} {
		if !contains(dls[i].Error, want) {
			t.Errorf("dead letter %d error %q lacks %q", i, dls[i].Error, want)
		}
	}
	if st := p.Stats(); st.Poison != uint64(len(bad)) || st.DeadLettered != uint64(len(bad)) {
		t.Errorf("stats %+v", st)
	}
}

// Test 4b: a handler that always fails dead-letters after exactly
// max_deliver deliveries; replay moves the event back and the projection
// then includes it.
func TestFailingEventDeadLettersAfterMaxDeliverAndReplays(t *testing.T) {
	e := newEnv(t)
	proj := e.projection(t)
	var broken atomic.Bool
	broken.Store(true)
	var tries atomic.Int64
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		if ev.OrderID == "o-bad" && broken.Load() {
			tries.Add(1)
			return errors.New("downstream refused")
		}
		return proj.Handle(ctx, ev)
	})
	e.publish(t, []*nats.Msg{event("orders.created", "o-ok", "", ""), event("orders.created", "o-bad", "", "m-bad"), event("orders.paid", "o-ok", "", "")})
	p, stop := e.start(t, h)
	e.waitCaughtUp(t, 20*time.Second)
	if got := tries.Load(); got != int64(e.cfg.Processor.MaxDeliver) {
		t.Errorf("handler tried %d times, want max_deliver = %d", got, e.cfg.Processor.MaxDeliver)
	}
	dls, _, _ := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10)
	if len(dls) != 1 || dls[0].Deliveries != uint64(e.cfg.Processor.MaxDeliver) || dls[0].Poison || !contains(dls[0].Error, "downstream refused") || dls[0].OriginalSequence != 2 {
		t.Fatalf("dead letters = %+v, want one after %d deliveries", dls, e.cfg.Processor.MaxDeliver)
	}
	if st := p.Stats(); st.DeadLettered != 1 || st.Failed != uint64(e.cfg.Processor.MaxDeliver-1) {
		t.Errorf("stats %+v", st)
	}
	e.checkProjection(t) // o-bad is absent: it was dead-lettered
	if _, err := proj.Get(context.Background(), "o-bad"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("o-bad in the projection before replay: %v", err)
	}

	broken.Store(false)
	newSeq, err := processor.Replay(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, dls[0].Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if newSeq != 4 {
		t.Errorf("replayed as seq %d, want 4", newSeq)
	}
	// Replaying again after it is gone fails cleanly.
	if _, err := processor.Replay(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, dls[0].Sequence); err == nil {
		t.Error("second replay of the same dead letter succeeded")
	}
	e.waitCaughtUp(t, 10*time.Second)
	embeddedtest.WaitFor(t, 5*time.Second, func() error {
		o, err := proj.Get(context.Background(), "o-bad")
		if err != nil {
			return err
		}
		if o.LastSeq != 4 || o.Events != 1 {
			return fmt.Errorf("o-bad = %+v", o)
		}
		return nil
	})
	if dls, _, _ := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10); len(dls) != 0 {
		t.Errorf("dead letters after replay: %+v", dls)
	}
	e.checkProjection(t)
	stop()
	s, _ := e.js.Stream(context.Background(), e.cfg.Stream.Name)
	m, _ := s.GetMsg(context.Background(), 4)
	if m.Header.Get(processor.HeaderReplayOf) != "2" || m.Header.Get(processor.HeaderOriginalMsgID) != "m-bad" {
		t.Errorf("replayed headers %v", m.Header)
	}
}

// Test 5: shutdown in the middle of a burst: what was acked was applied and
// is not processed again; the rest is processed after a restart.
func TestGracefulShutdownDuringBurst(t *testing.T) {
	// An ack_wait no loaded machine runs out: with the env's 1 s, a run of
	// 500 events in flight that took longer under -race was delivered again
	// (the second run's duplicates), though nothing acked was.
	e := newEnv(t, func(c *orderstore.Config) { c.Processor.AckWait = 15 * time.Second })
	e.publish(t, orderEvents(5_000, 400, 0, 5))
	var handled atomic.Int64
	proj := e.projection(t)
	slow := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		handled.Add(1)
		time.Sleep(50 * time.Microsecond)
		return proj.Handle(ctx, ev)
	})
	// A drain that always finishes (the default 10 s ran out on a loaded
	// CI machine: the handlers were then cut short, and what they had
	// applied was, rightly, redelivered as duplicates).
	var log testkit.LockedBuffer
	p1, stop := e.startAdjusted(t, slow, func(c *processor.Config) {
		c.DrainTimeout = 25 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if handled.Load() < 1500 {
			return fmt.Errorf("handled %d", handled.Load())
		}
		return nil
	})
	stop()
	if strings.Contains(log.String(), "drain timed out") {
		t.Fatalf("the drain did not finish within its 25s (handlers cut short; what they applied is redelivered, rightly): %s", log.String())
	}
	st1 := p1.Stats()
	if st1.Processed == 0 || st1.Processed >= 5000 {
		t.Fatalf("first run processed %d: the stop did not land mid-burst", st1.Processed)
	}
	// Every event handed to the handler was acked: the ack floor is exactly
	// what the first run processed. (A pull that was in flight at the stop
	// can leave a few events delivered to the client but never handed out:
	// they stay unacked and are redelivered after ack_wait.)
	var l processor.LagInfo
	embeddedtest.WaitFor(t, 5*time.Second, func() error {
		var err error
		l, err = processor.Lag(context.Background(), e.js, e.cfg.Stream.Name, e.cfg.Processor.Durable)
		if err != nil {
			return err
		}
		if l.AckFloor != st1.Processed {
			return fmt.Errorf("ack floor %d, want the %d events the first run processed", l.AckFloor, st1.Processed)
		}
		return nil
	})
	t.Logf("after stop: processed %d, ack floor %d, ack pending %d (in flight, never handed out)", st1.Processed, l.AckFloor, l.AckPending)
	p2, _ := e.start(t, processor.Handler(proj))
	e.waitCaughtUp(t, 60*time.Second)
	st2 := p2.Stats()
	if st2.Duplicates != 0 {
		t.Errorf("second run saw %d already-applied events: acked events were delivered again; first run: %+v, its log:\n%s", st2.Duplicates, st1, log.String())
	}
	if st1.Processed+st2.Processed != 5000 {
		t.Errorf("processed %d + %d, want 5000", st1.Processed, st2.Processed)
	}
	e.checkProjection(t)
}

func TestNewValidates(t *testing.T) {
	_, err := processor.New(nil, processor.Config{})
	for _, want := range []string{"Stream", "Durable", "DeadLetterStream", "Handler"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("New(empty) = %v, want it to name %s", err, want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// An event whose deliveries ran out without a result (the processor died
// or timed out on each) is dead-lettered, never dropped: nats-server would
// drop it silently at its own max_deliver, so the processor enforces it.
func TestExhaustedDeliveriesAreDeadLettered(t *testing.T) {
	e := newEnv(t)
	e.publish(t, []*nats.Msg{event("orders.created", "o-stuck", "", "")})
	// Take the event max_deliver times and never answer, as a processor
	// killed mid-flight would.
	cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if md := cons.CachedInfo().Config.MaxDeliver; md != -1 {
		t.Fatalf("consumer max_deliver = %d, want -1 (the processor enforces it)", md)
	}
	for i := 1; i <= e.cfg.Processor.MaxDeliver; i++ {
		embeddedtest.WaitFor(t, 5*time.Second, func() error {
			b, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				return err
			}
			for m := range b.Messages() {
				md, _ := m.Metadata()
				if md.NumDelivered != uint64(i) {
					return fmt.Errorf("delivery %d, want %d", md.NumDelivered, i)
				}
				return nil
			}
			return fmt.Errorf("no delivery %d yet (ack_wait not expired)", i)
		})
	}
	var calls atomic.Int64
	p, _ := e.start(t, processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		calls.Add(1)
		return nil
	}))
	e.waitCaughtUp(t, 10*time.Second)
	if calls.Load() != 0 {
		t.Errorf("handler called %d times for an exhausted event", calls.Load())
	}
	dls, _, _ := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10)
	if len(dls) != 1 || !contains(dls[0].Error, "without a result") || dls[0].Deliveries != uint64(e.cfg.Processor.MaxDeliver+1) {
		t.Fatalf("dead letters = %+v", dls)
	}
	if st := p.Stats(); st.DeadLettered != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Ready is closed once Run consumes, and never by a Run that cannot start.
func TestReady(t *testing.T) {
	e := newEnv(t)
	nop := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error { return nil })

	pc := e.processorConfig(nop)
	pc.Durable = "no-such-durable"
	bad, err := processor.New(e.js, pc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Run(context.Background()); err == nil {
		t.Fatal("Run on a missing durable returned nil")
	}
	select {
	case <-bad.Ready():
		t.Error("Ready closed by a Run that never consumed")
	default:
	}

	p, stop := e.start(t, nop) // returns once Ready is closed
	if !p.Stats().Running {
		t.Error("Stats().Running = false after Ready")
	}
	stop()
	if p.Stats().Running {
		t.Error("Stats().Running = true after Run returned")
	}
	select {
	case <-p.Ready():
	default:
		t.Error("Ready not closed after Run returned")
	}
}

// holdFirst holds the first handling of event seq until release is
// closed, then applies it through inner, as a processor slowed past
// ack_wait on it would (or a sibling on a shared durable still holding an
// earlier delivery).
type holdFirst struct {
	inner   processor.Handler
	seq     uint64
	once    sync.Once
	held    chan struct{}
	release chan struct{}
	result  chan error
}

func (h *holdFirst) Handle(ctx context.Context, ev processor.Event) error {
	first := false
	if ev.Sequence == h.seq {
		h.once.Do(func() { first = true })
	}
	if !first {
		return h.inner.Handle(ctx, ev)
	}
	close(h.held)
	<-h.release
	err := h.inner.Handle(ctx, ev)
	h.result <- err
	return err
}

// failing fails every event (its deliveries run out) and withholds through
// the projection, as the built-in handler does.
type failing struct{ p *processor.Projection }

func (f failing) Handle(context.Context, processor.Event) error {
	return errors.New("transient: injected")
}
func (f failing) Withhold(ctx context.Context, ev processor.Event) (bool, error) {
	return f.p.Withhold(ctx, ev)
}

// An event held by one processor past ack_wait is redelivered to another
// until its deliveries run out and it is dead-lettered; the first one then
// finishes applying it. The event must not end up both applied and a
// dead letter: the dead-letter path withholds it in the order's record
// first, and the late apply finds it withheld and dead-letters it too. (Before, both happened: in a
// cluster, where every node's processor shares the durable, a loaded node
// did this to acknowledged events.)
func TestExhaustedEventIsNotAppliedLate(t *testing.T) {
	e := newEnv(t)
	seqs := e.publish(t, []*nats.Msg{event("orders.created", "o-1", "", "")})
	e.publish(t, []*nats.Msg{event("orders.created", "o-late", "", "")})
	h := &holdFirst{inner: e.projection(t), seq: seqs[0] + 1, held: make(chan struct{}), release: make(chan struct{}), result: make(chan error, 1)}
	p1, _ := e.start(t, h)
	select {
	case <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first processor never handled the event")
	}
	p2, _ := e.start(t, failing{e.projection(t)})
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		dls, _, err := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10)
		if err != nil || len(dls) == 0 {
			return fmt.Errorf("no dead letter yet (%v)", err)
		}
		if dls[0].OriginalSequence != h.seq || !contains(dls[0].Error, "without a result") {
			return fmt.Errorf("dead letter %+v, want event %d without a result", dls[0], h.seq)
		}
		return nil
	})
	close(h.release)
	if err := <-h.result; !errors.Is(err, processor.ErrWithheld) {
		t.Errorf("the late apply of a dead-lettered event returned %v, want ErrWithheld", err)
	}
	e.waitCaughtUp(t, 30*time.Second)
	// The late one dead-letters it too (had the first dead letter
	// failed, the event would not be lost): the stream stores it once.
	if dls, _, err := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10); err != nil || len(dls) != 1 {
		t.Errorf("dead letters %+v (%v), want the one", dls, err)
	}
	// The processor counts a dead letter after it settled it (the
	// consumer may show nothing pending a moment before): polled.
	// (Its deliveries queued behind the held one are dead-lettered too,
	// each counted, the copy stored once.)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if st := p1.Stats(); st.DeadLettered == 0 || st.Processed != 1 {
			return fmt.Errorf("the holding processor's stats %+v: want its held event dead-lettered, the other applied", st)
		}
		return nil
	})
	if o, err := e.projection(t).Get(context.Background(), "o-late"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("order o-late = %+v, %v: its only event is a dead letter, want not found", o, err)
	}
	e.checkProjection(t)
	t.Logf("p1 %+v\np2 %+v", p1.Stats(), p2.Stats())
}

// A processor's pulls never ask for more than its nats.go subscription
// holds (64 MiB): past that the client drops what arrives while the
// processor waits for its byte budget, and each event dropped is
// delivered again later, a delivery used without reaching the handler
// (enough of them dead-letter an event never tried). With
// server.max_payload at 40 MiB the pulls asked for 80 MiB: here every
// event reaches the handler on its first delivery.
func TestProcessorPullsNoMoreThanTheSubscriptionHolds(t *testing.T) {
	// 80 events of about 1 MiB, while the handler holds the first.
	data := fmt.Appendf(nil, `{"order_id":"order-1","pad":"%s"}`, strings.Repeat("x", 1<<20-4<<10))
	var msgs []*nats.Msg
	for range 80 {
		msgs = append(msgs, &nats.Msg{Subject: "orders.created", Data: data})
	}
	checkFirstDeliveries(t, msgs)
}

// Nor do its open pulls together: by default nats.go asks again once half a pull's messages
// arrived, and each pull open may bring its max_bytes. Here 300 small events (max_ack_pending
// 500) left two pulls open, each with room for two 22 MiB events: 66 MiB arrived while the
// processor waited for its byte budget, and the last was dropped.
func TestProcessorOpenPullsNoMoreThanTheSubscriptionHolds(t *testing.T) {
	var msgs []*nats.Msg
	for i := range 300 {
		msgs = append(msgs, event("orders.created", fmt.Sprintf("small-%d", i), "", ""))
	}
	data := fmt.Appendf(nil, `{"order_id":"order-1","pad":"%s"}`, strings.Repeat("x", 22<<20))
	for range 3 {
		msgs = append(msgs, &nats.Msg{Subject: "orders.created", Data: data})
	}
	checkFirstDeliveries(t, msgs)
}

// checkFirstDeliveries runs a processor holding every event in its handler (a byte budget of
// 1 MiB: one large event at a time) while msgs are published, the first 300 (or all, if fewer)
// before the rest; once its pulls are closed, it lets them through and checks that every event
// reached the handler on its first delivery.
func checkFirstDeliveries(t *testing.T, msgs []*nats.Msg) {
	t.Helper()
	e := newEnv(t, func(c *orderstore.Config) { c.Server.MaxPayload, c.Stream.MaxMsgSize = 40<<20, 40<<20 })
	held := make(chan struct{})
	open := sync.OnceFunc(func() { close(held) })
	var mu sync.Mutex
	first := map[uint64]uint64{} // the first delivery each event reached the handler on
	g := &gate{inner: e.projection(t), wait: func(ev processor.Event) <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := first[ev.Sequence]; !ok || ev.Delivered < d {
			first[ev.Sequence] = ev.Delivered
		}
		return held
	}}
	_, _ = e.startAdjusted(t, g, func(pc *processor.Config) { pc.MaxBufferedBytes = 1 << 20 }) // one event at a time
	t.Cleanup(open)
	// The processor waits for its budget, and what its pulls bring waits in the subscription.
	e.publish(t, msgs[:min(300, len(msgs))])
	e.publish(t, msgs[min(300, len(msgs)):])
	cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if ci, err := cons.Info(context.Background()); err != nil || ci.NumWaiting != 0 {
			return fmt.Errorf("the processor's pull still open (%v)", err)
		}
		return nil
	})
	open()
	e.waitCaughtUp(t, 60*time.Second)
	mu.Lock()
	defer mu.Unlock()
	var late []uint64
	for seq, d := range first {
		if d > 1 {
			late = append(late, seq)
		}
	}
	if len(first) != len(msgs) || len(late) > 0 {
		t.Errorf("%d of %d events reached the handler; %d of them only on a later delivery (dropped by the client): %v", len(first), len(msgs), len(late), late)
	}
}
