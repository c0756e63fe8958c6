package orderstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

// hubConfig makes the hub listen for edges on leaf (an address of
// orderstoretest.Addrs: the edges know it before the hub starts, and it
// keeps it when it restarts).
func hubConfig(t testing.TB, leaf string, edges ...string) func(*orderstore.Config) {
	return func(c *orderstore.Config) {
		c.Server.Name = "hub"
		c.JetStream.Domain = "hub"
		c.LeafNode.Listen = leaf
		c.LeafNode.User, c.LeafNode.Password = "edge", "leaf-secret-1"
		c.Hub = orderstore.HubConfig{Stream: "ORDER_EVENTS_ALL", Edges: edges}
		c.JetStream.MaxFileStore = 4 << 30
	}
}

func edgeConfig(name, leaf string) func(*orderstore.Config) {
	return func(c *orderstore.Config) {
		c.Server.Name = name
		c.JetStream.Domain = name
		c.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-leaf://" + leaf, User: "edge", Password: "leaf-secret-1"}}
		c.LeafNode.ReconnectInterval = 250 * time.Millisecond
	}
}

// Test 3: events recorded at the edges while the hub is down reach the
// hub's aggregate stream once it starts, each exactly once and in its
// edge's order; each edge's own stream holds only its own events.
func TestEdgesForwardToHub(t *testing.T) {
	leaf := orderstoretest.Addrs(t, 1)[0]
	e1 := orderstoretest.Start(t, edgeConfig("edge-1", leaf))
	e2 := orderstoretest.Start(t, edgeConfig("edge-2", leaf))
	ctx := context.Background()
	const n = 50
	publish := func(app *orderstore.Appliance, edge string, from, to int) {
		js := embeddedtest.JetStream(t, app)
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "orders.created", []byte(fmt.Sprintf(`{"order_id":"%s-%d","i":%d}`, edge, i, i)),
				jetstream.WithMsgID(fmt.Sprintf("%s-%d", edge, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(e1, "edge-1", 0, n)
	publish(e2, "edge-2", 0, n)

	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1", "edge-2"))
	hjs := embeddedtest.JetStream(t, hub)
	// More events once the link is up.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		st, err := hjs.Stream(ctx, "ORDER_EVENTS_ALL")
		if err != nil {
			return err
		}
		if m := st.CachedInfo().State.Msgs; m < 2*n {
			return fmt.Errorf("aggregate holds %d of %d", m, 2*n)
		}
		return nil
	})
	publish(e1, "edge-1", n, 2*n)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		st, err := hjs.Stream(ctx, "ORDER_EVENTS_ALL")
		if err != nil {
			return err
		}
		if m := st.CachedInfo().State.Msgs; m != 3*n {
			return fmt.Errorf("aggregate holds %d of %d", m, 3*n)
		}
		return nil
	})

	// Exactly once, in each edge's order.
	oc, err := hjs.OrderedConsumer(ctx, "ORDER_EVENTS_ALL", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for range 3 * n {
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		edge, _, _ := strings.Cut(m.Subject(), ".")
		var ev struct{ I int }
		json.Unmarshal(m.Data(), &ev)
		if ev.I != next[edge] {
			t.Fatalf("from %s: event %d after %d (subject %s)", edge, ev.I, next[edge]-1, m.Subject())
		}
		next[edge]++
	}
	if next["edge-1"] != 2*n || next["edge-2"] != n {
		t.Errorf("per edge: %v", next)
	}
	// Each edge stores only its own events.
	for _, e := range []struct {
		app  *orderstore.Appliance
		want uint64
	}{{e1, 2 * n}, {e2, n}} {
		st, err := embeddedtest.JetStream(t, e.app).Stream(ctx, "ORDER_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if m := st.CachedInfo().State.Msgs; m != e.want {
			t.Errorf("an edge's ORDER_EVENTS holds %d events, want %d (its own only)", m, e.want)
		}
	}
	// Status: the hub's sources in step, the edges' links up.
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		var st status.Status
		getStatus(t, hub, &st)
		if st.Topology == nil || len(st.Topology.Sources) != 2 {
			return fmt.Errorf("hub topology = %+v", st.Topology)
		}
		for _, s := range st.Topology.Sources {
			if !s.Reachable || s.Behind != 0 || s.Stalled || s.EdgeLastSeq == 0 || s.SourcedSeq != s.EdgeLastSeq {
				return fmt.Errorf("source %+v", s)
			}
		}
		getStatus(t, e1, &st)
		if st.Topology == nil || len(st.Topology.Leafnodes) != 1 || !st.Topology.Leafnodes[0].Connected || st.Topology.Domain != "edge-1" {
			return fmt.Errorf("edge topology = %+v", st.Topology)
		}
		return nil
	})
	// The hub's processor projects every edge's orders.
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		for _, id := range []string{"edge-1-99", "edge-2-49"} {
			if _, err := hub.Order(ctx, id); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
	// One order's story told by two edges: the hub's history lists both
	// events, in the aggregate's order, each with its edge.
	for _, e := range []struct {
		app  *orderstore.Appliance
		subj string
	}{{e1, "orders.created"}, {e2, "orders.shipped"}} {
		js := embeddedtest.JetStream(t, e.app)
		if _, err := js.Publish(ctx, e.subj, []byte(`{"order_id":"shared-1"}`)); err != nil {
			t.Fatal(err)
		}
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			o, err := hub.Order(ctx, "shared-1")
			if err != nil {
				return err
			}
			if o.LastEvent != e.subj[len("orders."):] {
				return fmt.Errorf("hub's shared-1: %+v", o)
			}
			return nil
		})
	}
	h, err := hub.OrderEvents(ctx, "shared-1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 2 || h.Events[0].Edge != "edge-1" || h.Events[1].Edge != "edge-2" || h.Events[0].Subject != "edge-1.orders.created" ||
		h.Events[1].Type != "shipped" || !h.Events[0].Retained || h.Events[0].Sequence >= h.Events[1].Sequence {
		t.Errorf("hub's history of shared-1: %+v", h)
	}
	st, err := hub.OrderAsOf(ctx, "shared-1", orderstore.AsOf{Seq: h.Events[0].Sequence})
	if err != nil || st.Order.LastEvent != "created" || st.Folded != 1 || !st.Complete {
		t.Errorf("hub's shared-1 as of its first event: %+v, %v", st, err)
	}
}

// Edges that take their time to answer (a leaf link gone half-open, a
// busy edge) do not keep the hub's watcher from the others: edge-1, last
// in the list, behind three edges whose every request goes unanswered
// (a leaf peer that subscribes to their domains' API and never replies),
// is still watched.
func TestHubWatcherReachesEdgeBehindSlowOnes(t *testing.T) {
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	slow := []string{"slow-1", "slow-2", "slow-3"}
	hub := orderstoretest.Start(t, hubConfig(t, leaf, append(slow, "edge-1")...))
	rc := rogueClient(t, startRogue(t, leaf))
	asked := make(chan string, 64)
	for _, e := range slow {
		if _, err := rc.Subscribe("$JS."+e+".API.>", func(*nats.Msg) {
			select {
			case asked <- e:
			default:
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	rc.Flush()
	// Every slow edge's requests reach the silent peer.
	seen := map[string]bool{}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for len(seen) < len(slow) {
			select {
			case e := <-asked:
				seen[e] = true
			default:
				return fmt.Errorf("the hub's requests reached the silent peer for %v of %v", seen, slow)
			}
		}
		return nil
	})

	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf))
	if _, err := embeddedtest.JetStream(t, edge).Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		var st edgeCutStatus
		getStatus(t, hub, &st)
		if st.Topology == nil || len(st.Topology.Sources) != 4 {
			return fmt.Errorf("hub topology %+v", st.Topology)
		}
		if s := st.Topology.Sources[3]; s.Edge != "edge-1" || !s.Reachable || s.EdgeLastSeq != 1 || s.SourcedSeq != 1 {
			return fmt.Errorf("source %+v: want edge-1 reachable, its one event sourced", s)
		}
		// /metrics tells an alert the same, per edge.
		rec := httptest.NewRecorder()
		hub.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/metrics", nil))
		for name, want := range map[string]float64{
			`orderstore_hub_edge_reachable{edge="slow-1"}`: 0, `orderstore_hub_edge_reachable{edge="edge-1"}`: 1,
			`orderstore_hub_edge_behind_events{edge="edge-1"}`: 0, `orderstore_hub_edge_behind_seconds{edge="edge-1"}`: 0,
		} {
			if v, err := edgeCutMetricValue(rec.Body.String(), name); err != nil || v != want {
				return fmt.Errorf("/metrics %s = %v (%v), want %v", name, v, err, want)
			}
		}
		return nil
	})
}

// An edge whose events its limits removed (idle for max_age) has nothing
// left to source: the hub's watcher, started after the hub's copies
// expired too, shows it in step, not behind nor stalled (and does not
// restart its source over and over).
func TestHubWatcherIdleEdgeExpiredInStep(t *testing.T) {
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	short := func(c *orderstore.Config) { c.Stream.MaxAge, c.Stream.DuplicateWindow = 3*time.Second, time.Second }
	hubCfg := orderstoretest.Config(t)
	hubConfig(t, leaf, "edge-1")(&hubCfg)
	short(&hubCfg)
	hub := orderstoretest.Start(t, func(c *orderstore.Config) { *c = hubCfg })
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf), short)
	ejs := embeddedtest.JetStream(t, edge)
	// The event lives 3 s: on a loaded machine (-race) it can expire before the hub copies it,
	// so another is published then, and the hub must end in step with the last one.
	var last uint64
	publish := func() {
		ack, err := ejs.Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`))
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	publish()
	hjs := embeddedtest.JetStream(t, hub)
	count := func(js jetstream.JetStream, stream, filter string) (uint64, error) {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return 0, err
		}
		n := uint64(0)
		for _, c := range info.State.Subjects {
			n += c
		}
		return n, nil
	}
	copied := false
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		e, err := count(ejs, "ORDER_EVENTS", "orders.>")
		if err != nil {
			return err
		}
		h, err := count(hjs, "ORDER_EVENTS_ALL", "edge-1.>")
		if err != nil {
			return err
		}
		copied = copied || h > 0
		if !copied && e == 0 {
			publish()
		}
		if !copied || e+h > 0 {
			return fmt.Errorf("the edge holds %d events, the hub %d copies (copied: %v): waiting for the copy, then for both to expire", e, h, copied)
		}
		return nil
	})
	if err := hub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	hub = orderstoretest.Start(t, func(c *orderstore.Config) { *c = hubCfg })
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		var st edgeCutStatus
		getStatus(t, hub, &st)
		if st.Topology == nil || len(st.Topology.Sources) != 1 {
			return fmt.Errorf("hub topology %+v", st.Topology)
		}
		if s := st.Topology.Sources[0]; !s.Reachable || s.EdgeLastSeq != last || s.Behind != 0 {
			return fmt.Errorf("source %+v: want edge-1 reachable, in step at %d", s, last)
		}
		return nil
	})
}

// A hub's processor dead-letters the aggregate's events, which carry nats' Nats-Stream-Source
// (refused by nats on a publish). Their subjects name their source (edge-1.orders.created), which
// no stream takes: a replay goes into the hub's own stream on the event's own subject, and so back
// into the aggregate, where the processor takes it. A copy an edge lost (never acknowledged there)
// is not replayed.
func TestHubDeadLettersAndReplays(t *testing.T) {
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf))
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"))
	// Poison at the hub too: the hub's processor dead-letters its copy.
	if _, err := embeddedtest.JetStream(t, edge).Publish(ctx, "orders.created", []byte(`{"no_order_id":1}`)); err != nil {
		t.Fatal(err)
	}
	var dl orderstore.DeadLetter
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		dls, _, err := hub.DeadLetters(ctx, 1, 10)
		if err != nil || len(dls) != 1 {
			var st status.Status
			getStatus(t, hub, &st)
			return fmt.Errorf("hub's dead letters: %+v %v; its processor %+v", dls, err, st.Processor)
		}
		dl = dls[0]
		return nil
	})
	if dl.Subject != "edge-1.orders.created" {
		t.Fatalf("dead letter's subject %q", dl.Subject)
	}
	if _, err := hub.ReplayDeadLetter(ctx, dl.Sequence); err != nil {
		t.Fatalf("replay at the hub: %v", err)
	}
	hjs := embeddedtest.JetStream(t, hub)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		st, err := hjs.Stream(ctx, "ORDER_EVENTS_ALL")
		if err != nil {
			return err
		}
		m, err := st.GetLastMsgForSubject(ctx, "hub.orders.created")
		if err != nil {
			return err
		}
		if of := m.Header.Get("Orderstore-Replay-Of"); of != strconv.FormatUint(dl.OriginalSequence, 10) {
			return fmt.Errorf("replayed copy's Replay-Of %q, want %d", of, dl.OriginalSequence)
		}
		return nil
	})

	// A copy the edge lost, moved here by the hub's watcher.
	m := nats.NewMsg("dlq.ORDER_EVENTS_DLQ.edge-1.orders.created")
	m.Data = []byte(`{"order_id":"lost-1"}`)
	m.Header.Set("Orderstore-Original-Source", "ORDER_EVENTS edge-1")
	m.Header.Set("Orderstore-Original-Stream", "ORDER_EVENTS_ALL")
	m.Header.Set("Orderstore-Original-Subject", "edge-1.orders.created")
	m.Header.Set("Orderstore-Original-Sequence", "7")
	m.Header.Set("Orderstore-Error", "lost at edge edge-1: never acknowledged there")
	ack, err := hjs.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hub.ReplayDeadLetter(ctx, ack.Sequence); err == nil || !strings.Contains(err.Error(), "never acknowledged") {
		t.Errorf("replay of a copy an edge lost: %v, want a refusal", err)
	}
	if dls, _, err := hub.DeadLetters(ctx, ack.Sequence, 1); err != nil || len(dls) != 1 || dls[0].Sequence != ack.Sequence {
		t.Errorf("the lost copy's dead letter after its refused replay: %+v %v", dls, err)
	}
	// Without its source's prefix, a subject must still be one of the hub's stream's.
	for _, subject := range []string{"edge-1.$JS.API.STREAM.PURGE.ORDER_EVENTS", "hub.$KV.ORDERS.x"} {
		m := nats.NewMsg("dlq.ORDER_EVENTS_DLQ." + subject)
		m.Header.Set("Orderstore-Original-Subject", subject)
		ack, err := hjs.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hub.ReplayDeadLetter(ctx, ack.Sequence); err == nil || !strings.Contains(err.Error(), "none of stream ORDER_EVENTS") {
			t.Errorf("replay at the hub to %s: %v, want refused", subject, err)
		}
	}
	if st, err := hjs.Stream(ctx, "ORDER_EVENTS"); err != nil || st.CachedInfo().State.Msgs != 1 {
		t.Errorf("the hub's stream after the refused replays: %v, want the one replayed event", err)
	}
}
