package embeddedtest_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// Two parallel tests each get their own broker: what one publishes the
// other never sees, and both can declare ORDER_EVENTS.
func TestParallelBrokersAreIsolated(t *testing.T) {
	urls := make(chan string, 2)
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := embeddedtest.Start(t)
			urls <- srv.ClientURL() // the URL alone: the store dirs always differ
			nc := embeddedtest.Connect(t, srv)
			orderstoretest.DeclareOrderEvents(t, nc)
			js, _ := jetstream.New(nc)
			ctx := context.Background()
			for i := range 5 {
				if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"%s-%d"}`, name, i)); err != nil {
					t.Fatal(err)
				}
			}
			// Whatever the other test does, this stream holds only ours.
			s, err := js.Stream(ctx, "ORDER_EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 5 {
				t.Fatalf("stream holds %d messages, want the 5 this test published", info.State.Msgs)
			}
			m, err := s.GetMsg(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`{"order_id":"%s-0"}`, name); string(m.Data) != want {
				t.Fatalf("first message %s, want %s", m.Data, want)
			}
		})
	}
	t.Cleanup(func() {
		close(urls)
		var got []string
		for u := range urls {
			got = append(got, u)
		}
		if len(got) == 2 && got[0] == got[1] {
			t.Errorf("both tests got the same broker %q", got[0])
		}
	})
}

// The persistence check, in-process: N acked events, a durable that acked
// some, Close, restart on the same store: all N are there and the durable
// receives exactly the rest.
func TestRestartKeepsEventsAndConsumerPosition(t *testing.T) {
	const n, acked = 300, 120
	store := t.TempDir()
	ctx := context.Background()
	subjects := []string{"orders.created", "orders.shipped", "orders.cancelled"}

	srv1, err := embedded.Start(ctx, embedded.Config{StoreDir: store, Port: -1, MaxStore: 10 << 30})
	if err != nil {
		t.Fatal(err)
	}
	nc1 := embeddedtest.Connect(t, srv1)
	spec := orderstoretest.DeclareOrderEvents(t, nc1)
	js1, _ := jetstream.New(nc1)
	for i := range n {
		ack, err := js1.Publish(ctx, subjects[i%3], fmt.Appendf(nil, `{"order_id":"o-%d"}`, i), jetstream.WithMsgID(fmt.Sprint("e-", i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Sequence != uint64(i+1) {
			t.Fatalf("publish %d: seq %d", i, ack.Sequence)
		}
	}
	cons, err := js1.Consumer(ctx, spec.Stream.Name, spec.Consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(acked, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != acked {
		t.Fatalf("fetched %d, want %d", got, acked)
	}
	nc1.Close()
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}

	srv2 := embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
	js2 := embeddedtest.JetStream(t, srv2)
	s, err := js2.Stream(ctx, spec.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.State.Msgs != n || info.State.LastSeq != n {
		t.Fatalf("after restart: msgs=%d last=%d, want %d", info.State.Msgs, info.State.LastSeq, n)
	}
	// Dedupe state survived too.
	ack, err := js2.Publish(ctx, "orders.created", []byte(`{"order_id":"o-0"}`), jetstream.WithMsgID("e-0"))
	if err != nil || !ack.Duplicate || ack.Sequence != 1 {
		t.Fatalf("re-publish of e-0 after restart: ack=%+v err=%v, want duplicate of seq 1", ack, err)
	}
	cons2, err := js2.Consumer(ctx, spec.Stream.Name, spec.Consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for len(seqs) < n-acked {
		b, err := cons2.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for m := range b.Messages() {
			md, _ := m.Metadata()
			seqs = append(seqs, md.Sequence.Stream)
			if md.NumDelivered != 1 {
				t.Errorf("seq %d delivered %d times, want 1 (it was never fetched before)", md.Sequence.Stream, md.NumDelivered)
			}
			m.Ack()
			k++
		}
		if k == 0 {
			break
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var want []uint64
	for i := acked + 1; i <= n; i++ {
		want = append(want, uint64(i))
	}
	if !slices.Equal(seqs, want) {
		t.Fatalf("after restart the durable got %d events %v..., want exactly seqs %d..%d", len(seqs), head(seqs), acked+1, n)
	}
}

func head(s []uint64) []uint64 { return s[:min(len(s), 10)] }

// BenchmarkStart measures the helper's Start (what a test pays per broker).
// Goal: median <= 30ms. Run: go test -run '^$' -bench Start -benchtime 50x ./embedded/embeddedtest
func BenchmarkStart(b *testing.B) {
	durs := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		srv := embeddedtest.Start(b)
		durs = append(durs, time.Since(t0))
		b.StopTimer()
		srv.Close()
		b.StartTimer()
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "median-ms")
	}
}
