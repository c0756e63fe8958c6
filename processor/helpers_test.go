package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
)

// env is a real broker with everything the appliance declares.
type env struct {
	srv  *embedded.Server
	js   jetstream.JetStream
	cfg  orderstore.Config
	spec bootstrap.Spec
}

// testConfig: short ack_wait and backoff so redeliveries happen in test time.
func testConfig(c *orderstore.Config) {
	c.Processor.AckWait = time.Second
	c.Processor.MaxDeliver = 4
	c.Processor.Backoff = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond}
	c.Processor.MaxAckPending = 500
	c.Stream.MaxBytes = 1 << 30
}

// newEnv is a bare broker with everything the appliance declares, and no
// processor: each test runs its own.
func newEnv(t testing.TB, adjust ...func(*orderstore.Config)) *env {
	t.Helper()
	// Processor tests are about delivery and idempotency, not fsync: a
	// relaxed sync keeps 10,000-event tests quick. Durability under
	// "always" is covered in cmd/orderstore.
	cfg := orderstore.DefaultConfig()
	testConfig(&cfg)
	for _, a := range adjust {
		a(&cfg)
	}
	srv := embeddedtest.Start(t, func(c *embedded.Config) {
		c.SyncInterval = time.Second
		c.MaxPayload = int32(cfg.Server.MaxPayload)
	})
	nc := embeddedtest.Connect(t, srv)
	spec := orderstoretest.DeclareOrderEvents(t, nc, append([]func(*orderstore.Config){testConfig}, adjust...)...)
	js, _ := jetstream.New(nc)
	return &env{srv: srv, js: js, cfg: cfg, spec: spec}
}

// processorConfig is what the appliance runs, with h.
func (e *env) processorConfig(h processor.Handler) processor.Config {
	pc := e.cfg.ProcessorConfig(h)
	pc.Logger = nil
	return pc
}

// projection returns a projection on its own connection, like a separate
// processor instance would have.
func (e *env) projection(t testing.TB) *processor.Projection {
	t.Helper()
	js := embeddedtest.JetStream(t, e.srv)
	kv, err := js.KeyValue(context.Background(), e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	p := processor.NewProjection(js, kv)
	hkv, err := js.KeyValue(context.Background(), e.cfg.Processor.HistoryBucket())
	if err != nil {
		t.Fatal(err)
	}
	p.SetHistory(hkv)
	return p
}

// start runs a processor with h on its own connection until the returned
// stop is called; stop waits for Run and fails the test on its error.
func (e *env) start(t testing.TB, h processor.Handler) (*processor.Processor, func()) {
	t.Helper()
	return e.startAdjusted(t, h, nil)
}

// startAdjusted is start with the processor's config adjusted (nil: as
// processorConfig makes it).
func (e *env) startAdjusted(t testing.TB, h processor.Handler, adjust func(*processor.Config)) (*processor.Processor, func()) {
	t.Helper()
	js := embeddedtest.JetStream(t, e.srv)
	pc := e.processorConfig(h)
	if adjust != nil {
		adjust(&pc)
	}
	p, err := processor.New(js, pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("processor Run returned before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("processor not ready within 10s")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("processor Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("processor did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// publish stores events asynchronously and waits for every ack.
func (e *env) publish(t testing.TB, msgs []*nats.Msg) []uint64 {
	t.Helper()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	seqs := make([]uint64, len(msgs))
	const window = 1000 // below the client's cap on outstanding async publishes
	for i, m := range msgs {
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures[i] = f
		if i >= window {
			wait(t, i-window, futures[i-window], seqs)
		}
	}
	for i := max(len(msgs)-window, 0); i < len(msgs); i++ {
		wait(t, i, futures[i], seqs)
	}
	return seqs
}

func wait(t testing.TB, i int, f jetstream.PubAckFuture, seqs []uint64) {
	t.Helper()
	{
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			t.Fatalf("publish %d: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("publish %d: no ack", i)
		}
	}
}

func event(subject, orderID, status, msgID string) *nats.Msg {
	m := nats.NewMsg(subject)
	body := map[string]string{"order_id": orderID}
	if status != "" {
		body["status"] = status
	}
	m.Data, _ = json.Marshal(body)
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	return m
}

// waitCaughtUp waits until the durable has nothing pending or unacked.
func (e *env) waitCaughtUp(t testing.TB, timeout time.Duration) {
	t.Helper()
	embeddedtest.WaitFor(t, timeout, func() error {
		l, err := processor.Lag(context.Background(), e.js, e.cfg.Stream.Name, e.cfg.Processor.Durable)
		if err != nil {
			return err
		}
		if l.Pending != 0 || l.AckPending != 0 {
			return fmt.Errorf("pending %d, ack pending %d", l.Pending, l.AckPending)
		}
		return nil
	})
}

// oracleEvent is one event the oracle folds.
type oracleEvent = testkit.OracleEvent

// oracle reads, independently of the processor, every valid event not
// dead-lettered, per order, in stream order.
func (e *env) oracle(t testing.TB) map[string][]oracleEvent {
	t.Helper()
	ctx := context.Background()
	dead := map[uint64]bool{}
	dlqs, _, err := processor.ListDeadLetters(ctx, e.js, e.cfg.Processor.DeadLetterStream, 1, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dlqs {
		dead[d.OriginalSequence] = true
	}
	s, err := e.js.Stream(ctx, e.cfg.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	var all []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		// Replayed events name the original they replace.
		if r := m.Header.Get(processor.HeaderReplayOf); r != "" {
			orig, _ := strconv.ParseUint(r, 10, 64)
			dead[orig] = true
		}
		all = append(all, m)
	}
	out := map[string][]oracleEvent{}
	for _, m := range all {
		if dead[m.Sequence] {
			continue
		}
		var body struct {
			OrderID string `json:"order_id"`
			Status  string `json:"status"`
		}
		if json.Unmarshal(m.Data, &body) != nil || !processor.ValidOrderID(body.OrderID) {
			continue
		}
		out[body.OrderID] = append(out[body.OrderID], oracleEvent{Seq: m.Sequence, Subject: m.Subject, Status: body.Status, Data: m.Data, Time: m.Time.UTC()})
	}
	return out
}

// foldOracle folds one order's oracle events: the state they imply.
func foldOracle(id string, evs []oracleEvent) processor.Order { return testkit.FoldOrder(id, evs) }

// fold computes, independently of the processor, the projection the stream
// implies: every valid event not dead-lettered, in stream order.
func (e *env) fold(t testing.TB) map[string]processor.Order {
	t.Helper()
	out := map[string]processor.Order{}
	for id, evs := range e.oracle(t) {
		out[id] = foldOracle(id, evs)
	}
	return out
}

// checkProjection compares every key of the bucket with the fold.
func (e *env) checkProjection(t testing.TB) {
	t.Helper()
	want := e.fold(t)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]processor.Order{}
	for k := range lister.Keys() {
		entry, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var o processor.Order
		if err := json.Unmarshal(entry.Value(), &o); err != nil {
			t.Fatal(err)
		}
		if o.Events == 0 {
			continue // only withheld (dead-lettered) events: no order
		}
		got[k] = o
	}
	bad := 0
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			bad++
			if bad < 5 {
				t.Errorf("order %s missing from the projection, want %+v", id, w)
			}
			continue
		}
		if g.Status != w.Status || g.LastEvent != w.LastEvent || g.LastSeq != w.LastSeq || g.FirstSeq != w.FirstSeq ||
			g.Events != w.Events || !g.FirstEventAt.Equal(w.FirstEventAt) || !g.LastEventAt.Equal(w.LastEventAt) {
			bad++
			if bad < 5 {
				t.Errorf("order %s:\n got %+v\nwant %+v", id, g, w)
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			bad++
			t.Errorf("order %s in the projection but not in the fold", id)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d orders differ from the fold", bad, len(want))
	}
}
