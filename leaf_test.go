package orderstore_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

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

// rawLeaf is a leaf peer written by hand, as anyone holding an edge's leaf credential could write
// one: the leaf node protocol over one TCP connection. It answers the hub's JetStream API requests
// for the domains it claims, with made-up consumers, and forges their deliveries with any subject,
// headers and sequences (what no stock nats-server's consumer would send).
type rawLeaf struct {
	conn net.Conn
	mu   sync.Mutex // guards what follows and every write, so heartbeats and deliveries keep order
	// cons is each claimed domain's made-up source consumer (the latest create), asked counts the
	// hub's requests by domain, answer is the deliver subject a create's answer names ("" the one
	// asked for), sseq the last stream sequence forged.
	cons   map[string]*rawConsumer
	asked  map[string]int
	answer string
	sseq   uint64
	silent bool          // it answers nothing and sends no heartbeat
	closed chan struct{} // closed once the hub closed the connection
}

type rawConsumer struct {
	name, deliver string
	creates       int
	dseq          uint64
}

// dialRawLeaf signs in at the hub's leaf listener as user and claims each domain's API (silent:
// it answers nothing).
func dialRawLeaf(t *testing.T, addr, user, password string, silent bool, domains ...string) *rawLeaf {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &rawLeaf{conn: conn, cons: map[string]*rawConsumer{}, asked: map[string]int{}, silent: silent, closed: make(chan struct{})}
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("the hub's leaf listener greeted with %q, %v", line, err)
	}
	connect, _ := json.Marshal(map[string]any{"user": user, "pass": password, "name": "rogue", "headers": true, "protocol": 1})
	fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", connect)
	for line := ""; !strings.HasPrefix(line, "PONG"); {
		if line, err = br.ReadString('\n'); err != nil || strings.HasPrefix(line, "-ERR") {
			t.Fatalf("the rogue's sign-in as %s: %q, %v", user, line, err)
		}
	}
	for _, d := range domains {
		fmt.Fprintf(conn, "LS+ $JS.%s.API.>\r\n", d)
	}
	go r.read(br)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.closed:
				return
			case <-tick.C:
				r.heartbeats()
			}
		}
	}()
	return r
}

// read takes the hub's messages: requests on a claimed domain's API are answered.
func (r *rawLeaf) read(br *bufio.Reader) {
	defer close(r.closed)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "PING":
			r.mu.Lock()
			io.WriteString(r.conn, "PONG\r\n")
			r.mu.Unlock()
			continue
		case "LMSG", "HMSG":
		default:
			continue
		}
		size, _ := strconv.Atoi(f[len(f)-1])
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return
		}
		hdrLen := 0
		args := f[1 : len(f)-1]
		if f[0] == "HMSG" {
			hdrLen, _ = strconv.Atoi(f[len(f)-2])
			args = args[:len(args)-1]
		}
		subject, reply := args[0], ""
		if len(args) > 2 && args[1] == "+" || len(args) == 2 {
			reply = args[len(args)-1]
			if args[1] == "+" {
				reply = args[2]
			}
		}
		r.request(subject, reply, buf[hdrLen:size])
	}
}

func (r *rawLeaf) request(subject, reply string, data []byte) {
	tok := strings.Split(subject, ".")
	if len(tok) < 4 || tok[0] != "$JS" || tok[2] != "API" || reply == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[tok[1]]++
	answer := []byte(`{"type":"io.nats.jetstream.api.v1.account_info_response","rogue":true}`)
	if len(tok) > 5 && tok[3] == "CONSUMER" && tok[4] == "CREATE" {
		var req struct {
			Config struct {
				Name    string `json:"name"`
				Deliver string `json:"deliver_subject"`
			} `json:"config"`
		}
		json.Unmarshal(data, &req)
		c := r.cons[tok[1]]
		if c == nil {
			c = &rawConsumer{}
			r.cons[tok[1]] = c
		}
		c.name, c.deliver, c.dseq = req.Config.Name, req.Config.Deliver, 0
		c.creates++
		answer = fmt.Appendf(nil, `{"type":"io.nats.jetstream.api.v1.consumer_create_response","stream_name":"ORDER_EVENTS","name":%q,`+
			`"config":{"name":%q,"deliver_subject":%q,"ack_policy":"none"},"delivered":{"consumer_seq":0,"stream_seq":0}}`,
			c.name, c.name, cmp.Or(r.answer, c.deliver))
	}
	if !r.silent {
		fmt.Fprintf(r.conn, "LMSG %s %d\r\n%s\r\n", reply, len(answer), answer)
	}
}

// heartbeats sends each made-up consumer's idle heartbeat, so that the hub keeps its source.
func (r *rawLeaf) heartbeats() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cons {
		if !r.silent {
			hdr := fmt.Sprintf("NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n\r\n", c.dseq, r.sseq)
			fmt.Fprintf(r.conn, "HMSG %s %d %d\r\n%s\r\n", c.deliver, len(hdr), len(hdr), hdr)
		}
	}
}

// consumer is domain's made-up consumer once the hub asked for one, and how many it asked for.
func (r *rawLeaf) consumer(domain string) (rawConsumer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cons[domain]
	if !ok {
		return rawConsumer{}, false
	}
	return *c, true
}

// deliver forges the next delivery of domain's consumer on its deliver subject (or on, when set)
// as nats sends one across a leaf link (the ack reply, then '@' and the event's subject): an event
// for order on subject, with Nats-Msg-Id id when set. counted says whether the hub is to take it
// as the consumer's next delivery.
func (r *rawLeaf) deliver(domain, on, subject, id, order string, counted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cons[domain]
	r.sseq++
	dseq := c.dseq + 1
	if counted {
		c.dseq = dseq
	}
	r.publish(cmp.Or(on, c.deliver), fmt.Sprintf("$JS.ACK.ORDER_EVENTS.%s.1.%d.%d.%d.0@%s", c.name, r.sseq, dseq, time.Now().UnixNano(), subject), id, probe(order))
}

// publish sends one message to the hub (mu held).
func (r *rawLeaf) publish(subject, reply, id string, data []byte) {
	hdr := "NATS/1.0\r\n\r\n"
	if id != "" {
		hdr = "NATS/1.0\r\nNats-Msg-Id: " + id + "\r\n\r\n"
	}
	fmt.Fprintf(r.conn, "HMSG %s %s %d %d\r\n%s%s\r\n", subject, reply, len(hdr), len(hdr)+len(data), hdr, data)
}

// requestsFor counts the hub's requests the rogue received for domain.
func (r *rawLeaf) requestsFor(domain string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[domain]
}

// hubRequest sends a request to edge's JetStream API from the hub's side, on a reply subject that
// crosses the leaf link (the hub watcher's for edge), and waits for its answer.
func hubRequest(nc *nats.Conn, edge, subject string) error {
	inbox := "_ORDERSTORE_HUBWATCH." + edge + ".test." + nuid.Next()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return err
	}
	_, err = sub.NextMsg(10 * time.Second)
	return err
}

// restartSource makes the hub create edge's source consumer again at once: the aggregate without
// that source, then with it (as the hub's watcher does).
func restartSource(t *testing.T, js jetstream.JetStream, edge string) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "ORDER_EVENTS_ALL")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	without := cfg
	without.Sources = slices.DeleteFunc(slices.Clone(cfg.Sources), func(s *jetstream.StreamSource) bool {
		return s.External != nil && s.External.APIPrefix == "$JS."+edge+".API"
	})
	if _, err := js.UpdateStream(ctx, without); err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestLeafCredentialActsForItsEdgeOnly: a hub gives each edge a leaf credential of its own. A
// rogue peer signed in with edge-1's (a compromised edge-1, whose real node is not running)
// cannot answer for edge-2's domain, cannot deliver into edge-2's source, and what it sources as
// edge-1 stays edge-1's: no subject of another edge's, no dedupe id in another's space, no
// deliver subject but the one the hub asked for. The real edge-2 sources exactly once.
func TestLeafCredentialActsForItsEdgeOnly(t *testing.T) {
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	hub := orderstoretest.Start(t, perEdgeHubConfig(t, leaf, "edge-1", "edge-2"))
	e2 := orderstoretest.Start(t, perEdgeConfig("edge-2", leaf))
	ijs, hjs, ejs := orderstore.InternalJetStream(hub), embeddedtest.JetStream(t, hub), embeddedtest.JetStream(t, e2)
	var edgeEvents []string
	publish := func(id string) {
		t.Helper()
		if _, err := ejs.Publish(ctx, "orders.created", probe(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
		edgeEvents = append(edgeEvents, id)
	}
	inAggregate := func(t *testing.T, id string) {
		t.Helper()
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if len(storedMarkers(t, hjs, "ORDER_EVENTS_ALL")[id]) == 0 {
				return fmt.Errorf("%s not in the aggregate yet", id)
			}
			return nil
		})
	}
	publish("b-0")
	inAggregate(t, "b-0")

	user, password := leafCredential("edge-1")
	r := dialRawLeaf(t, leaf, user, password, false, "edge-2", "edge-1")
	restartSource(t, ijs, "edge-1")
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, ok := r.consumer("edge-1"); !ok {
			return errors.New("the hub has not asked the rogue for edge-1's source consumer")
		}
		return nil
	})
	ctl := 0
	// sync has the rogue send what before sends, then a control event it sources as edge-1, again
	// on each consumer the hub asks it for meanwhile, until the control event is in the aggregate
	// and projected (or the event forged is in the aggregate): what before sent is then known.
	sync := func(t *testing.T, before func(), forged string) {
		t.Helper()
		ctl++
		id, creates := fmt.Sprintf("ctl-%d", ctl), -1
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if c, _ := r.consumer("edge-1"); c.creates != creates {
				creates = c.creates
				before()
				r.deliver("edge-1", "", "orders.created", "", id, true)
			}
			if held := storedMarkers(t, hjs, "ORDER_EVENTS_ALL"); forged != "" && len(held[forged]) > 0 {
				return nil
			} else if len(held[id]) == 0 {
				return fmt.Errorf("%s not in the aggregate yet", id)
			}
			_, err := hub.Order(ctx, id)
			return err
		})
	}

	t.Run("a_answers_only_its_own_domain", func(t *testing.T) {
		// The hub's requests to edge-2's API (its source's, its watcher's, this one) reach edge-2
		// alone. The rogue claimed edge-2 before edge-1, and the hub asks edge-2 first: once the
		// rogue has answered for edge-1, it has received what it would for edge-2.
		if err := hubRequest(ijs.Conn(), "edge-2", "$JS.edge-2.API.INFO"); err != nil {
			t.Fatalf("edge-2's domain: %v", err)
		}
		if err := hubRequest(ijs.Conn(), "edge-1", "$JS.edge-1.API.INFO"); err != nil {
			t.Fatalf("the rogue's own domain: %v", err)
		}
		if n := r.requestsFor("edge-2"); n > 0 {
			t.Errorf("the rogue received %d of the hub's requests to edge-2's API", n)
		}
	})

	t.Run("b_cannot_deliver_into_edge_2s_source", func(t *testing.T) {
		// Even knowing edge-2's source consumer and where it delivers, as a peer signed in with
		// edge-2's own credential (it answers nothing) learns them when the hub creates it again.
		user, password := leafCredential("edge-2")
		obs := dialRawLeaf(t, leaf, user, password, true, "edge-2")
		restartSource(t, ijs, "edge-2")
		var c rawConsumer
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			var ok bool
			if c, ok = obs.consumer("edge-2"); !ok {
				return errors.New("the hub has not asked edge-2 for its source consumer again")
			}
			return nil
		})
		user, password = leafCredential("edge-1")
		rb := dialRawLeaf(t, leaf, user, password, false)
		rb.mu.Lock()
		rb.publish(c.deliver, fmt.Sprintf("$JS.ACK.ORDER_EVENTS.%s.1.1000.1.%d.0@orders.created", c.name, time.Now().UnixNano()), "", probe("forged-b"))
		rb.mu.Unlock()
		// The hub closes the link of a peer that publishes where it may not; or it took the event.
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			select {
			case <-rb.closed:
				return nil
			default:
			}
			if len(storedMarkers(t, hjs, "ORDER_EVENTS_ALL")["forged-b"]) > 0 {
				return nil
			}
			return errors.New("the rogue's delivery into edge-2's source neither refused nor stored")
		})
		if s := storedMarkers(t, hjs, "ORDER_EVENTS_ALL")["forged-b"]; len(s) > 0 {
			t.Errorf("the rogue's delivery into edge-2's source is in the aggregate on %v", s)
		}
		sync(t, func() {}, "")
		if _, err := hub.Order(ctx, "forged-b"); err == nil {
			t.Error("the rogue's order forged-b is in the hub's projection")
		}
		// Its stream sequence did not make the hub skip edge-2's next event.
		publish("b-1")
		inAggregate(t, "b-1")
	})

	t.Run("c_its_own_source_stays_its_own", func(t *testing.T) {
		sync(t, func() {
			r.deliver("edge-1", "", "edge-2.orders.created", "", "forged-subject", true)
			r.deliver("edge-1", "", "orders.created", "edge-2/ANONYMOUS:b-2", "forged-id", true)
		}, "")
		held := storedMarkers(t, hjs, "ORDER_EVENTS_ALL")
		if s := held["forged-subject"]; len(s) > 0 {
			t.Errorf("an event the rogue sourced as edge-1 is in the aggregate on %v", s)
		}
		if s := held["forged-id"]; len(s) == 0 || s[0] != "edge-1.orders.created" {
			t.Errorf("the rogue's own event forged-id is in the aggregate on %v, want on edge-1.orders.created", s)
		}
		// Its forged id (edge-2's, for the event below) made the hub skip no event of edge-2's.
		publish("b-2")
		inAggregate(t, "b-2")
	})

	t.Run("d_subscribes_only_the_deliver_subject_asked_for", func(t *testing.T) {
		// A create's answer names a deliver subject of the rogue's choosing (a wildcard over
		// every edge's deliveries): the hub keeps to the one it asked for.
		c, _ := r.consumer("edge-1")
		r.mu.Lock()
		r.answer = "$JS.S.>"
		r.mu.Unlock()
		restartSource(t, ijs, "edge-1")
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if now, _ := r.consumer("edge-1"); now.creates == c.creates {
				return errors.New("the hub has not asked the rogue for edge-1's source consumer again")
			}
			return nil
		})
		sync(t, func() { r.deliver("edge-1", "$JS.S.edge-1.picked", "orders.created", "", "forged-pick", false) }, "forged-pick")
		if s := storedMarkers(t, hjs, "ORDER_EVENTS_ALL")["forged-pick"]; len(s) > 0 {
			t.Errorf("the rogue's delivery on a deliver subject of its choosing is in the aggregate on %v", s)
		}
	})

	t.Run("e_edge_2_sourced_exactly_once", func(t *testing.T) {
		held := storedMarkers(t, hjs, "ORDER_EVENTS_ALL")
		for _, id := range edgeEvents {
			if s := held[id]; len(s) != 1 || s[0] != "edge-2.orders.created" {
				t.Errorf("%s is in the aggregate on %v, want once on edge-2.orders.created", id, s)
			}
		}
	})
}

// leafCredential is edge's own leaf user and password at a hub of perEdgeHubConfig.
func leafCredential(edge string) (string, string) { return "leaf-" + edge, "secret-of-" + edge }

// perEdgeHubConfig is hubConfig with a leaf user of its own for each edge instead of the shared
// one.
func perEdgeHubConfig(t testing.TB, leaf string, edges ...string) func(*orderstore.Config) {
	return func(c *orderstore.Config) {
		hubConfig(t, leaf, edges...)(c)
		c.LeafNode.User, c.LeafNode.Password = "", ""
		for _, e := range edges {
			user, password := leafCredential(e)
			c.LeafNode.Users = append(c.LeafNode.Users, orderstore.LeafUser{User: user, Password: password, Edge: e})
		}
	}
}

// perEdgeConfig is edgeConfig signing in with the edge's own leaf user.
func perEdgeConfig(name, leaf string) func(*orderstore.Config) {
	return func(c *orderstore.Config) {
		edgeConfig(name, leaf)(c)
		c.LeafNode.Remotes[0].User, c.LeafNode.Remotes[0].Password = leafCredential(name)
	}
}
