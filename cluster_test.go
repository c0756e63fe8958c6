package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/natsserver/server"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// clusterConfigs are three nodes' configurations of one R3 cluster on
// loopback (route addresses of orderstoretest.Addrs: every node lists
// them all before any starts, and a node keeps its own when it restarts).
func clusterConfigs(t testing.TB) []orderstore.Config {
	addrs := orderstoretest.Addrs(t, 3)
	var routes []string
	for _, a := range addrs {
		routes = append(routes, "nats-route://"+a)
	}
	var cfgs []orderstore.Config
	for i, a := range addrs {
		c := orderstoretest.Config(t)
		c.Server.Name = fmt.Sprintf("n%d", i+1)
		c.Cluster = orderstore.ClusterConfig{Name: "orders", Listen: a, Routes: routes, User: "route", Password: routePassword}
		c.Stream.Replicas = 3
		cfgs = append(cfgs, c)
	}
	return cfgs
}

// startAll starts the nodes at the same moment and waits for all.
func startAll(t testing.TB, cfgs []orderstore.Config) []*orderstore.Appliance {
	t.Helper()
	apps := make([]*orderstore.Appliance, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			apps[i], errs[i] = orderstore.Start(ctx, c)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, a := range apps {
			if a != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				a.Close(ctx)
				cancel()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	return apps
}

func TestClusterR3Basics(t *testing.T) {
	// The stream's leader validates every publish, made at any node (one
	// schema file, the same config on each).
	schema := filepath.Join(t.TempDir(), "created.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","required":["order_id"],"properties":{"order_id":{"pattern":"^c-"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgs := clusterConfigs(t)
	for i := range cfgs {
		cfgs[i].Validation.Schemas = map[string]string{"created": schema}
	}
	apps := startAll(t, cfgs)
	ctx := context.Background()
	nc, err := nats.Connect(apps[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for i := range 10 {
		if _, err := js.Publish(ctx, "orders.created", []byte(fmt.Sprintf(`{"order_id":"c-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range apps {
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			_, err := a.Order(ctx, "c-9")
			return err
		})
	}
	st, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Errorf("replicas = %d", r)
	}
	// An invalid event is refused by whichever node takes it; nothing is
	// stored on any.
	for i, a := range apps {
		js := embeddedtest.JetStream(t, a)
		_, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"x-1"}`))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.Code != 422 || !strings.Contains(api.Description, `at /order_id: keyword "pattern"`) {
			t.Errorf("node %d: an invalid event: %v", i+1, err)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Errorf("after the refusals the stream holds %d events, want 10", info.State.Msgs)
	}
}

// clusterRounds is how many simultaneous starts of a cluster
// TestClusterSimultaneousStartConverges tries: 5 in CI (about 6 s each on
// 2 cores), more by hand.
var clusterRounds = flag.Int("cluster.rounds", 5, "simultaneous starts of a 3-node cluster in TestClusterSimultaneousStartConverges (20 or more for a soak)")

// Test 2: three nodes started at the same moment, -cluster.rounds times:
// declaration always converges (each node declares the same R3 objects
// while the meta group elects its leader).
func TestClusterSimultaneousStartConverges(t *testing.T) {
	rounds := *clusterRounds
	if testing.Short() {
		rounds = min(rounds, 3)
	}
	for r := range rounds {
		t.Run(fmt.Sprint("round ", r+1), func(t *testing.T) {
			apps := startAll(t, clusterConfigs(t))
			ctx := context.Background()
			js := embeddedtest.JetStream(t, apps[r%3])
			for _, name := range []string{"ORDER_EVENTS", "ORDER_EVENTS_DLQ", "KV_ORDERS"} {
				st, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatalf("stream %s: %v", name, err)
				}
				if st.CachedInfo().Config.Replicas != 3 {
					t.Errorf("%s replicas = %d", name, st.CachedInfo().Config.Replicas)
				}
			}
			c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
			if err != nil {
				t.Fatal(err)
			}
			if c.CachedInfo().Config.Replicas != 0 && c.CachedInfo().Config.Replicas != 3 {
				t.Errorf("consumer replicas = %d", c.CachedInfo().Config.Replicas)
			}
			for _, a := range apps {
				if err := a.Ready(ctx); err != nil {
					t.Errorf("not ready: %v", err)
				}
			}
		})
	}
}

// Test 4 (runtime part): when a node goes away, the others keep quorum,
// retry its route (logged) and show it in their status; it comes back
// and catches up. A node with another's name is a config error.
func TestClusterNodeAwayAndDuplicateName(t *testing.T) {
	cfgs := clusterConfigs(t)
	var logs testkit.LockedBuffer
	cfgs[0].Logger = debugLogger(&logs)
	apps := startAll(t, cfgs)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, apps[0])
	if err := apps[2].Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := js.Publish(ctx, "orders.created", []byte(fmt.Sprintf(`{"order_id":"away-%d"}`, i))); err != nil {
			t.Fatalf("publish with one node away: %v", err)
		}
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		var st status.Status
		getStatus(t, apps[0], &st)
		c := st.Topology.Cluster
		if c.RoutesUp != 1 || len(c.Routes) != 3 || !c.Quorum || c.MetaLeader == "" {
			return fmt.Errorf("cluster status = %+v, want 1 other node up of 3 routes, quorum", c)
		}
		for _, r := range c.Stream.Replicas {
			if r.Name == "n3" && r.Current && !r.Offline {
				return fmt.Errorf("n3 is away but its replica is current: %+v", r)
			}
		}
		return apps[0].Ready(ctx)
	})
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "Error trying to connect to route") {
			return errors.New("no log line about the unreachable route")
		}
		return nil
	})
	// Back: it catches up.
	back, err := orderstore.Start(ctx, cfgs[2])
	if err != nil {
		t.Fatalf("restart n3: %v", err)
	}
	defer back.Close(ctx)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		_, err := back.Order(ctx, "away-4")
		return err
	})

	// A fourth node named like the first.
	dup := cfgs[2]
	dup.JetStream.StoreDir = t.TempDir()
	dup.Server.Name = cfgs[0].Server.Name
	dup.Cluster.Listen = "127.0.0.1:0" // any free port: nobody routes to it
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	app, err := orderstore.Start(ctx2, dup)
	if err == nil {
		app.Close(ctx)
		t.Fatal("a node with a duplicate name started")
	}
	var ve *orderstore.ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Field != "Server.Name" {
		t.Errorf("duplicate name: %v, want a config error naming Server.Name", err)
	}
	// Without a majority, /readyz says so.
	if err := apps[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := back.Close(ctx); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		err := apps[0].Ready(ctx)
		if err == nil || !strings.Contains(err.Error(), "no quorum") {
			return fmt.Errorf("alone of three: Ready() = %v, want no quorum", err)
		}
		return nil
	})
	apps[1], back = nil, nil
}

func getStatus(t *testing.T, app *orderstore.Appliance, v any) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://127.0.0.1/v1/status", nil)
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("/v1/status = %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}

// Test 4 (configuration part): misconfigurations are config errors naming
// the field (a file's, its key: the CLI exits 2 on them).
func TestScaleOutValidation(t *testing.T) {
	cluster := func(c *orderstore.Config) {
		c.Server.Name = "n1"
		c.Cluster = orderstore.ClusterConfig{Name: "orders", Listen: "127.0.0.1:6222", Routes: []string{"nats-route://127.0.0.1:6222"},
			User: "route", Password: routePassword}
	}
	noAuth := func(c *orderstore.Config) { cluster(c); c.Cluster.User, c.Cluster.Password = "", "" }
	tests := []struct {
		name  string
		f     func(*orderstore.Config)
		field string
	}{
		{"cluster without server.name", func(c *orderstore.Config) { cluster(c); c.Server.Name = "orderstore" }, "Server.Name"},
		{"replicas 3 without a cluster", func(c *orderstore.Config) { c.Stream.Replicas = 3 }, "Stream.Replicas"},
		{"replicas 2", func(c *orderstore.Config) { cluster(c); c.Stream.Replicas = 2 }, "Stream.Replicas"},
		{"illegal domain", func(c *orderstore.Config) { c.JetStream.Domain = "edge.1" }, "JetStream.Domain"},
		{"open route listener without auth", func(c *orderstore.Config) { noAuth(c); c.Cluster.Listen = "0.0.0.0:6222" }, "Cluster.Listen"},
		// Any local process could join a loopback route listener as a node.
		{"loopback route listener without auth", noAuth, "Cluster.Listen"},
		{"loopback routes with TLS but no verify", func(c *orderstore.Config) {
			noAuth(c)
			c.Cluster.TLS = orderstore.TLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca"}
		}, "Cluster.Listen"},
		{"cluster without routes", func(c *orderstore.Config) { cluster(c); c.Cluster.Routes = nil }, "Cluster.Routes"},
		{"bad route URL", func(c *orderstore.Config) { cluster(c); c.Cluster.Routes = []string{"10.0.0.1:6222"} }, "Cluster.Routes[0]"},
		{"edge without a domain", func(c *orderstore.Config) {
			c.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-leaf://hub:7422"}}
		}, "JetStream.Domain"},
		{"open leaf listener without auth", func(c *orderstore.Config) { c.LeafNode.Listen = "0.0.0.0:7422" }, "LeafNode.Listen"},
		{"hub without edges", func(c *orderstore.Config) {
			c.LeafNode.Listen = "127.0.0.1:7422"
			c.Hub.Stream = "ORDER_EVENTS_ALL"
		}, "Hub.Edges"},
		{"hub edge with a bad domain", func(c *orderstore.Config) {
			c.LeafNode.Listen = "127.0.0.1:7422"
			c.Hub = orderstore.HubConfig{Stream: "ORDER_EVENTS_ALL", Edges: []string{"edge 1"}}
		}, "Hub.Edges[0]"},
		{"hub without a leaf listener", func(c *orderstore.Config) {
			c.Hub = orderstore.HubConfig{Stream: "ORDER_EVENTS_ALL", Edges: []string{"edge-1"}}
		}, "LeafNode.Listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { expectProblem(t, tt.f, tt.field) })
	}
	ve := expectProblem(t, noAuth, "Cluster.Listen")
	if msg := ve.Error(); !strings.Contains(msg, "also on loopback") || !strings.Contains(msg, "cluster.user and cluster.password") || !strings.Contains(msg, "verify") {
		t.Errorf("a loopback cluster without credentials: %v, want it to name cluster.user, cluster.password and [cluster.tls] with verify", msg)
	}
	ok := orderstore.DefaultConfig()
	cluster(&ok)
	ok.Stream.Replicas = 3
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid cluster config: %v", err)
	}
}

// Routes over TLS with certificates verified both ways and route
// credentials; edges reaching a TLS leaf listener with the CA.
func TestClusterAndLeafOverTLS(t *testing.T) {
	certs := orderstoretest.TLS(t)
	cfgs := clusterConfigs(t)
	for i := range cfgs {
		cfgs[i].Cluster.User, cfgs[i].Cluster.Password = "route", "route-secret-1"
		cfgs[i].Cluster.TLS = orderstore.TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, Verify: true}
	}
	apps := startAll(t, cfgs)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, apps[1])
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"tls-1"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		_, err := apps[2].Order(ctx, "tls-1")
		return err
	})
	// A node whose certificate the others do not trust cannot join.
	other := orderstoretest.TLS(t)
	intruder := cfgs[0]
	intruder.Server.Name = "n4"
	intruder.JetStream.StoreDir = t.TempDir()
	intruder.Cluster.Listen = "127.0.0.1:0" // any free port: it dials the others
	intruder.Cluster.TLS = orderstore.TLSConfig{CertFile: other.ServerCert, KeyFile: other.ServerKey, CAFile: other.CA, Verify: true}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if app, err := orderstore.Start(ictx, intruder); err == nil {
		app.Close(ctx)
		t.Error("a node with an untrusted certificate joined the cluster")
	}

	// Leaf over TLS.
	leaf := orderstoretest.Addrs(t, 1)[0]
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"), func(c *orderstore.Config) {
		c.LeafNode.TLS = orderstore.TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
	})
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf), func(c *orderstore.Config) {
		c.LeafNode.Remotes[0].TLS = orderstore.TLSConfig{CAFile: certs.CA}
	})
	if _, err := embeddedtest.JetStream(t, edge).Publish(ctx, "orders.created", []byte(`{"order_id":"leaf-tls"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		_, err := hub.Order(ctx, "leaf-tls")
		return err
	})
}

// Admission runs where the stream's leader is, for publishes made at any
// node: one made at a follower crosses a route, and its account is the one
// nats named at the follower's service import. The same Nats-Msg-Id from
// the anonymous account at two nodes is one event (a duplicate), from
// orderstore's own account (HTTP ingest) another; the stored ids are
// scoped so and stamped with an epoch; a wildcard subject is refused at
// every node.
func TestClusterAdmissionAtEveryNode(t *testing.T) {
	apps := startAll(t, clusterConfigs(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publish := func(app *orderstore.Appliance, subject, id string) (*jetstream.PubAck, error) {
		_, js := integrityConnect(t, app, "", "")
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return js.Publish(pctx, subject, []byte(`{"order_id":"c-1"}`), jetstream.WithMsgID(id))
	}
	// Both nodes take publishes (the stream has its leader and replicas);
	// with three nodes, one of the two is a follower.
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if _, err := publish(apps[0], "orders.created", nuid.Next()); err != nil {
			return err
		}
		_, err := publish(apps[1], "orders.created", nuid.Next())
		return err
	})
	first, err := publish(apps[0], "orders.created", "same")
	if err != nil || first.Duplicate {
		t.Fatalf("node 1, id \"same\": %+v %v", first, err)
	}
	again, err := publish(apps[1], "orders.created", "same")
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("node 2, the same account's id \"same\": %+v %v, want a duplicate of %d", again, err, first.Sequence)
	}
	own, err := apps[2].Publish(ctx, "orders.created", []byte(`{"order_id":"c-1"}`), jetstream.WithMsgID("same"))
	if err != nil || own.Duplicate {
		t.Fatalf("orderstore's own account, id \"same\": %+v %v, want an event of its own", own, err)
	}
	js := orderstore.InternalJetStream(apps[0])
	s, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]string{first.Sequence: "ANONYMOUS:same", own.Sequence: "ORDERSTORE:same"} {
		var m *jetstream.RawStreamMsg
		// A direct get may reach a replica that has not stored it yet.
		embeddedtest.WaitFor(t, time.Minute, func() (err error) { m, err = s.GetMsg(ctx, seq); return err })
		if got := m.Header.Get("Nats-Msg-Id"); got != want {
			t.Errorf("seq %d stored with Nats-Msg-Id %q, want %q", seq, got, want)
		}
		if m.Header.Get(orderstore.EpochHeader) == "" || m.Header.Get("Nats-Request-Info") != "" {
			t.Errorf("seq %d headers %v: want the epoch, and no Nats-Request-Info", seq, m.Header)
		}
	}
	for i, app := range apps {
		var apiErr *jetstream.APIError
		if _, err := publish(app, "orders.*", nuid.Next()); !errors.As(err, &apiErr) || apiErr.Code != 400 {
			t.Errorf("node %d, a wildcard subject: %v, want 400", i+1, err)
		}
	}

	// The anonymous client makes a stream in the stream's account (the JetStream API it imports)
	// republish the events on orders.seed as orders.copied. Its leader, at another node than the
	// events stream's, publishes them there, and they cross the route in the stream's account
	// with no Nats-Request-Info: refused, not taken for orderstore's own.
	nc, ajs := integrityConnect(t, apps[0], "", "")
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "SIDE", Replicas: 3,
		Sources:   []*jetstream.StreamSource{{Name: "ORDER_EVENTS", FilterSubject: "orders.seed"}},
		RePublish: &jetstream.RePublish{Source: "orders.seed", Destination: "orders.copied"}}); err != nil {
		t.Fatal(err)
	}
	var leader *orderstore.Appliance
	embeddedtest.WaitFor(t, time.Minute, func() error {
		ev, err1 := s.Info(ctx)
		side, err2 := ajs.Stream(ctx, "SIDE")
		if err := errors.Join(err1, err2); err != nil || side.CachedInfo().Cluster.Leader == "" {
			return fmt.Errorf("leaders: %v", err)
		}
		if side.CachedInfo().Cluster.Leader == ev.Cluster.Leader {
			_, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.SIDE", nil, 10*time.Second)
			return fmt.Errorf("SIDE's leader is the events stream's, %s (stepped down: %v)", ev.Cluster.Leader, err)
		}
		for _, app := range apps {
			if app.Config().Server.Name == ev.Cluster.Leader {
				leader = app
			}
		}
		return nil
	})
	before, err := integrityGetStatus(leader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publish(apps[0], "orders.seed", nuid.Next()); err != nil {
		t.Fatal(err)
	}
	var copied *jetstream.RawStreamMsg
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if copied, err = s.GetLastMsgForSubject(ctx, "orders.copied"); err == nil {
			return nil
		}
		if st, err := integrityGetStatus(leader); err != nil || st.Guard["refused"] == before.Guard["refused"] {
			return fmt.Errorf("the republish neither stored nor refused: %v", err)
		}
		return nil
	})
	if copied != nil {
		t.Errorf("the republish across a route was stored with headers %v, want it refused", copied.Header)
	}
}

// In a cluster every node's processor shares the durable, so two of them
// can write one order's record at the same moment. On a replicated bucket
// nats refuses the loser's compare-and-set with 10164 ("wrong last
// sequence", without the sequence: the key has a write in flight) where a
// single node says 10071; both mean the race was lost, and the loser reads
// the record again and re-applies. (Until they did, the loser failed its
// event, and an order's events redelivered in step kept colliding until
// one was dead-lettered: an R3 cluster lost an event from its projection
// so, after a leader was killed under load.)
func TestClusterProjectionWritersRace(t *testing.T) {
	apps := startAll(t, clusterConfigs(t))
	ctx := context.Background()
	projs := make([]*processor.Projection, 2)
	for i := range projs {
		js := embeddedtest.JetStream(t, apps[i], nats.Name(fmt.Sprint("writer ", i)))
		p, err := orderstore.NewProjection(ctx, js, apps[i].Config())
		if err != nil {
			t.Fatal(err)
		}
		projs[i] = p
	}
	const rounds = 40
	var seq atomic.Uint64
	for r := range rounds {
		start := make(chan struct{})
		errs := make([]error, len(projs))
		var wg sync.WaitGroup
		for i, p := range projs {
			ev, err := processor.EventOf("orders.paid", []byte(`{"order_id":"race"}`), nil, seq.Add(1), time.Now(), 0)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.Handle(ctx, ev)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: writer %d: %v", r+1, i, err)
			}
		}
	}
	// Every event in the record (a read is a direct get, which a replica
	// that has not applied the last write yet may answer: poll).
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		o, err := projs[0].Get(ctx, "race")
		if err != nil {
			return err
		}
		if o.Events != rounds*len(projs) {
			return fmt.Errorf("the order counts %d events, want %d: %+v", o.Events, rounds*len(projs), o)
		}
		return nil
	})
}

// Every projection feature on a 3-node R3 cluster, from every node: each
// node's projection, history, as-of and order index equal an independent
// fold of the stream. A rebuild asked at one node replaces a damaged
// record while a producer publishes at another and the stream's leader
// (a third node) is stopped half-way through the fold; a second rebuild
// asked at another node meanwhile is refused, naming the first; the
// takeover pauses the durable for every node and resumes it; afterwards
// the claim is given back.
func TestClusterRebuildAndQueriesOnEveryNode(t *testing.T) {
	cfgs := clusterConfigs(t)
	logs := make([]*testkit.LockedBuffer, len(cfgs))
	for i := range cfgs {
		logs[i] = &testkit.LockedBuffer{}
		cfgs[i].Logger = debugLogger(logs[i])
		roomyConfig(&cfgs[i])
		orderstore.SetRebuildPace(&cfgs[i], 300*time.Millisecond) // a fold slow enough to stop a node half-way
		cfgs[i].Processor.StaleAfter = map[string]time.Duration{"created": time.Hour}
	}
	apps := startAll(t, cfgs)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, apps[0])
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("cr-%d", i))
	}
	publishOrders(t, js, ids, 0, 6000)
	waitProjected(t, apps[0])
	sameOnEveryNode := func(nodes []*orderstore.Appliance, when string) {
		t.Helper()
		for _, a := range nodes {
			ajs := embeddedtest.JetStream(t, a)
			embeddedtest.WaitFor(t, time.Minute, func() error {
				if err := projectionVsFold(a, streamOracle(t, ajs, "ORDER_EVENTS")); err != nil {
					return fmt.Errorf("%s, node %s: %w", when, a.Config().Server.Name, err)
				}
				return nil
			})
			checkIndexIsTheFold(t, a, streamOracle(t, ajs, "ORDER_EVENTS"))
		}
	}
	sameOnEveryNode(apps, "before the rebuild")

	// A damaged record, as a buggy handler would leave it.
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	// (cr-11: the producer below writes only cr-0 to cr-5.)
	e, err := kv.Get(ctx, "cr-11")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["status"], rec["events"] = "wrong", 1
	damaged, _ := json.Marshal(rec)
	if _, err := kv.Put(ctx, "cr-11", damaged); err != nil {
		t.Fatal(err)
	}

	// The stream's leader is stopped half-way; the rebuild runs at
	// another node, the producer publishes at the third.
	st, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, c := range cfgs {
		if c.Server.Name == st.CachedInfo().Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("no leader among the nodes: %+v", st.CachedInfo().Cluster)
	}
	rebuilder, producer := (leader+1)%3, (leader+2)%3
	t.Cleanup(func() {
		if t.Failed() {
			// What the rebuilding node said about the rebuild, and its
			// warnings and errors.
			var lines []string
			for _, l := range strings.Split(logs[rebuilder].String(), "\n") {
				if strings.Contains(l, "rebuild") || strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
					lines = append(lines, l)
				}
			}
			t.Logf("the rebuilding node's log (rebuild, warnings, errors; the last 80 lines):\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})
	if _, err := apps[rebuilder].RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := apps[producer].RebuildProjection(ctx, status.RebuildRequest{}); !errors.Is(err, orderstore.ErrRebuildRunning) || !strings.Contains(err.Error(), cfgs[rebuilder].Server.Name) {
		t.Errorf("a second rebuild at another node: %v, want ErrRebuildRunning naming %s", err, cfgs[rebuilder].Server.Name)
	}
	pjs := embeddedtest.JetStream(t, apps[producer])
	done := make(chan struct{})
	var published sync.WaitGroup
	published.Go(func() {
		// Each event retried until acked (the same Nats-Msg-Id): the
		// stream's leader moves meanwhile.
		for i := 6000; ; i++ {
			body := fmt.Sprintf(`{"order_id":%q,"status":"late-%d"}`, ids[i%6], i)
			for {
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := pjs.Publish(c, "orders.paid", []byte(body), jetstream.WithMsgID(fmt.Sprint("late-", i)))
				cancel()
				if err == nil {
					break
				}
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if rb := apps[rebuilder].RebuildStatus(); rb == nil || rb.Done == 0 {
			return fmt.Errorf("the fold has not begun: %+v", rb)
		}
		return nil
	})
	if err := apps[leader].Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped the stream leader %s during the fold; the rebuild runs at %s", cfgs[leader].Server.Name, cfgs[rebuilder].Server.Name)
	embeddedtest.WaitFor(t, 3*time.Minute, func() error {
		rb := apps[rebuilder].RebuildStatus()
		if rb.State == status.RebuildFailed || rb.State == status.RebuildCanceled {
			t.Fatalf("rebuild %s: %s", rb.State, rb.Error)
		}
		if rb.State != status.RebuildDone {
			return fmt.Errorf("rebuild %s at %d of %d", rb.State, rb.Done, rb.Total)
		}
		return nil
	})
	close(done)
	published.Wait()
	back, err := orderstore.Start(ctx, cfgs[leader])
	if err != nil {
		t.Fatalf("restart %s: %v", cfgs[leader].Server.Name, err)
	}
	defer back.Close(ctx)
	apps[leader] = back
	waitProjected(t, apps[rebuilder])
	sameOnEveryNode(apps, "after the rebuild")

	// The durable runs again for every node, and the claim is free. (js
	// was the first node's connection, and the first node may be the
	// leader stopped above: ask the rebuilding node.)
	js = embeddedtest.JetStream(t, apps[rebuilder])
	c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.Paused || ci.Config.PauseUntil != nil {
		t.Errorf("the durable is still paused after the rebuild: paused %v until %v", ci.Paused, ci.Config.PauseUntil)
	}
	for _, line := range []string{"every node's processor paused for the projection rebuild's takeover", "every node's processor resumed after the projection rebuild's takeover"} {
		if !strings.Contains(logs[rebuilder].String(), line) {
			t.Errorf("the rebuilding node did not log %q", line)
		}
	}
	if _, err := apps[producer].RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
		t.Fatalf("a rebuild at another node after the first ended: %v", err)
	}
	embeddedtest.WaitFor(t, 3*time.Minute, func() error {
		if rb := apps[producer].RebuildStatus(); rb.State != status.RebuildDone {
			return fmt.Errorf("second rebuild %s at %d of %d", rb.State, rb.Done, rb.Total)
		}
		return nil
	})
	sameOnEveryNode(apps, "after a second rebuild at another node")
}

// What a rebuild can leave behind when its node stops at the wrong moment
// is ended when that node starts again: its claim of a rebuild that is not
// under way there is given back, and the durable's pause it recorded is
// ended; a pause no claim holds is ended by any node that starts.
func TestClusterRebuildLeftoversAreEnded(t *testing.T) {
	cfgs := clusterConfigs(t)
	for i := range cfgs {
		roomyConfig(&cfgs[i])
	}
	apps := startAll(t, cfgs)
	ctx := context.Background()
	// orderstore's own view (the durable guard refuses clients the
	// durable, and the claim is in orderstore's account).
	js := orderstore.InternalJetStream(apps[0])
	paused := func() bool {
		t.Helper()
		c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Paused
	}
	restart := func(i int) {
		t.Helper()
		if err := apps[i].Close(ctx); err != nil {
			t.Fatal(err)
		}
		a, err := orderstore.Start(ctx, cfgs[i])
		if err != nil {
			t.Fatalf("restart %s: %v", cfgs[i].Server.Name, err)
		}
		apps[i] = a
	}

	// n2's claim of a rebuild that n2 is not running, with the durable
	// paused by it (n2 stopped after its pause, and its state file went).
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS_REBUILDING", Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "claim", []byte(`{"node":"n2","id":"gone","started":"2026-12-05T00:00:00Z","paused":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.PauseConsumer(ctx, "ORDER_EVENTS", "order-processor", time.Now().AddDate(100, 0, 0)); err != nil {
		t.Fatal(err)
	}
	// Another node starting leaves n2's claim and its pause alone.
	restart(2)
	if !paused() {
		t.Fatal("n3's start ended n2's pause")
	}
	if _, err := kv.Get(ctx, "claim"); err != nil {
		t.Fatalf("n3's start removed n2's claim: %v", err)
	}
	// n2's start ends both.
	restart(1)
	if paused() {
		t.Error("n2 started again: the durable is still paused")
	}
	// The bucket's reads may be served by a replica that has not applied
	// the claim's removal yet: wait until a read finds it gone.
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if _, err := kv.Get(ctx, "claim"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("n2 started again: its claim is still there (%v)", err)
		}
		return nil
	})

	// A pause no claim holds: ended by whichever node starts.
	if _, err := js.PauseConsumer(ctx, "ORDER_EVENTS", "order-processor", time.Now().AddDate(100, 0, 0)); err != nil {
		t.Fatal(err)
	}
	restart(0)
	js = orderstore.InternalJetStream(apps[0])
	if paused() {
		t.Error("a pause no rebuild holds survived a node's start")
	}
	// And the processors run: an event published now is projected.
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"after-leftovers"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		_, err := apps[1].Order(ctx, "after-leftovers")
		return err
	})
}

// A node whose fold is new, started while another node holds the rebuild claim, records the new
// version only if the claim's rebuild runs it: in a rolling upgrade the claim may be an old node's
// (or from a release whose claim names no version), whose rebuild folds the old way, and the new
// node would then never rebuild what it says the new fold built.
func TestClusterNewVersionWhileAnotherNodeRebuilds(t *testing.T) {
	cfgs := clusterConfigs(t)
	for i := range cfgs {
		roomyConfig(&cfgs[i])
	}
	apps := startAll(t, cfgs)
	ctx := context.Background()
	js := orderstore.InternalJetStream(apps[0])
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS_REBUILDING", Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(cfgs[2].JetStream.StoreDir, "projection.json")
	for _, tc := range []struct{ claim, want string }{
		{`{"node":"n2","id":"old","started":"2026-12-05T00:00:00Z","version":"orders/0"}`, "orders/0"},
		{`{"node":"n2","id":"older","started":"2026-12-05T00:00:00Z"}`, "orders/0"},
		{`{"node":"n2","id":"new","started":"2026-12-05T00:00:00Z","version":"` + processor.ProjectionVersion + `"}`, processor.ProjectionVersion},
	} {
		if _, err := kv.Put(ctx, "claim", []byte(tc.claim)); err != nil {
			t.Fatal(err)
		}
		// n3 restarts with the new fold over a projection the old one built.
		if err := apps[2].Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(state, []byte(`{"version":"orders/0"}`), 0o640); err != nil {
			t.Fatal(err)
		}
		a, err := orderstore.Start(ctx, cfgs[2])
		if err != nil {
			t.Fatalf("restart n3: %v", err)
		}
		apps[2] = a
		// (Start returns once the version is checked.)
		if data, _ := os.ReadFile(state); !strings.Contains(string(data), `"`+tc.want+`"`) {
			t.Errorf("claim %s: projection.json %s, want version %s", tc.claim, data, tc.want)
		}
		if st := a.RebuildStatus(); st != nil && st.Running() {
			t.Fatalf("claim %s: n3 rebuilds while n2 holds the claim: %+v", tc.claim, st)
		}
	}
}

// A stock nats-server that routes to a node without the cluster's route credentials (any local
// process reaches a loopback route listener, the default) is refused: the node logs the failed
// sign-in and keeps routes to its two peers only, and the rogue holds no route.
func TestRogueRoute(t *testing.T) {
	cfgs := clusterConfigs(t)
	var logs testkit.LockedBuffer
	cfgs[0].Logger = debugLogger(&logs)
	apps := startAll(t, cfgs)
	u, err := url.Parse("nats-route://" + cfgs[0].Cluster.Listen)
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := server.NewServer(&server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "orders", Host: "127.0.0.1", Port: -1}, Routes: []*url.URL{u}})
	if err != nil {
		t.Fatal(err)
	}
	go rogue.Start()
	t.Cleanup(func() {
		rogue.Shutdown()
		rogue.WaitForShutdown()
	})
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "Router connection closed: Authentication Failure") {
			return errors.New("n1 has not refused the rogue's route yet")
		}
		return nil
	})
	var st status.Status
	getStatus(t, apps[0], &st)
	if up := st.Topology.Cluster.RoutesUp; up != 2 || rogue.NumRoutes() != 0 {
		t.Errorf("n1 has routes to %d other nodes, want 2 (its peers); the rogue has %d routes, want none\n%s", up, rogue.NumRoutes(), logs.String())
	}
}
