package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Producers' publishes reach the service through stream imports, on
// their own reply subjects: two publishes in flight with the same reply
// subject (a producer's own doing) are both stored and both answered
// there, each with its own ack. (Through service imports nats gave each
// request a reply subject of 6 random characters in one space per
// account, and the earlier of two that shared one got no answer.)
func TestIngestSameReplyBothAnswered(t *testing.T) {
	srv, nc := newStream(t)
	// Group commit's sync held until both requests are in flight.
	release := make(chan struct{})
	var syncs atomic.Int64
	stats := &Stats{batchHist: newHistogram(batchBuckets)}
	cfg := Config{Subjects: []string{"orders.>"}, Prefix: Prefix, Accounts: []string{"ORDERSTORE"}, Stream: "ORDER_EVENTS", Stats: stats,
		Sync: heldSync(release, &syncs)}
	in := startService(t, srv, cfg)

	answers := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("producer.reply", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range 2 {
		if err := nc.PublishRequest(Prefix+"ORDERSTORE"+".orders.created", "producer.reply", fmt.Appendf(nil, `{"order_id":"c-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Both stored by the stream and waiting for a sync, neither answered.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.inFlight != 2 || len(in.pending) != 0 || syncs.Load() == 0 {
			return fmt.Errorf("%d in flight, %d waiting for the stream, %d syncs, %d answers", in.inFlight, len(in.pending), syncs.Load(), len(answers))
		}
		return nil
	})
	close(release)
	var seqs []uint64
	for len(seqs) < 2 {
		select {
		case m := <-answers:
			var ack struct {
				Stream string `json:"stream"`
				Seq    uint64 `json:"seq"`
			}
			if err := json.Unmarshal(m.Data, &ack); err != nil || ack.Stream != "ORDER_EVENTS" {
				t.Fatalf("answer %q, want an ack", m.Data)
			}
			seqs = append(seqs, ack.Seq)
		case <-time.After(30 * time.Second):
			t.Fatalf("answers %v, want the acks of both publishes", seqs)
		}
	}
	if seqs[0] != 1 || seqs[1] != 2 {
		t.Fatalf("acks for sequences %v, want 1 and 2, in order", seqs)
	}
}

// A reply subject too long to answer on (with the account's answer
// prefix before it, past nats' protocol line, which would make nats
// close the service's connection) is neither stored nor answered, and
// counted; the service keeps serving.
func TestIngestUnanswerableReply(t *testing.T) {
	srv, nc := newStream(t)
	in := startService(t, srv, Config{Subjects: []string{"orders.>"}, Prefix: Prefix, Accounts: []string{"ORDERSTORE", "OTHER"}, Own: "ORDERSTORE",
		Answers: "_ANSWERS.", Stream: "ORDER_EVENTS"})
	// OTHER's answers go to _ANSWERS.OTHER.<reply>: a reply that fits
	// the producer's own line but not with that prefix.
	long := "r." + strings.Repeat("x", MaxSubjectFor(0)-len("_ANSWERS.OTHER.")-1)
	answers := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe("_ANSWERS.OTHER.>", answers); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(Prefix+"OTHER.orders.created", long, []byte(`{"order_id":"long"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if n := in.unanswerable.Load(); n != 1 {
			return fmt.Errorf("unanswerable: %d, want 1", n)
		}
		return nil
	})
	// The service still serves (its connection is up), on a short reply.
	if err := nc.PublishRequest(Prefix+"OTHER.orders.created", "r.short", []byte(`{"order_id":"short"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-answers:
		if m.Subject != "_ANSWERS.OTHER.r.short" || !strings.Contains(string(m.Data), `"seq":1`) {
			t.Fatalf("answer %q on %s, want the ack of sequence 1 (the long one not stored) on _ANSWERS.OTHER.r.short", m.Data, m.Subject)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the publish with a short reply subject")
	}
	if in.nc.IsClosed() || !in.nc.IsConnected() {
		t.Fatal("the service's connection is down")
	}
}

// When the service answers publishes later than ingestBehind after they
// arrived (the syncs are behind what producers send), an account with
// many in flight is answered 429 at once, so that what is in flight
// drains and every publish is answered within a client's timeout; an
// account with few in flight still gets in. Once nothing is in flight,
// nothing is behind. (Before, the service shed only past 65,536 waiting
// to be taken, which the per-account pause at 16,384 made unreachable: a
// slow disk left every publish to queue behind the others.)
//
// The same holds, sooner, once answers come later than ingestFlightLate
// and more is in flight than the stream acknowledged in the last
// ingestFlightFor (Little's law: a publish would wait longer than that in
// flight).
func TestIngestShedsWhenBehind(t *testing.T) {
	t.Run("answers_late", func(t *testing.T) { shedsWhenBehind(t, 2*ingestBehind, false) })
	t.Run("more_in_flight_than_acked_in_a_second", func(t *testing.T) { shedsWhenBehind(t, 2*ingestFlightLate, true) })
}

func shedsWhenBehind(t *testing.T, skew time.Duration, little bool) {
	srv, nc := newStream(t)
	// Each sync takes one token; closing the channel lets every sync by.
	tokens := make(chan struct{}, 1)
	var syncs atomic.Int64
	cfg := Config{Subjects: []string{"orders.>"}, Prefix: Prefix, Accounts: []string{"HEAVY", "LIGHT"}, Stream: "ORDER_EVENTS",
		Stats: &Stats{batchHist: newHistogram(batchBuckets)},
		Sync: func(ctx context.Context) error {
			syncs.Add(1)
			select {
			case <-tokens:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	in := startService(t, srv, cfg)
	if little {
		in.mu.Lock()
		in.minFlight = 1 // the bound is the rate alone
		in.mu.Unlock()
	}

	answers := map[string]chan *nats.Msg{}
	for _, r := range []string{"heavy", "light"} {
		answers[r] = make(chan *nats.Msg, 1024)
		sub, err := nc.ChanSubscribe("reply."+r+".*", answers[r])
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	publish := func(account, reply string, i int) {
		t.Helper()
		if err := nc.PublishRequest(Prefix+account+".orders.created", reply, fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := func(want int) func() error {
		return func() error {
			in.mu.Lock()
			defer in.mu.Unlock()
			if in.inFlight != want || len(in.pending) != 0 {
				return fmt.Errorf("%d in flight (%d waiting for the stream), want %d stored", in.inFlight, len(in.pending), want)
			}
			return nil
		}
	}
	const heavy = 2 * ingestFairShare
	// The first publish alone, until its sync waits: the first round then
	// answers it and none of the others, which stay in flight (were they
	// all in the first round, nothing would be in flight after it, and
	// nothing behind). They arrived longer ago than ingestBehind (set
	// back rather than waited for); one sync lets the first round go.
	in.arrivalSkew.Store(int64(skew))
	publish("HEAVY", "reply.heavy.0", 0)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if syncs.Load() == 0 {
			return fmt.Errorf("no sync yet")
		}
		return nil
	})
	for i := 1; i < heavy; i++ {
		publish("HEAVY", fmt.Sprintf("reply.heavy.%d", i), i)
	}
	embeddedtest.WaitFor(t, 30*time.Second, inFlight(heavy))
	in.arrivalSkew.Store(0)
	tokens <- struct{}{}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if d := time.Duration(in.latency.Load()); d < skew {
			return fmt.Errorf("latency %s, want past %s", d, skew)
		}
		// The answers the round sent have arrived (they travel through
		// nats after the service counted them out).
		in.mu.Lock()
		left := in.inFlight
		in.mu.Unlock()
		if got := len(answers["heavy"]); got != heavy-left {
			return fmt.Errorf("%d answers arrived of the %d sent (%d still in flight)", got, heavy-left, left)
		}
		return nil
	})
	first := len(answers["heavy"])
	if first == 0 || first == heavy {
		t.Fatalf("%d of %d answered after one sync, want some and not all", first, heavy)
	}

	if little {
		// Nothing leaves flight while the syncs wait: the rate, and the
		// bound with it, fall below what is in flight.
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			in.mu.Lock()
			defer in.mu.Unlock()
			if in.flightCap >= in.inFlight {
				return fmt.Errorf("bound %d, %d in flight", in.flightCap, in.inFlight)
			}
			return nil
		})
	}
	publish("HEAVY", "reply.heavy.over", heavy)
	publish("LIGHT", "reply.light.0", 0)
	var over *nats.Msg
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for len(answers["heavy"]) > 0 {
			if m := <-answers["heavy"]; m.Subject == "reply.heavy.over" {
				over = m
			}
		}
		if over == nil {
			return fmt.Errorf("no answer to the heavy account's publish while behind")
		}
		return nil
	})
	if !strings.Contains(string(over.Data), `"code":429`) || !strings.Contains(string(over.Data), "overloaded") {
		t.Fatalf("the heavy account's publish while behind got %q, want a 429 'overloaded'", over.Data)
	}
	if n := in.shed.Load(); n != 1 {
		t.Fatalf("shed counted %d, want 1", n)
	}
	if len(answers["light"]) != 0 {
		t.Fatalf("the light account's publish was answered before its sync: %q", (<-answers["light"]).Data)
	}

	close(tokens) // every sync goes by from now on
	var light *nats.Msg
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if light == nil && len(answers["light"]) > 0 {
			light = <-answers["light"]
		}
		if light == nil {
			return fmt.Errorf("the light account's publish is not answered")
		}
		return inFlight(0)()
	})
	if !strings.Contains(string(light.Data), `"seq":`) {
		t.Fatalf("the light account's publish got %q, want its ack", light.Data)
	}
	if d := in.latency.Load(); d != 0 {
		t.Fatalf("latency %s with nothing in flight, want 0", time.Duration(d))
	}
	publish("HEAVY", "reply.heavy.after", heavy+1)
	var after *nats.Msg
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for len(answers["heavy"]) > 0 {
			if m := <-answers["heavy"]; m.Subject == "reply.heavy.after" {
				after = m
			}
		}
		if after == nil {
			return fmt.Errorf("no answer to the heavy account's publish after the service caught up")
		}
		return nil
	})
	if !strings.Contains(string(after.Data), `"seq":`) {
		t.Fatalf("the heavy account's publish after the service caught up got %q, want its ack", after.Data)
	}
}

// The wait a pause bounds: the publish last in line when a probe began
// has waited since then until it is taken; an idle time is no part of it.
func TestRequestsWaited(t *testing.T) {
	var rs requests
	sub := &nats.Subscription{}
	t0 := time.Unix(1000, 0)
	if d := rs.waited(sub, 0, t0); d != 0 {
		t.Fatalf("one taken, none behind: waited %s, want 0", d)
	}
	// An hour later one is taken with 3 behind it: the probe begins.
	t1 := t0.Add(time.Hour)
	if d := rs.waited(sub, 3, t1); d != 0 {
		t.Fatalf("a probe's start: waited %s, want 0 (the idle hour is no wait)", d)
	}
	if d := rs.waited(sub, 2, t1.Add(400*time.Millisecond)); d != 400*time.Millisecond {
		t.Fatalf("the second of 3 taken: waited %s, want 400ms", d)
	}
	if d := rs.waited(sub, 5, t1.Add(1500*time.Millisecond)); d != 1500*time.Millisecond {
		t.Fatalf("the third of 3 taken: waited %s, want 1.5s (the last in line not taken yet)", d)
	}
	// The last in line is taken: a new probe begins with those behind it.
	t2 := t1.Add(2 * time.Second)
	if d := rs.waited(sub, 7, t2); d != 0 {
		t.Fatalf("the probe's publish taken, a new probe: waited %s, want 0", d)
	}
	if d := rs.waited(sub, 6, t2.Add(time.Second)); d != time.Second {
		t.Fatalf("the new probe: waited %s, want 1s", d)
	}
	// A new subscription (after a pause) counts anew.
	if d := rs.waited(&nats.Subscription{}, 0, t2.Add(3*time.Second)); d != 0 {
		t.Fatalf("a new subscription, none behind: waited %s, want 0", d)
	}
}

// heldSync is a group-commit sync that counts its calls and returns once
// release is closed.
func heldSync(release chan struct{}, syncs *atomic.Int64) func(context.Context) error {
	return func(ctx context.Context) error {
		syncs.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// newStream starts a server with ORDER_EVENTS and connects a producer.
func newStream(t *testing.T) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDER_EVENTS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	return srv, nc
}

// startService runs the ingest service on a connection of its own.
func startService(t *testing.T, srv *embedded.Server, cfg Config) *Service {
	t.Helper()
	inc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inc.Close)
	in, err := Start(inc, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	return in
}

// What waited in line longer than ingestShedWait (the subscription's
// buffer, where nats delivers faster than the service stores under a
// flood) is answered 429 at once when taken, and not stored: the line
// drains at the rate of answers. Here the service is held on one publish
// while a second and 40 more queue behind it; the second is taken with
// the 40 in line (the probe begins), and held past ingestShedWait: the
// two are stored, the 40 get the 429 that says why, and nothing of theirs
// is in the stream.
func TestIngestShedsWhatWaitedInLine(t *testing.T) {
	srv, nc := newStream(t)
	holdA, holdB := make(chan struct{}), make(chan struct{})
	inA, inB := make(chan struct{}), make(chan struct{})
	validate := func(_ string, data []byte) error {
		switch {
		case strings.Contains(string(data), "hold-a"):
			close(inA)
			<-holdA
		case strings.Contains(string(data), "hold-b"):
			close(inB)
			<-holdB
		}
		return nil
	}
	in := startService(t, srv, Config{Subjects: []string{"orders.>"}, Prefix: Prefix, Accounts: []string{"ORDERSTORE"}, Stream: "ORDER_EVENTS", Validate: validate})
	answers := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe("producer.>", answers); err != nil {
		t.Fatal(err)
	}
	pub := func(reply, body string) {
		t.Helper()
		if err := nc.PublishRequest(Prefix+"ORDERSTORE.orders.created", reply, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	release := func() { once.Do(func() { close(holdA); close(holdB) }) }
	t.Cleanup(release)
	// The first taken alone: what it finds in line is not what this test
	// is about (the probe it begins ends with the second).
	pub("producer.a", `{"order_id":"hold-a"}`)
	<-inA
	pub("producer.b", `{"order_id":"hold-b"}`)
	const behind = 40
	for i := range behind {
		pub(fmt.Sprintf("producer.q%d", i), fmt.Sprintf(`{"order_id":"q-%d"}`, i))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// All of them delivered to the service behind the first (nats.go
	// counts the one its callback holds as pending too).
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if n := in.Queued(); n != behind+2 {
			return fmt.Errorf("%d delivered to the service and not done, want %d", n, behind+2)
		}
		return nil
	})
	holdA <- struct{}{}
	<-inB // the second taken, with the 40 behind it: the probe begins
	time.Sleep(ingestShedWait + 200*time.Millisecond)
	release()

	got := map[string]string{}
	for len(got) < behind+2 {
		select {
		case m := <-answers:
			got[m.Subject] = string(m.Data)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d answers, want %d: %v", len(got), behind+2, got)
		}
	}
	for _, r := range []string{"producer.a", "producer.b"} {
		if !strings.Contains(got[r], `"stream":"ORDER_EVENTS"`) {
			t.Errorf("%s answered %q, want its ack", r, got[r])
		}
	}
	for i := range behind {
		r := fmt.Sprintf("producer.q%d", i)
		if !strings.Contains(got[r], `"code":429`) || !strings.Contains(got[r], "waited too long") {
			t.Errorf("%s answered %q, want 429 waited too long", r, got[r])
		}
	}
	if n := in.shed.Load(); n != behind {
		t.Errorf("shed %d, want %d", n, behind)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("the stream holds %d events, want the 2 taken in time", n)
	}
}
