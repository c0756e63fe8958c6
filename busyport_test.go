package orderstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/orderstoretest"
)

// A busy leaf or route port is reported with the hint for its own key,
// not server.port's.
func TestBusyListenerHintNamesItsKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		set func(c *orderstore.Config, addr string)
	}{
		{"leafnode.listen", func(c *orderstore.Config, addr string) {
			c.LeafNode.Listen, c.LeafNode.User, c.LeafNode.Password = addr, "edge", "leaf-secret-1"
		}},
		{"cluster.listen", func(c *orderstore.Config, addr string) {
			c.Server.Name = "n1"
			c.Cluster = orderstore.ClusterConfig{Name: "c", Listen: addr, Routes: []string{"nats-route://" + addr}, User: "route", Password: "route-secret-1"}
			c.Stream.Replicas = 1
		}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cfg := orderstoretest.Config(t)
			tc.set(&cfg, l.Addr().String())
			app, err := orderstore.Start(context.Background(), cfg)
			if err == nil {
				app.Close(context.Background())
				t.Fatalf("Start on a busy %s succeeded", tc.key)
			}
			var h orderstore.Hinted
			if !errors.As(err, &h) || !strings.Contains(h.Hint(), tc.key) || strings.Contains(h.Hint(), "server.port") {
				t.Errorf("Start on a busy %s = %v, hint %q: want the hint to name %s", tc.key, err, hintOf(err), tc.key)
			}
		})
	}
}

func hintOf(err error) string {
	var h orderstore.Hinted
	if errors.As(err, &h) {
		return h.Hint()
	}
	return fmt.Sprint(nil)
}
