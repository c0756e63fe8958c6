package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
)

// An edge's power cut, seen from its hub, without a power-loss file
// system (the quick reproduction of /work/shared/notes/integrity-testing.md):
// the edge acks N events; the hub sources them; K more events are stored at
// the edge (core publishes, never acknowledged) and sourced by the hub; the
// edge is killed with SIGKILL and its last block cut back to what it held
// after the N acked events (what a power cut does to the unsynced tail),
// its index removed; the edge starts again on the same store and acks M
// more events, the first K of which take the lost events' sequences.
//
// The hub must end up with every event the edge acknowledged, exactly
// once, in the edge's order and at the edge's sequences, none of the lost
// ones (they are in the hub's dead-letter stream, saying they were lost at
// the edge), and report the repair in /v1/status and /metrics.

// With edgeCutEnvStore set the test binary is the edge: it starts on that
// store, prints "READY <client url> <admin address>" and runs until killed.
const (
	edgeCutEnvStore = "ORDERSTORE_EDGECUT_STORE"
	edgeCutEnvLeaf  = "ORDERSTORE_EDGECUT_LEAF" // the hub's leaf address
	// edgeCutEnvEarly: the edge publishes this many acked events
	// ("early-<i>") during its start-up, as soon as nats is ready.
	edgeCutEnvEarly = "ORDERSTORE_EDGECUT_EARLY"
	edgeCutName     = "edge-1"
)

func init() {
	if store := os.Getenv(edgeCutEnvStore); store != "" {
		os.Exit(edgeCutChildMain(store, os.Getenv(edgeCutEnvLeaf)))
	}
}

func edgeCutChildMain(store, leaf string) int {
	cfg := orderstore.DefaultConfig() // durability group-commit
	cfg.JetStream.StoreDir = store
	cfg.JetStream.MaxFileStore = 2 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 1 << 30
	cfg.Server.Port = -1
	cfg.Admin.Listen = "127.0.0.1:0"
	edgeConfig(edgeCutName, leaf)(&cfg)
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if n, _ := strconv.Atoi(os.Getenv(edgeCutEnvEarly)); n > 0 {
		cfg.Logger = slog.New(edgeCutEarly{cfg.Logger.Handler(), n})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	app, err := orderstore.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "START FAILED: %v\n", err)
		return 1
	}
	fmt.Printf("READY %s %s\n", app.ClientURL(), app.AdminAddr())
	err = app.Wait()
	fmt.Fprintf(os.Stderr, "STOPPED: %v\n", err)
	return 1
}

// edgeCutEarly publishes n acked events when start-up logs "nats ready":
// a producer that reconnects at once, before start-up has finished.
type edgeCutEarly struct {
	slog.Handler
	n int
}

func (h edgeCutEarly) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if r.Message != "nats ready" || a.Key != "client_url" {
			return true
		}
		nc, err := nats.Connect(a.Value.String())
		if err == nil {
			defer nc.Close()
			js, _ := jetstream.New(nc)
			for i := 0; i < h.n && err == nil; i++ {
				_, err = js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-early-%d","event_id":"early-%d"}`, i, i))
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "EARLY PUBLISH FAILED: %v\n", err)
			os.Exit(1)
		}
		return false
	})
	return h.Handler.Handle(ctx, r)
}

func (h edgeCutEarly) WithAttrs(as []slog.Attr) slog.Handler {
	return edgeCutEarly{h.Handler.WithAttrs(as), h.n}
}

func (h edgeCutEarly) WithGroup(name string) slog.Handler {
	return edgeCutEarly{h.Handler.WithGroup(name), h.n}
}

// edgeCutChild is one run of the edge process; its READY line says its
// client URL and admin address.
type edgeCutChild struct {
	*testkit.Child
	url, admin string
	store      string
	t          testing.TB
}

func startEdgeCutChild(t *testing.T, store, leaf string, env ...string) *edgeCutChild {
	t.Helper()
	c, err := testkit.StartChild(t, "the edge", append([]string{edgeCutEnvStore + "=" + store, edgeCutEnvLeaf + "=" + leaf}, env...)...)
	if err != nil {
		t.Fatalf("the edge exited while starting:\n%v", err)
	}
	f := strings.Fields(c.Ready)
	if len(f) != 2 {
		t.Fatalf("edge: READY line %q", c.Ready)
	}
	return &edgeCutChild{Child: c, url: f[0], admin: f[1], store: store, t: t}
}

// kill is kill -9: nothing of the edge's shutdown runs.
func (c *edgeCutChild) kill() { c.Kill(c.t) }

// metric is the value of the edge's metric line that begins with name
// (name includes its labels, if any).
func (c *edgeCutChild) metric(name string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.admin+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return edgeCutMetricValue(string(b), name)
}

func edgeCutMetricValue(text, name string) (float64, error) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// edgeCutMsgsDir is the edge's ORDER_EVENTS msgs/ directory.
func edgeCutMsgsDir(store string) string {
	return filepath.Join(store, "jetstream", orderstore.StreamAccount, "streams", "ORDER_EVENTS", "msgs")
}

// edgeCutLastBlock is the path and size of the highest-numbered block.
func edgeCutLastBlock(dir string) (string, int64, error) {
	blks, err := filepath.Glob(filepath.Join(dir, "*.blk"))
	if err != nil {
		return "", 0, err
	}
	best, bestN := "", -1
	for _, b := range blks {
		n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(b), ".blk"))
		if err == nil && n > bestN {
			best, bestN = b, n
		}
	}
	if best == "" {
		return "", 0, fmt.Errorf("no block in %s", dir)
	}
	fi, err := os.Stat(best)
	if err != nil {
		return "", 0, err
	}
	return best, fi.Size(), nil
}

// edgeCutCopy is one event of an aggregate from an edge.
type edgeCutCopy struct {
	seq   uint64 // the aggregate's
	sseq  uint64 // the edge's (Nats-Stream-Source)
	id    string // the event's "event_id"
	epoch string
}

// edgeCutRead reads every event of stream whose subject matches filter, in
// the stream's order.
func edgeCutRead(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]edgeCutCopy, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	total := uint64(0)
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil, nil
	}
	// A consumer of its own, removed after the read (tests poll this:
	// consumers left behind would reach the account's limit).
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
	var out []edgeCutCopy
	for {
		m, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s (%s) after %d events: %w", stream, filter, len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		var ev struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal(m.Data(), &ev)
		c := edgeCutCopy{seq: md.Sequence.Stream, id: ev.EventID, epoch: m.Headers().Get("Orderstore-Epoch")}
		if f := strings.Fields(m.Headers().Get("Nats-Stream-Source")); len(f) >= 2 {
			c.sseq, _ = strconv.ParseUint(f[1], 10, 64)
		} else {
			c.sseq = md.Sequence.Stream // the edge's own stream
		}
		out = append(out, c)
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// edgeCutAck is an event the edge acknowledged, at its sequence.
type edgeCutAck struct {
	id  string
	seq uint64
}

// edgeCutStatus is the part of the hub's /v1/status this test reads
// (decoded by its JSON names, so it also builds where they are absent).
type edgeCutStatus struct {
	Topology *struct {
		Sources []struct {
			Edge           string `json:"edge"`
			Reachable      bool   `json:"reachable"`
			EdgeLastSeq    uint64 `json:"edge_last_seq"`
			SourcedSeq     uint64 `json:"sourced_seq"`
			Behind         uint64 `json:"behind"`
			Regressed      bool   `json:"regressed"`
			LostEvents     uint64 `json:"lost_events"`
			Regressions    uint64 `json:"regressions"`
			LastRegression string `json:"last_regression"`
		} `json:"sources"`
	} `json:"topology"`
}

func TestEdgePowerCutLostEventsRepairedAtHub(t *testing.T) { edgePowerCut(t, 0) }

// The same, with a producer whose events the edge stores and acks while
// its start-up runs, before it records its new epoch: those events, the
// first of the new run, take the lost events' first sequences.
func TestEdgePowerCutEventsAckedDuringStartRepairedAtHub(t *testing.T) { edgePowerCut(t, 2) }

// edgePowerCut runs the cut, with early events acked during the edge's
// second start.
func edgePowerCut(t *testing.T, early int) {
	const (
		n = 20 // acked before the cut
		k = 5  // stored at the edge and sourced, never acked, lost
		m = 30 // acked after the restart (m > k: some land past the hub's last copy)
	)
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	hubCfg := orderstoretest.Config(t)
	hubConfig(t, leaf, edgeCutName)(&hubCfg)
	hub := orderstoretest.Start(t, func(c *orderstore.Config) { *c = hubCfg })
	hjs := embeddedtest.JetStream(t, hub)
	store := t.TempDir()
	msgsDir := edgeCutMsgsDir(store)
	const agg, filter = "ORDER_EVENTS_ALL", edgeCutName + ".>"

	hubHolds := func(want []string) func() error {
		return func() error {
			cs, err := edgeCutRead(ctx, hjs, agg, filter)
			if err != nil {
				return err
			}
			var got []string
			for _, c := range cs {
				got = append(got, c.id)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("the hub holds from %s %d events %v, want %d %v", edgeCutName, len(got), got, len(want), want)
			}
			return nil
		}
	}

	// 1. The edge acks n events; the hub sources them.
	edge := startEdgeCutChild(t, store, leaf)
	var acked []edgeCutAck
	publishAcked := func(edge *edgeCutChild, prefix string, count int) {
		t.Helper()
		nc, err := nats.Connect(edge.url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for i := range count {
			id := fmt.Sprintf("%s-%d", prefix, i)
			ack, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%s","event_id":"%s"}`, id, id))
			if err != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			acked = append(acked, edgeCutAck{id, ack.Sequence})
		}
	}
	publishAcked(edge, "acked", n)
	var ids []string
	for _, a := range acked {
		ids = append(ids, a.id)
	}
	embeddedtest.WaitFor(t, 60*time.Second, hubHolds(ids))

	// What a power cut now would leave: group commit acked each of these
	// events only after a sync covered it, and nothing else writes to the
	// stream, so the last block's size now is on disk.
	block, size, err := edgeCutLastBlock(msgsDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d acked events: block %s of %d bytes", n, filepath.Base(block), size)

	// 2. k events without acks; the hub sources them.
	nc, err := nats.Connect(edge.url)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for i := range k {
		id := fmt.Sprintf("lost-%d", i)
		lost = append(lost, id)
		if err := nc.Publish("orders.created", fmt.Appendf(nil, `{"order_id":"o-%s","event_id":"%s"}`, id, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	embeddedtest.WaitFor(t, 60*time.Second, hubHolds(append(slices.Clone(ids), lost...)))

	// 3. kill -9, the unsynced tail lost, the index rebuilt from the blocks.
	edge.kill()
	if _, s, err := edgeCutLastBlock(msgsDir); err != nil || s <= size {
		t.Fatalf("the last block holds %d bytes (%v), want more than %d: the unacked events are not in it", s, err, size)
	}
	if err := os.Truncate(block, size); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(msgsDir, "index.db")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}

	// 4. The edge starts again on its store and acks m more events.
	edge = startEdgeCutChild(t, store, leaf, fmt.Sprintf("%s=%d", edgeCutEnvEarly, early))
	for i := range early {
		acked = append(acked, edgeCutAck{fmt.Sprintf("early-%d", i), uint64(n + 1 + i)})
	}
	publishAcked(edge, "after", m)
	if got := acked[n].seq; got != n+1 {
		t.Fatalf("the first event acked after the restart took sequence %d, want %d: the reproduction did not lose the unacked events", got, n+1)
	}
	var want []string
	for i, a := range acked {
		if a.seq != uint64(i+1) {
			t.Fatalf("acked %s at sequence %d, want %d", a.id, a.seq, i+1)
		}
		want = append(want, a.id)
	}

	// The edge holds what it acked, nothing of the lost events.
	ejs := edgeCutJetStream(t, edge)
	ecs, err := edgeCutRead(ctx, ejs, "ORDER_EVENTS", "orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if got := edgeCutIDs(ecs); !slices.Equal(got, want) {
		t.Fatalf("the edge holds %v, want %v", got, want)
	}

	// The hub: every acknowledged event exactly once, in the edge's order,
	// at the edge's sequences; none of the lost ones.
	embeddedtest.WaitFor(t, 60*time.Second, hubHolds(want))
	cs, err := edgeCutRead(ctx, hjs, agg, filter)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if c.sseq != acked[i].seq {
			t.Errorf("the hub's copy of %s names edge sequence %d, the edge acked it at %d", c.id, c.sseq, acked[i].seq)
		}
		if i > 0 && c.seq <= cs[i-1].seq {
			t.Errorf("the hub holds %s (seq %d) after %s (seq %d)", c.id, c.seq, cs[i-1].id, cs[i-1].seq)
		}
	}

	// The lost events are in the hub's dead-letter stream, each once,
	// saying they were lost at the edge.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		got, err := edgeCutLostAtEdge(ctx, hjs, "ORDER_EVENTS_DLQ")
		if err != nil {
			return err
		}
		if !slices.Equal(got, lost) {
			return fmt.Errorf("dead letters lost at the edge: %v, want %v", got, lost)
		}
		return nil
	})

	// Status and metrics count the repair.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		var st edgeCutStatus
		getStatus(t, hub, &st)
		if st.Topology == nil || len(st.Topology.Sources) != 1 {
			return fmt.Errorf("hub topology %+v", st.Topology)
		}
		s := st.Topology.Sources[0]
		if s.Edge != edgeCutName || s.LostEvents != k || s.Regressions != 1 || s.LastRegression == "" {
			return fmt.Errorf("source %+v: want lost_events %d, regressions 1 and a last_regression", s, k)
		}
		if last := uint64(n + early + m); !s.Reachable || s.Regressed || s.Behind != 0 || s.EdgeLastSeq != last || s.SourcedSeq != last {
			return fmt.Errorf("source %+v: want it reachable and in step at %d", s, last)
		}
		rec := httptest.NewRecorder()
		hub.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/metrics", nil))
		for name, want := range map[string]float64{
			`orderstore_hub_edge_lost_events_total{edge="` + edgeCutName + `"}`: k,
			`orderstore_hub_edge_regressions_total{edge="` + edgeCutName + `"}`: 1,
		} {
			if v, err := edgeCutMetricValue(rec.Body.String(), name); err != nil || v != want {
				return fmt.Errorf("/metrics %s = %v (%v), want %v", name, v, err, want)
			}
		}
		t.Logf("hub source: %+v", s)
		return nil
	})
	if edge.Exited() {
		t.Fatalf("the edge exited")
	}

	// 5. The hub restarts: its watcher checks every epoch boundary again
	// and finds each copy from the boundary on carrying its epoch:
	// nothing more is dead-lettered, the aggregate is unchanged.
	if err := hub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	hub = orderstoretest.Start(t, func(c *orderstore.Config) { *c = hubCfg })
	hjs = embeddedtest.JetStream(t, hub)
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		var st edgeCutStatus
		getStatus(t, hub, &st)
		if st.Topology == nil || len(st.Topology.Sources) != 1 || !st.Topology.Sources[0].Reachable {
			return fmt.Errorf("hub topology %+v: waiting for the watcher to reach the edge (its epochs are checked then)", st.Topology)
		}
		if s := st.Topology.Sources[0]; s.LostEvents != 0 || s.Regressions != 0 {
			t.Fatalf("after the hub's restart: source %+v, want nothing lost again", s)
		}
		return nil
	})
	if got, err := edgeCutLostAtEdge(ctx, hjs, "ORDER_EVENTS_DLQ"); err != nil || !slices.Equal(got, lost) {
		t.Errorf("dead letters lost at the edge after the hub's restart: %v (%v), want %v", got, err, lost)
	}
	if err := hubHolds(want)(); err != nil {
		t.Errorf("after the hub's restart: %v", err)
	}
}

func edgeCutJetStream(t *testing.T, c *edgeCutChild) jetstream.JetStream {
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

func edgeCutIDs(cs []edgeCutCopy) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.id)
	}
	return out
}

// edgeCutLostAtEdge is the event ids of the dead letters whose error says they
// were lost at an edge, in the dead-letter stream's order.
func edgeCutLostAtEdge(ctx context.Context, js jetstream.JetStream, dlq string) ([]string, error) {
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
		if !strings.Contains(m.Header.Get("Orderstore-Error"), "lost at edge") {
			continue
		}
		var ev struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal(m.Data, &ev)
		out = append(out, ev.EventID)
	}
	return out, nil
}
