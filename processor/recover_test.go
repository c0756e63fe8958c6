package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
)

// An Exclusive processor (the appliance's) while another client takes
// events from the same durable behind its back: the raw JetStream handle
// of the test env, which no durable guard stands in front of, fetches and
// acks events. Every event first delivered to that client leaves a gap in
// the sequences first delivered to the processor, which reads each such
// event back from the stream and applies it: the projection still equals
// the fold of the stream, and Stats.Recovered counts exactly the events
// the other client was first delivered.
//
// A Shared processor (a cluster node's) does the same for what a client
// that is not a sibling took, once the ack floor has passed it.
func TestExclusiveProcessorRecoversEventsTakenFromItsDurable(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			e := newEnv(t)
			p, _ := startRecovering(t, e, e.projection(t), func(pc *processor.Config) { pc.Exclusive, pc.Shared = true, shared })
			tk := startTaker(t, e)
			for b := uint64(0); b < 200 && tk.first.Load() < 100; b++ {
				e.publish(t, orderEvents(100, 50, 0, 1000+b))
			}
			tk.halt(t)
			// The gap the last taken events left shows in what the
			// processor is delivered next.
			e.publish(t, orderEvents(100, 50, 0, 999))
			assertProjectionConverges(t, e)
			assertRecoveredExactly(t, p, tk)
		})
	}
}

// assertRecoveredExactly waits until p has counted every event the taker
// was first delivered as recovered (counted once applied), and no more.
func assertRecoveredExactly(t *testing.T, p *processor.Processor, tk *taker) {
	t.Helper()
	if tk.first.Load() == 0 {
		t.Fatal("the other client took nothing: the test tests nothing")
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if st := p.Stats(); st.Recovered < tk.first.Load() {
			return fmt.Errorf("Recovered = %d, want %d (every event first delivered to the other client, read back once)", st.Recovered, tk.first.Load())
		}
		return nil
	})
	// Settled, each is forgotten: the floor handed to the handler moves
	// on (the projection's applied lists do not grow for the
	// processor's life).
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if n := p.Recovering(); n != 0 {
			return fmt.Errorf("%d recovered events still pending", n)
		}
		return nil
	})
	st := p.Stats()
	t.Logf("the other client took %d events (first deliveries), was redelivered %d; processor stats %+v", tk.first.Load(), tk.redelivered.Load(), st)
	if st.Recovered != tk.first.Load() {
		t.Errorf("Recovered = %d, want %d (every event first delivered to the other client, read back once)", st.Recovered, tk.first.Load())
	}
	if st.RemovedUnprocessed != 0 {
		t.Errorf("RemovedUnprocessed = %d: events taken by another client were counted as removed by the stream's limits", st.RemovedUnprocessed)
	}
}

// The processors of a cluster's nodes share the durable (Exclusive and
// Shared): each is delivered part of the stream, which is their design,
// so none may read back and apply again what a sibling applied. Without
// Shared each would take its siblings for thieves.
func TestSharedProcessorsRecoverNothing(t *testing.T) {
	e := newEnv(t)
	shared := func(pc *processor.Config) { pc.Exclusive, pc.Shared = true, true }
	p1, _ := startRecovering(t, e, e.projection(t), shared)
	p2, _ := startRecovering(t, e, e.projection(t), shared)
	for b := uint64(0); b < 20; b++ {
		e.publish(t, orderEvents(300, 50, 0, 4000+b))
	}
	assertProjectionConverges(t, e)
	// The floor watchers look every second: give them time to see the
	// floor pass every gap (the gaps are empty once they have).
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if g1, g2 := p1.PendingGaps(), p2.PendingGaps(); g1+g2 > 0 {
			return fmt.Errorf("gaps still to check: p1 %d, p2 %d", g1, g2)
		}
		return nil
	})
	pairRecoveredNothing(t, p1, p2, "Shared processors recovered events their sibling applied")
}

// pairRecoveredNothing checks that both processors worked, so that each
// saw gaps, and that neither recovered anything; it returns their stats.
func pairRecoveredNothing(t *testing.T, p1, p2 *processor.Processor, what string) (s1, s2 processor.Stats) {
	t.Helper()
	s1, s2 = p1.Stats(), p2.Stats()
	t.Logf("p1 %+v\np2 %+v", s1, s2)
	if s1.Processed == 0 || s2.Processed == 0 {
		t.Fatalf("one processor did nothing, so neither saw a gap: %+v %+v", s1, s2)
	}
	if s1.Recovered != 0 || s2.Recovered != 0 {
		t.Errorf("%s: p1 %d, p2 %d", what, s1.Recovered, s2.Recovered)
	}
	return s1, s2
}

// An event read back from the stream has no delivery of its own: whoever
// took it acked it, so the server never redelivers it. When the handler
// fails on it with a transient error (a KV write that timed out, a failed
// sync), it must still end up applied, as any other event that fails
// once does.
//
// With a backoff longer than the processor takes to see the ack floor move
// (every second), the floor is past the failed event when it is retried
// (the other client acked it) and later events of its order were applied
// meanwhile: it must still be applied, not taken for one applied before.
func TestExclusiveProcessorRetriesRecoveredEventsThatFail(t *testing.T) {
	for _, c := range []struct {
		name    string
		backoff time.Duration
	}{{"backoff 10ms", 10 * time.Millisecond}, {"backoff 3s", 3 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var tk *taker
			f := &failFirstTry{inner: e.projection(t), fail: func(ev processor.Event) bool {
				// Only events the other client took: the processor has
				// them from the stream, never from a delivery of its own.
				return ev.Delivered == 1 && tk.took(ev.Sequence)
			}}
			tk = startTaker(t, e)
			p, _ := startRecovering(t, e, f, func(pc *processor.Config) {
				pc.Exclusive = true
				pc.Backoff = []time.Duration{c.backoff}
			})
			for b := uint64(0); b < 200 && tk.first.Load() < 100; b++ {
				e.publish(t, orderEvents(100, 50, 0, 2000+b))
			}
			tk.halt(t)
			e.publish(t, orderEvents(100, 50, 0, 2999))
			embeddedtest.WaitFor(t, 30*time.Second, func() error {
				if f.failures.Load() == 0 {
					return fmt.Errorf("no recovered event failed yet (recovered %d)", p.Stats().Recovered)
				}
				return nil
			})
			// More events of the same orders until the processor has seen
			// the ack floor pass every event that failed.
			highest := f.highestFailed()
			seed := uint64(5000)
			embeddedtest.WaitFor(t, 30*time.Second, func() error {
				seed++
				e.publish(t, orderEvents(20, 50, 0, seed))
				if fl := p.Progress().AckFloor; fl <= highest {
					return fmt.Errorf("the processor's ack floor %d, a recovered event failed at %d", fl, highest)
				}
				return nil
			})
			e.publish(t, orderEvents(100, 50, 0, 2998))
			t.Logf("the other client took %d events; %d recovered events failed their first try (the last at seq %d)", tk.first.Load(), f.failures.Load(), highest)
			t.Cleanup(func() { t.Logf("processor stats %+v", p.Stats()) })
			assertProjectionConverges(t, e)
		})
	}
}

// An event the processor failed and nak'ed is redelivered to whoever
// pulls next. When another client takes that redelivery and acks it, the
// processor is never delivered it again, and the gap in first deliveries
// that Exclusive watches for is not there: the event must still end up
// in the projection.
func TestExclusiveProcessorEventRedeliveredToAnotherClient(t *testing.T) {
	e := newEnv(t)
	const n = 200
	var tk atomic.Pointer[taker]
	var firstTries atomic.Uint64
	f := &failFirstTry{inner: e.projection(t), every: true, fail: func(ev processor.Event) bool {
		if ev.Delivered == 1 {
			firstTries.Add(1)
			return true
		}
		// Until the other client took some redeliveries, every try
		// fails: the events keep coming back for it to take.
		k := tk.Load()
		return k == nil || k.redelivered.Load() < 20
	}}
	p, _ := startRecovering(t, e, f, func(pc *processor.Config) {
		pc.Exclusive = true
		pc.MaxDeliver = 1000 // nothing is dead-lettered meanwhile
	})
	e.publish(t, orderEvents(n, 50, 0, 3000))
	// Every event was first delivered to the processor (and failed), so
	// the other client gets redeliveries only.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if got := firstTries.Load(); got < n {
			return fmt.Errorf("%d of %d events first delivered to the processor", got, n)
		}
		return nil
	})
	tk.Store(startTaker(t, e))
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if got := tk.Load().redelivered.Load(); got < 20 {
			return fmt.Errorf("the other client took %d redeliveries", got)
		}
		return nil
	})
	k := tk.Load()
	k.halt(t)
	if k.first.Load() != 0 {
		t.Fatalf("the other client was first delivered %d events: the scenario is not the one this test is about", k.first.Load())
	}
	t.Logf("the other client took %d redelivered events", k.redelivered.Load())
	assertProjectionConverges(t, e)
	t.Logf("processor stats %+v", p.Stats())
}

// When the other client takes the last events published and nothing is
// published after them, no later delivery shows the gap: the processor
// must still notice (its consumer's delivered sequence is past anything
// it was delivered) and apply them.
func TestExclusiveProcessorRecoversTheLastEventsTaken(t *testing.T) {
	e := newEnv(t)
	p, _ := startRecovering(t, e, e.projection(t), func(pc *processor.Config) { pc.Exclusive = true })
	e.publish(t, orderEvents(100, 20, 0, 4000))
	e.waitCaughtUp(t, 30*time.Second)
	tk := startTaker(t, e)
	// One event at a time until the other client was delivered the last
	// one published.
	var last uint64
	for i := 0; i < 500; i++ {
		last = e.publish(t, orderEvents(1, 20, 0, 4100+uint64(i)))[0]
		embeddedtest.WaitFor(t, 10*time.Second, func() error {
			if tk.took(last) || p.Stats().LastAppliedSeq >= last {
				return nil
			}
			return fmt.Errorf("event %d not taken yet", last)
		})
		if tk.took(last) {
			break
		}
	}
	tk.halt(t)
	if !tk.took(last) {
		t.Fatalf("the other client never took the last event in 500 tries")
	}
	t.Logf("the other client took %d events, the last published (seq %d) among them", tk.first.Load(), last)
	assertProjectionConverges(t, e)
	t.Logf("processor stats %+v", p.Stats())
}

// Two processors on the same durable that are not Exclusive (the setup of
// TestTwoProcessorsSameDurable): each is delivered only part of the
// stream, which is normal for them, and neither reads anything back. (The
// pair's projection is TestTwoProcessorsSameDurable's subject.)
func TestNonExclusivePairRecoversNothing(t *testing.T) {
	e := newEnv(t)
	e.publish(t, orderEvents(3_000, 300, 0, 31))
	p1, _ := e.start(t, &flaky{inner: e.projection(t), failShare: 7})
	p2, _ := e.start(t, &flaky{inner: e.projection(t), failShare: 7})
	e.publish(t, orderEvents(3_000, 300, 0, 32))
	e.waitCaughtUp(t, 60*time.Second)
	s1, s2 := pairRecoveredNothing(t, p1, p2, "non-Exclusive processors recovered events (want 0: sharing the durable is their design)")
	if s1.RemovedUnprocessed != 0 || s2.RemovedUnprocessed != 0 {
		t.Errorf("events counted as removed unprocessed: p1 %d, p2 %d", s1.RemovedUnprocessed, s2.RemovedUnprocessed)
	}
}

// startRecovering runs a processor with h on its own connection, its
// config adjusted, until the test ends (or the returned stop).
func startRecovering(t *testing.T, e *env, h processor.Handler, adjust func(*processor.Config)) (*processor.Processor, func()) {
	t.Helper()
	return e.startAdjusted(t, h, adjust)
}

// taker is another client on the processor's durable: it fetches and acks
// whatever it is delivered.
type taker struct {
	first, redelivered atomic.Uint64
	mu                 sync.Mutex
	seqs               map[uint64]bool
	stop               chan struct{}
	stopped            chan error
	halted             bool
}

func startTaker(t *testing.T, e *env) *taker {
	t.Helper()
	cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
	if err != nil {
		t.Fatal(err)
	}
	tk := &taker{seqs: map[uint64]bool{}, stop: make(chan struct{}), stopped: make(chan error, 1)}
	go func() {
		for {
			select {
			case <-tk.stop:
				tk.stopped <- nil
				return
			default:
			}
			// Fetch returns once the batch is full or the pull expired:
			// nothing is on its way to this client when it stops.
			batch, err := cons.Fetch(5, jetstream.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				tk.stopped <- fmt.Errorf("fetch: %w", err)
				return
			}
			for m := range batch.Messages() {
				md, err := m.Metadata()
				if err != nil {
					tk.stopped <- fmt.Errorf("metadata: %w", err)
					return
				}
				tk.mu.Lock()
				tk.seqs[md.Sequence.Stream] = true
				tk.mu.Unlock()
				if md.NumDelivered == 1 {
					tk.first.Add(1)
				} else {
					tk.redelivered.Add(1)
				}
				if err := m.Ack(); err != nil {
					tk.stopped <- fmt.Errorf("ack: %w", err)
					return
				}
			}
			if err := batch.Error(); err != nil {
				tk.stopped <- fmt.Errorf("fetch: %w", err)
				return
			}
		}
	}()
	t.Cleanup(func() { tk.halt(t) })
	return tk
}

// halt stops the taker and waits until it fetches no more.
func (tk *taker) halt(t *testing.T) {
	t.Helper()
	if tk.halted {
		return
	}
	tk.halted = true
	close(tk.stop)
	select {
	case err := <-tk.stopped:
		if err != nil {
			t.Errorf("the other client: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the other client did not stop within 30s")
	}
}

// took reports whether the taker was delivered seq.
func (tk *taker) took(seq uint64) bool {
	if tk == nil {
		return false
	}
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.seqs[seq]
}

// failFirstTry wraps the projection: an event fail picks fails its first
// try (every try, with every) before it is applied, with a transient
// error.
type failFirstTry struct {
	inner    *processor.Projection
	fail     func(processor.Event) bool
	every    bool
	mu       sync.Mutex
	tried    map[uint64]bool
	failures atomic.Uint64
}

func (f *failFirstTry) Handle(ctx context.Context, ev processor.Event) error {
	return f.HandleBatch(ctx, [][]processor.Event{{ev}})[0][0]
}

func (f *failFirstTry) HandleBatch(ctx context.Context, orders [][]processor.Event) [][]error {
	out := make([][]error, len(orders))
	var pass [][]processor.Event
	var where []int // the order of each pass
	var at [][]int  // the index in its order of each event passed
	for o, evs := range orders {
		out[o] = make([]error, len(evs))
		var keep []processor.Event
		var idx []int
		for i, ev := range evs {
			if f.failNow(ev) {
				out[o][i] = errors.New("transient: injected before apply")
				continue
			}
			keep = append(keep, ev)
			idx = append(idx, i)
		}
		if len(keep) > 0 {
			pass = append(pass, keep)
			where = append(where, o)
			at = append(at, idx)
		}
	}
	if len(pass) > 0 {
		res := f.inner.HandleBatch(ctx, pass)
		for k := range pass {
			for j, i := range at[k] {
				out[where[k]][i] = res[k][j]
			}
		}
	}
	return out
}

// highestFailed is the highest sequence failed so far.
func (f *failFirstTry) highestFailed() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h uint64
	for seq := range f.tried {
		h = max(h, seq)
	}
	return h
}

func (f *failFirstTry) failNow(ev processor.Event) bool {
	if !f.fail(ev) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tried == nil {
		f.tried = map[uint64]bool{}
	}
	if f.tried[ev.Sequence] && !f.every {
		return false
	}
	f.tried[ev.Sequence] = true
	f.failures.Add(1)
	return true
}

// assertProjectionConverges waits until the durable is caught up and
// every order of the projection equals the fold of the stream (recovered
// events may be applied in another partition than the event acked last,
// so a caught-up durable does not mean they are applied yet), then checks
// every field.
func assertProjectionConverges(t *testing.T, e *env) {
	t.Helper()
	e.waitCaughtUp(t, 60*time.Second)
	want := e.fold(t)
	embeddedtest.WaitFor(t, 30*time.Second, func() error { return projectionDiff(e, want) })
	e.checkProjection(t)
}

// projectionDiff is nil once every order of want is in the projection
// with the events and last sequence of the fold.
func projectionDiff(e *env, want map[string]processor.Order) error {
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		return err
	}
	missing, differ := 0, 0
	var eg []string
	for id, w := range want {
		entry, err := kv.Get(ctx, id)
		if err != nil {
			missing++
			continue
		}
		var o processor.Order
		if err := json.Unmarshal(entry.Value(), &o); err != nil {
			return err
		}
		if o.Events != w.Events || o.LastSeq != w.LastSeq {
			differ++
			if len(eg) < 3 {
				eg = append(eg, fmt.Sprintf("%s: %d events up to seq %d, fold %d up to seq %d", id, o.Events, o.LastSeq, w.Events, w.LastSeq))
			}
		}
	}
	if missing+differ > 0 {
		return fmt.Errorf("%d of %d orders missing, %d with other events than the fold %v", missing, len(want), differ, eg)
	}
	return nil
}

// A long run of events taken from an Exclusive processor's durable, more
// than any fixed batch of read-backs: each is read back and applied
// (Stats.Recovered counts every one), and the read-back holds no more of
// them in memory than the processor's byte budget (MaxBufferedBytes):
// while the handler holds the recovered events, no more are read. The
// run is found either by the processor's next delivery after it, or, with
// nothing published after it, by the floor watcher (the tail).
func TestExclusiveProcessorRecoversALongRunTaken(t *testing.T) {
	for _, next := range []bool{true, false} {
		t.Run(fmt.Sprintf("next delivery=%v", next), func(t *testing.T) {
			e := newEnv(t, func(c *orderstore.Config) {
				c.Processor.MaxAckPending = 50_000 // room for the other client while the processor holds its events
				c.Processor.AckWait = time.Minute  // nothing redelivered while the handler is held
			})
			const budget = 64 << 10
			held := make(chan struct{})    // the processor's own events
			recHeld := make(chan struct{}) // the events read back
			var tk atomic.Pointer[taker]
			g := &gate{inner: e.projection(t), wait: func(ev processor.Event) <-chan struct{} {
				if tk.Load().took(ev.Sequence) {
					return recHeld
				}
				return held
			}}
			openHeld, openRec := sync.OnceFunc(func() { close(held) }), sync.OnceFunc(func() { close(recHeld) })
			p, _ := startRecovering(t, e, g, func(pc *processor.Config) {
				pc.Exclusive = true
				pc.MaxBufferedBytes = budget
			})
			t.Cleanup(func() { openHeld(); openRec() }) // before the processor stops
			msgs := orderEvents(30_000, 500, 0, 6000)
			e.publish(t, msgs)
			// The handler holds the processor's events: its callback waits for
			// the budget, so once its pull is spent it asks for no more, and
			// the other client is delivered the rest, one run.
			cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
			if err != nil {
				t.Fatal(err)
			}
			embeddedtest.WaitFor(t, 30*time.Second, func() error {
				ci, err := cons.Info(context.Background())
				if err != nil || ci.NumWaiting != 0 {
					return fmt.Errorf("the processor's pull still open (%v)", err)
				}
				return nil
			})
			tk.Store(startTaker(t, e))
			embeddedtest.WaitFor(t, 60*time.Second, func() error {
				if ci, err := cons.Info(context.Background()); err != nil || ci.NumPending != 0 {
					return fmt.Errorf("events still pending (%v)", err)
				}
				return nil
			})
			tk.Load().halt(t)
			if n := tk.Load().first.Load(); n <= 10_000 {
				t.Fatalf("the other client took %d events: not a long run", n)
			}
			if next {
				e.publish(t, orderEvents(1, 500, 0, 6001))
			}
			openHeld()
			embeddedtest.WaitFor(t, 60*time.Second, func() error {
				if g.blocked(recHeld) == 0 {
					return errors.New("no event read back reached the handler yet")
				}
				return nil
			})
			minSize := len(msgs[0].Data) + len(msgs[0].Subject)
			for _, m := range msgs {
				minSize = min(minSize, len(m.Data)+len(m.Subject))
			}
			if n, most := p.Recovering(), budget/minSize+1; n > most {
				t.Errorf("%d events read back and held at once, the byte budget (%d bytes) holds at most %d", n, budget, most)
			}
			openRec()
			assertProjectionConverges(t, e)
			assertRecoveredExactly(t, p, tk.Load())
		})
	}
}

// gate wraps the projection: each event waits until the channel wait
// returns for it is closed (or ctx is done).
type gate struct {
	inner   *processor.Projection
	wait    func(processor.Event) <-chan struct{}
	mu      sync.Mutex
	waiting map[<-chan struct{}]int
}

func (g *gate) Handle(ctx context.Context, ev processor.Event) error {
	return g.HandleBatch(ctx, [][]processor.Event{{ev}})[0][0]
}

func (g *gate) HandleBatch(ctx context.Context, orders [][]processor.Event) [][]error {
	for _, evs := range orders {
		for _, ev := range evs {
			c := g.wait(ev)
			g.mu.Lock()
			if g.waiting == nil {
				g.waiting = map[<-chan struct{}]int{}
			}
			g.waiting[c]++
			g.mu.Unlock()
			select {
			case <-c:
			case <-ctx.Done():
			}
		}
	}
	return g.inner.HandleBatch(ctx, orders)
}

// blocked is how many events waited on c so far.
func (g *gate) blocked(c <-chan struct{}) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting[c]
}

// An Exclusive processor awaits each event it nak'ed: delivered to it
// again, or, if the ack floor passes it first, taken by another client
// and read back. A redelivery that arrives before the nak is noted (here:
// ack_wait ran out while the handler worked on the event, which then
// failed) and is applied here must not leave the event awaited: with no
// other client, nothing is read back.
func TestExclusiveProcessorRedeliveryBeforeNakNotTakenForStolen(t *testing.T) {
	e := newEnv(t)
	const target = 1 // the stream's first event
	var firstTries atomic.Int32
	redelivered := make(chan struct{})
	f := &failFirstTry{inner: e.projection(t), fail: func(ev processor.Event) bool {
		if ev.Sequence != target || ev.Delivered != 1 {
			return false
		}
		if firstTries.Add(1) == 1 {
			<-redelivered // fails once the server has redelivered it
		}
		return true
	}}
	p, _ := startRecovering(t, e, f, func(pc *processor.Config) {
		pc.Exclusive = true
		pc.Backoff = []time.Duration{time.Minute} // the nak brings no other delivery: the redelivery is applied first
	})
	e.publish(t, orderEvents(50, 5, 0, 7000))
	cons, err := e.js.Consumer(context.Background(), e.cfg.Stream.Name, e.cfg.Processor.Durable)
	if err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if ci, err := cons.Info(context.Background()); err != nil || ci.NumRedelivered == 0 {
			return fmt.Errorf("event %d not redelivered yet (%v)", target, err)
		}
		return nil
	})
	close(redelivered)
	assertProjectionConverges(t, e)
	// The floor watcher has seen the floor pass the event, and settled
	// whatever it read back.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if fl, n := p.Progress().AckFloor, p.Recovering(); fl < target || n != 0 {
			return fmt.Errorf("ack floor %d, %d events read back not settled", fl, n)
		}
		return nil
	})
	if n := firstTries.Load(); n != 1 {
		t.Errorf("event %d handed to the handler as a first delivery %d times: read back as taken by another client, though none took it (stats %+v)", target, n, p.Stats())
	}
}
