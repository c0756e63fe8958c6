package orderstore_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// freePorts returns n ports free right now on loopback.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// clusterConfigs are three nodes' configurations of one R3 cluster on
// loopback.
func clusterConfigs(t testing.TB) []orderstore.Config {
	ports := freePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var cfgs []orderstore.Config
	for i, p := range ports {
		c := orderstoretest.Config(t)
		c.Server.Name = fmt.Sprintf("n%d", i+1)
		c.Cluster = orderstore.ClusterConfig{Name: "orders", Listen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes}
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
	apps := startAll(t, clusterConfigs(t))
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
}
