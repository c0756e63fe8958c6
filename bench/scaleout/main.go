// Command scaleout measures orderstore beyond one host with in-process appliances on loopback: a
// 3-node R3 cluster against one node, leader loss, an edge's backlog drained to its hub, backup and
// restore (docs/topologies.md holds the figures).
//
//	go run ./bench/scaleout -pub 20000 -backlog 100000 -backup-events 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

var (
	dir          = flag.String("dir", "", "directory for the stores (default: a temporary one)")
	pubN         = flag.Int("pub", 20000, "acked publishes per publish run")
	conc         = flag.Int("conc", 64, "concurrent publishers (acked publishes in flight)")
	backlog      = flag.Int("backlog", 100000, "events published at the edge while the hub is down")
	backupEvents = flag.Int("backup-events", 1000000, "events in the store that is backed up and restored")
	only         = flag.String("only", "", "run one part: cluster, leaf, backup")
)

func main() {
	flag.Parse()
	defer benchkit.TempDir(dir, "scaleout-")()
	fmt.Printf("orderstore scale-out figures (nats-server %s), stores in %s\n", orderstore.NATSServerVersion, *dir)
	if *only == "" || *only == "cluster" {
		cluster()
	}
	if *only == "" || *only == "leaf" {
		leaf()
	}
	if *only == "" || *only == "backup" {
		backup()
	}
}

func base(name string) orderstore.Config {
	c := benchkit.Config(filepath.Join(*dir, name))
	c.Server.Name = name
	c.JetStream.MaxFileStore, c.JetStream.DiskHeadroom, c.JetStream.AllowLowDisk = 20<<30, 16<<20, true
	c.Stream.MaxBytes = 16 << 30
	return c
}

func start(cfgs ...orderstore.Config) []*orderstore.Appliance {
	apps := make([]*orderstore.Appliance, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			a, err := benchkit.Start(context.Background(), c)
			if err != nil {
				log.Fatalf("start %s: %v", c.Server.Name, err)
			}
			apps[i] = a
		})
	}
	wg.Wait()
	return apps
}

func closeAll(apps ...*orderstore.Appliance) {
	for _, a := range apps {
		if a != nil {
			benchkit.Stop(a)
		}
	}
}

// publishRate makes n acked async publishes, conc in flight, and returns the rate.
func publishRate(js jetstream.JetStream, n int) float64 {
	t0 := time.Now()
	sem := make(chan struct{}, *conc)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := js.Publish(context.Background(), "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i%1000)); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		log.Printf("%d publishes failed", failed.Load())
	}
	return float64(n) / time.Since(t0).Seconds()
}

func connect(a *orderstore.Appliance) (*nats.Conn, jetstream.JetStream) {
	nc, err := nats.Connect("", nats.InProcessServer(a))
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	return nc, js
}

func cluster() {
	single := start(base("single"))
	nc, js := connect(single[0])
	r1 := publishRate(js, *pubN)
	nc.Close()
	closeAll(single...)

	ps := benchkit.FreePorts(3)
	var routes []string
	for _, p := range ps {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var cfgs []orderstore.Config
	for i, p := range ps {
		c := base(fmt.Sprintf("n%d", i+1))
		c.Cluster = orderstore.ClusterConfig{Name: "orders", Listen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes, User: "route", Password: "route-secret-1"}
		c.Stream.Replicas = 3
		cfgs = append(cfgs, c)
	}
	apps := start(cfgs...)
	defer closeAll(apps...)
	cnc, err := nats.Connect(apps[0].ClientURL()+","+apps[1].ClientURL()+","+apps[2].ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer cnc.Close()
	cjs, _ := jetstream.New(cnc)
	r3 := publishRate(cjs, *pubN)
	fmt.Printf("acked publishes/s (%d events, %d in flight, sync always): single node %.0f, 3-node R3 %.0f, ratio %.2f\n", *pubN, *conc, r1, r3, r3/r1)

	// Leader loss: close the stream leader's appliance and publish until a publish is accepted.
	st, err := cjs.Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		log.Fatal(err)
	}
	leader := st.CachedInfo().Cluster.Leader
	i := slices.IndexFunc(cfgs, func(c orderstore.Config) bool { return c.Server.Name == leader })
	victim := apps[i]
	apps[i] = nil
	t0 := time.Now()
	go victim.Close(context.Background())
	benchkit.Poll(context.Background(), 20*time.Millisecond, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := cjs.Publish(ctx, "orders.created", []byte(`{"order_id":"after-loss"}`))
		return err == nil, nil
	})
	fmt.Printf("stream leader %s lost: first accepted publish after %s\n", leader, time.Since(t0).Round(time.Millisecond))
}

func leaf() {
	lp := benchkit.FreePorts(1)[0]
	ec := base("edge-1")
	ec.JetStream.Domain = "edge-1"
	ec.LeafNode.Remotes = []orderstore.LeafRemote{{URL: fmt.Sprintf("nats-leaf://127.0.0.1:%d", lp), User: "edge", Password: "bench-leaf-secret"}}
	ec.LeafNode.ReconnectInterval = 250 * time.Millisecond
	ec.JetStream.SyncInterval = time.Second // only to fill the backlog quickly; the drain is the figure
	edge := start(ec)[0]
	defer edge.Close(context.Background())
	nc, js := connect(edge)
	defer nc.Close()
	publishRate(js, *backlog)

	hc := base("hub")
	hc.JetStream.Domain = "hub"
	hc.LeafNode.Listen = fmt.Sprintf("127.0.0.1:%d", lp)
	hc.LeafNode.User, hc.LeafNode.Password = "edge", "bench-leaf-secret"
	hc.Hub = orderstore.HubConfig{Stream: "ORDER_EVENTS_ALL", Edges: []string{"edge-1"}}
	hc.Processor.Enabled = false // the drain alone
	hc.JetStream.MaxFileStore = 40 << 30
	t0 := time.Now()
	hub := start(hc)[0]
	hnc, hjs := connect(hub)
	var first time.Duration
	benchkit.Poll(context.Background(), 50*time.Millisecond, func() (bool, error) {
		n := aggregated(hjs)
		if n > 0 && first == 0 {
			first = time.Since(t0)
		}
		return n >= uint64(*backlog), nil
	})
	fmt.Printf("edge backlog of %d events: hub started, first event forwarded after %s, all drained after %s\n",
		*backlog, first.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	hnc.Close()

	// Link loss and restore: stop the hub, publish at the edge, start it
	// again, time the first forwarded event.
	hub.Close(context.Background())
	publishRate(js, 100)
	t0 = time.Now()
	hub = start(hc)[0]
	defer hub.Close(context.Background())
	_, hjs = connect(hub)
	benchkit.Poll(context.Background(), 20*time.Millisecond, func() (bool, error) { return aggregated(hjs) > uint64(*backlog), nil })
	fmt.Printf("link restored (hub restarted): first new event forwarded after %s\n", time.Since(t0).Round(time.Millisecond))
}

// aggregated is how many events the hub's aggregate stream holds (0 when it cannot tell).
func aggregated(js jetstream.JetStream) uint64 {
	st, err := js.Stream(context.Background(), "ORDER_EVENTS_ALL")
	if err != nil {
		return 0
	}
	return st.CachedInfo().State.Msgs
}

func backup() {
	c := base("backup-src")
	c.Processor.Enabled = false
	c.JetStream.SyncInterval = time.Second // only to fill the store quickly; backup and restore are the figures
	app := start(c)[0]
	nc, js := connect(app)
	publishRate(js, *backupEvents)
	nc.Close()
	bdir := filepath.Join(*dir, "backup")
	t0 := time.Now()
	m, err := app.Backup(context.Background(), bdir, nil)
	if err != nil {
		log.Fatal(err)
	}
	took := time.Since(t0)
	app.Close(context.Background())
	var bytes uint64
	for _, s := range m.Streams {
		bytes += s.Bytes
	}
	rc := base("backup-dst")
	t0 = time.Now()
	if _, err := orderstore.Restore(context.Background(), rc, bdir, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("backup of %d events (%d MiB stored): %s; restore: %s\n", *backupEvents, bytes>>20, took.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
