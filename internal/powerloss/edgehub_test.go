//go:build linux

package powerloss_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// An edge's power cuts, seen from its hub: the edge (durability
// group-commit) runs on the power-loss file system, the hub on a normal
// directory, sourcing the edge's ORDER_EVENTS over the leaf link into
// ORDER_EVENTS_ALL. Producers ack events on the edge while the hub sources;
// the edge's power is cut (stopped, unsynced writes dropped, killed) at a
// random moment, it starts again on what was durable and the producers
// continue, -powerloss.edgecuts times. An event the hub copied in the
// moment between the edge storing it and making it durable is lost at the
// edge, which gives its sequence to the next event; the hub must notice
// and copy again.
//
// At the end the hub holds exactly the edge's stream: every event the edge
// acknowledged, exactly once, in the edge's order, at its sequence; what
// it had copied and the edge lost is in the hub's dead-letter stream
// ("lost at edge"), none of it acknowledged, and counted in /v1/status.

var edgeCutsFlag = flag.Int("powerloss.edgecuts", 3, "power cuts of the edge in TestEdgePowerLossHub (CI: 3; try 30)")

const (
	envEdgeStore = "ORDERSTORE_POWERLOSS_EDGE_STORE"
	envEdgeLeaf  = "ORDERSTORE_POWERLOSS_EDGE_LEAF" // the hub's leaf address
	edgeName     = "edge-1"
	aggStream    = "ORDER_EVENTS_ALL"
	leafUser     = "edge"
	leafPassword = "leaf-secret-1"
)

// With envEdgeStore set the test binary is the edge: it starts on that
// store, prints "READY <client url>" and runs until killed (before
// TestMain, which would start the lone appliance instead).
func init() {
	if store := os.Getenv(envEdgeStore); store != "" {
		os.Exit(runEdgeChild(store, os.Getenv(envEdgeLeaf)))
	}
}

func runEdgeChild(store, leaf string) int {
	cfg := applianceConfig(store, modes["group-commit"])
	cfg.Server.Name = edgeName
	cfg.JetStream.Domain = edgeName
	cfg.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-leaf://" + leaf, User: leafUser, Password: leafPassword}}
	cfg.LeafNode.ReconnectInterval = 250 * time.Millisecond
	// No processor at the edge (the hub projects): nothing but the
	// producers' acks and the committer's idle round (every second) syncs
	// the store, so events published without waiting for an ack stay
	// unsynced, and sourced by the hub, for up to a second.
	cfg.Processor.Enabled = false
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	app, err := orderstore.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "START FAILED: %v\n", err)
		return 1
	}
	fmt.Printf("READY %s\n", app.ClientURL())
	err = app.Wait()
	fmt.Fprintf(os.Stderr, "STOPPED: %v\n", err)
	return 1
}

// startEdge runs the test binary as the edge on the rig's store and waits
// until it is ready.
func (rg *rig) startEdge(t *testing.T, leaf string) *child {
	t.Helper()
	c, err := startChild(t, "the edge", envEdgeStore+"="+rg.store, envEdgeLeaf+"="+leaf)
	if err != nil {
		t.Fatalf("the edge did not start on its store (%s):\n%s", rg.store, err)
	}
	return c
}

func TestEdgePowerLossHub(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-powerloss.seed %d repeats it), %d cuts", seed, seed, *edgeCutsFlag)
	r := rand.New(rand.NewPCG(seed, 17))
	t0 := time.Now()
	ctx := context.Background()

	leaf := orderstoretest.Addrs(t, 1)[0]
	hub := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Server.Name = "hub"
		c.JetStream.Domain = "hub"
		c.LeafNode.Listen = leaf
		c.LeafNode.User, c.LeafNode.Password = leafUser, leafPassword
		c.Hub = orderstore.HubConfig{Stream: aggStream, Edges: []string{edgeName}}
		c.JetStream.MaxFileStore = 4 << 30
	})
	hjs := embeddedtest.JetStream(t, hub)

	rg := newRig(t, false)
	l := &ledger{acked: map[uint64]*event{}}
	c := rg.startEdge(t, leaf)
	acked, edgeLost := 0, 0
	var wantLost, wantRepairs uint64 // copies the hub held past the edge's end after a cut; cuts that left any
	lostData := map[string]bool{}    // the events the hub copied and the edge lost
	var st hubSourceStatus
	for cut := 1; ; cut++ {
		var phases []string
		mark := time.Now()
		phase := func(name string) {
			phases = append(phases, fmt.Sprintf("%s %s", name, time.Since(mark).Round(time.Millisecond)))
			mark = time.Now()
		}
		last := cut > *edgeCutsFlag
		start, err := hubCount(ctx, hjs)
		if err != nil {
			t.Fatal(err)
		}
		// The producers ack events while the hub sources them (once its
		// source resumed after the restart), for a random while; after
		// the last restart, until 500 more are acked.
		cycle := newCycle(t, c, l, cut)
		runFor := time.Duration(300+r.IntN(1700)) * time.Millisecond
		var deadline time.Time
		embeddedtest.WaitFor(t, 60*time.Second, func() error {
			if c.Exited() {
				t.Fatalf("run %d: the edge exited while publishing:\n%s", cut, c.Out.String())
			}
			if deadline.IsZero() {
				n, err := hubCount(ctx, hjs)
				if err != nil || n <= start {
					return fmt.Errorf("the hub holds %d events from %s, %d before this run (%v): its source has not resumed", n, edgeName, start, err)
				}
				phase("source resumed")
				deadline = time.Now().Add(runFor)
			}
			if n := cycle.acked(); n == 0 || time.Now().Before(deadline) || last && n < 500 {
				return fmt.Errorf("%d acked", n)
			}
			return nil
		})
		cycle.stop()
		acked += cycle.acked()
		phase("acked publishing")

		// The hub holds exactly the edge's stream: every event the edge
		// acknowledged, once, in order (also those that took the
		// sequences of events lost in the cut before), none it lost.
		ejs := clientJetStream(t, c)
		var edgeMsgs []streamEvent
		embeddedtest.WaitFor(t, 2*time.Minute, func() error {
			if c.Exited() {
				t.Fatalf("the edge exited:\n%s", c.Out.String())
			}
			var err error
			edgeMsgs, err = hubMatchesEdge(ctx, hjs, ejs, l)
			return err
		})
		phase(fmt.Sprintf("the hub matches the edge's %d events", len(edgeMsgs)))
		// What it had copied and the edge lost is dead-lettered and
		// counted.
		var dead []string
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			var err error
			if dead, err = readLostAtEdge(ctx, hjs, "ORDER_EVENTS_DLQ"); err != nil {
				return err
			}
			st = hubSource(t, hub)
			if st.LostEvents != wantLost || st.Regressions != wantRepairs || uint64(len(dead)) != wantLost || st.Regressed || !st.Reachable || st.Behind != 0 {
				return fmt.Errorf("hub source %+v; %d dead letters lost at the edge; want %d lost events in %d regressions, all dead-lettered", st, len(dead), wantLost, wantRepairs)
			}
			return nil
		})
		for _, d := range dead {
			if !lostData[d] {
				t.Errorf("dead-lettered as lost at the edge, but not an event the edge lost in a cut: %s", d)
			}
		}
		if last {
			t.Logf("after the last restart: %d acked; %s", cycle.acked(), strings.Join(phases, ", "))
			break
		}

		// Then a burst of events nobody waits for: stored at the edge, not
		// yet synced (nothing asks for a sync but the idle round, up to a
		// second away), sourced by the hub. The power is cut as soon as
		// the hub holds them.
		burstData := coreBurst(t, c, cut, burst)
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			m, _, err := lastHubCopy(ctx, hjs)
			if err != nil {
				return err
			}
			if !bytes.Equal(m, burstData[len(burstData)-1]) {
				return fmt.Errorf("the hub's last copy is %s, waiting for %s", m, burstData[len(burstData)-1])
			}
			return nil
		})
		_, heldSeq, _ := lastHubCopy(ctx, hjs)
		phase("burst sourced")
		rg.powerCut(t, c)
		rg.restore(t)
		phase("cut and restore")
		c = rg.startEdge(t, leaf)
		phase("restart")

		// The edge kept every event it acknowledged (group commit).
		msgs := readStream(t, ctx, clientJetStream(t, c), "ORDER_EVENTS")
		lost := 0
		l.mu.Lock()
		for seq, ev := range l.acked {
			if got, ok := msgs[seq]; !ok || got.subject != ev.subject || !bytes.Equal(got.data, ev.data) {
				lost++
				t.Errorf("cut %d: the edge lost acknowledged event seq %d %s %s", cut, seq, ev.subject, ev.data)
				delete(l.acked, seq)
			}
		}
		l.mu.Unlock()
		edgeLost += lost
		var edgeLast uint64
		if len(msgs) > 0 {
			edgeLast = slices.Max(slices.Collect(maps.Keys(msgs)))
		}
		// What the hub had copied past the edge's end was lost there: the
		// burst's last events.
		lostHere := heldSeq - min(heldSeq, edgeLast)
		if lostHere > uint64(len(burstData)) {
			t.Fatalf("cut %d: the hub had copied up to edge seq %d, the edge came back with %d: more lost than the burst of %d", cut, heldSeq, edgeLast, len(burstData))
		}
		for _, d := range burstData[uint64(len(burstData))-lostHere:] {
			lostData[string(d)] = true
		}
		wantLost += lostHere
		if lostHere > 0 {
			wantRepairs++
		}
		phase("check the edge")
		t.Logf("cut %d: %d acked in this run (publishing for %s once the hub's source resumed); the hub had copied up to edge seq %d at the cut; the edge came back with %d events (last seq %d): %d copies at the hub lost at the edge; %s",
			cut, cycle.acked(), runFor, heldSeq, len(msgs), edgeLast, lostHere, strings.Join(phases, ", "))
		if t.Failed() {
			t.FailNow()
		}
	}
	l.mu.Lock()
	expected := len(l.acked)
	l.mu.Unlock()
	t.Logf("%d cuts in %s: %d events acked, %d acked events lost at the edge; the hub holds every one of the %d acked events still expected, once, in the edge's order; "+
		"repaired: %d copies lost at the edge moved to the dead-letter stream in %d repairs (last: %s)",
		*edgeCutsFlag, time.Since(t0).Round(time.Millisecond), acked, edgeLost, expected, st.LostEvents, st.Regressions, st.LastRegression)
}

// hubMatchesEdge checks that the aggregate's events from the edge are the
// edge's stream, event for event, and that every acknowledged event of the
// ledger is among them exactly once; it returns the edge's events.
func hubMatchesEdge(ctx context.Context, hjs, ejs jetstream.JetStream, l *ledger) ([]streamEvent, error) {
	es, err := ejs.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		return nil, err
	}
	cs, err := readHubCopies(ctx, hjs)
	if err != nil {
		return nil, err
	}
	state := es.CachedInfo().State
	if uint64(len(cs)) != state.Msgs || len(cs) > 0 && cs[len(cs)-1].sseq != state.LastSeq {
		var lastS uint64
		if len(cs) > 0 {
			lastS = cs[len(cs)-1].sseq
		}
		return nil, fmt.Errorf("the hub holds %d copies up to edge seq %d; the edge %d events up to %d", len(cs), lastS, state.Msgs, state.LastSeq)
	}
	edge, err := readEvents(ctx, ejs, "ORDER_EVENTS", ">")
	if err != nil {
		return nil, err
	}
	// Every acknowledged event exactly once.
	count := map[string]int{}
	for _, c := range cs {
		count[string(c.data)]++
	}
	var missing, twice []string
	l.mu.Lock()
	for seq, ev := range l.acked {
		switch n := count[string(ev.data)]; {
		case n == 0:
			missing = append(missing, fmt.Sprintf("seq %d %s", seq, ev.data))
		case n > 1:
			twice = append(twice, fmt.Sprintf("seq %d %s (%d times)", seq, ev.data, n))
		}
	}
	l.mu.Unlock()
	if len(missing) > 0 || len(twice) > 0 {
		slices.Sort(missing)
		slices.Sort(twice)
		return nil, fmt.Errorf("%d events the edge acknowledged are not at the hub (%v), %d more than once (%v)",
			len(missing), missing[:min(len(missing), 3)], len(twice), twice[:min(len(twice), 3)])
	}
	// The edge's stream, in its order, at its sequences.
	if len(edge) != len(cs) {
		return nil, fmt.Errorf("the hub holds %d copies, the edge %d events", len(cs), len(edge))
	}
	for i, m := range edge {
		if cs[i].sseq != m.sseq || cs[i].subject != edgeName+"."+m.subject || !bytes.Equal(cs[i].data, m.data) {
			return nil, fmt.Errorf("the hub's copy %d is edge seq %d %s %s; the edge's event %d is seq %d %s %s",
				i, cs[i].sseq, cs[i].subject, cs[i].data, i, m.sseq, m.subject, m.data)
		}
	}
	return edge, nil
}

// burst is how many events coreBurst publishes before each cut.
const burst = 20

// coreBurst publishes n events without a reply (nobody waits for an ack)
// and returns their data, in order.
func coreBurst(t *testing.T, c *child, cut, n int) [][]byte {
	t.Helper()
	nc, err := nats.Connect(c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out [][]byte
	for i := range n {
		data := fmt.Appendf(nil, `{"order_id":"o-burst-%d","event_id":"c%d-burst-%d"}`, i%10, cut, i)
		if err := nc.Publish("orders.created", data); err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return out
}

// lastHubCopy is the data and edge sequence of the aggregate's last event
// from the edge.
func lastHubCopy(ctx context.Context, js jetstream.JetStream) ([]byte, uint64, error) {
	st, err := js.Stream(ctx, aggStream)
	if err != nil {
		return nil, 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, edgeName+".>")
	if err != nil {
		return nil, 0, err
	}
	var sseq uint64
	if f := strings.Fields(m.Header.Get("Nats-Stream-Source")); len(f) >= 2 {
		sseq, _ = strconv.ParseUint(f[1], 10, 64)
	}
	return m.Data, sseq, nil
}

func clientJetStream(t *testing.T, c *child) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// hubCount is how many events the aggregate holds from the edge.
func hubCount(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, aggStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(edgeName+".>"))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// streamEvent is one event of a stream: the edge's, or the aggregate's
// from the edge.
type streamEvent struct {
	sseq    uint64 // the edge's sequence (an aggregate's Nats-Stream-Source)
	subject string
	data    []byte
}

// readHubCopies reads the aggregate's events from the edge, in order.
func readHubCopies(ctx context.Context, js jetstream.JetStream) ([]streamEvent, error) {
	return readEvents(ctx, js, aggStream, edgeName+".>")
}

// readEvents reads a stream's events on filter, in order; sseq is the
// Nats-Stream-Source sequence of a sourced event, else the stream's own.
func readEvents(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]streamEvent, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	if n == 0 {
		return nil, nil
	}
	// A consumer of its own, removed after the read (the test polls
	// this: consumers left behind would reach the account's limit).
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: 30 * time.Second, MemoryStorage: true})
	if err != nil {
		return nil, err
	}
	defer js.DeleteConsumer(context.Background(), stream, cons.CachedInfo().Name)
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	out := make([]streamEvent, 0, n)
	for {
		m, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s (%s) after %d events: %w", stream, filter, len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		c := streamEvent{sseq: md.Sequence.Stream, subject: m.Subject(), data: m.Data()}
		if f := strings.Fields(m.Headers().Get("Nats-Stream-Source")); len(f) >= 2 {
			c.sseq, _ = strconv.ParseUint(f[1], 10, 64)
		}
		out = append(out, c)
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// readLostAtEdge is the data of the dead letters whose error says they
// were lost at an edge.
func readLostAtEdge(ctx context.Context, js jetstream.JetStream, dlq string) ([]string, error) {
	st, err := js.Stream(ctx, dlq)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		} else if err != nil {
			return nil, err
		}
		if strings.Contains(m.Header.Get("Orderstore-Error"), "lost at edge") {
			out = append(out, string(m.Data))
		}
	}
	return out, nil
}

// hubSourceStatus is the edge's entry in the hub's /v1/status topology
// (decoded by its JSON names).
type hubSourceStatus struct {
	Edge           string `json:"edge"`
	Reachable      bool   `json:"reachable"`
	EdgeLastSeq    uint64 `json:"edge_last_seq"`
	SourcedSeq     uint64 `json:"sourced_seq"`
	Behind         uint64 `json:"behind"`
	Regressed      bool   `json:"regressed"`
	LostEvents     uint64 `json:"lost_events"`
	Regressions    uint64 `json:"regressions"`
	LastRegression string `json:"last_regression"`
}

func hubSource(t *testing.T, hub *orderstore.Appliance) hubSourceStatus {
	t.Helper()
	rec := httptest.NewRecorder()
	hub.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/status", nil))
	if rec.Code != 200 {
		t.Fatalf("/v1/status = %d %s", rec.Code, rec.Body)
	}
	var st struct {
		Topology *struct {
			Sources []hubSourceStatus `json:"sources"`
		} `json:"topology"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Topology == nil || len(st.Topology.Sources) != 1 || st.Topology.Sources[0].Edge != edgeName {
		t.Fatalf("hub /v1/status topology: %s", rec.Body)
	}
	return st.Topology.Sources[0]
}
