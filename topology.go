package orderstore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/internal/natsrun"
	"github.com/orderstore/orderstore/natsserver/server"

	"github.com/orderstore/orderstore/status"
)

// topology is /v1/status's topology: nil on a lone node without leaf links.
func (a *Appliance) topology(ctx context.Context) *status.Topology {
	cfg := a.cfg
	if !cfg.Cluster.Enabled() && cfg.LeafNode.Listen == "" && len(cfg.LeafNode.Remotes) == 0 && !cfg.Hub.Enabled() {
		return nil
	}
	ns := a.server().NATSServer()
	t := &status.Topology{Node: cfg.Server.Name, Domain: cfg.JetStream.Domain}
	if cfg.Cluster.Enabled() {
		t.Cluster = a.clusterStatus(ctx, ns)
	}
	lz, err := ns.Leafz(&server.LeafzOptions{})
	if err == nil {
		for _, l := range lz.Leafs {
			t.Leafnodes = append(t.Leafnodes, status.LeafStatus{Remote: l.Name, Connected: true, Account: l.Account, RTT: l.RTT})
		}
	}
	if len(cfg.LeafNode.Remotes) > 0 && (err != nil || len(lz.Leafs) == 0) { // an edge's remotes that are down
		for _, r := range cfg.LeafNode.Remotes {
			t.Leafnodes = append(t.Leafnodes, status.LeafStatus{Remote: redactURL(r.URL), Connected: false})
		}
	}
	if a.hub != nil {
		t.Sources = a.hub.Sources()
	}
	return t
}

func (a *Appliance) clusterStatus(ctx context.Context, ns *server.Server) *status.ClusterStatus {
	cs := &status.ClusterStatus{Name: a.cfg.Cluster.Name, RoutesUp: natsrun.PeersUp(ns), OtherNodes: a.otherNodes()}
	for _, r := range a.cfg.Cluster.Routes {
		cs.Routes = append(cs.Routes, redactURL(r))
	}
	if jsz, err := ns.Jsz(&server.JSzOptions{}); err == nil && jsz.Meta != nil {
		cs.MetaLeader = jsz.Meta.Leader
		for _, p := range jsz.Meta.Replicas {
			cs.Peers = append(cs.Peers, p.Name)
		}
	}
	group := func(name string, ci *jetstream.ClusterInfo) *status.ReplicaGroup {
		if ci == nil {
			return nil
		}
		g := &status.ReplicaGroup{Name: name, Leader: ci.Leader}
		for _, r := range ci.Replicas {
			g.Replicas = append(g.Replicas, status.Replica{Name: r.Name, Current: r.Current, Offline: r.Offline, Lag: r.Lag, ActiveSeconds: r.Active.Seconds()})
		}
		return g
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if st, err := a.js.Stream(qctx, a.cfg.Stream.Name); err == nil {
		cs.Stream = group(a.cfg.Stream.Name, st.CachedInfo().Cluster)
	}
	if a.proc != nil {
		if c, err := a.js.Consumer(qctx, a.spec.ConsumerStream(), a.cfg.Processor.Durable); err == nil {
			cs.Consumer = group(a.cfg.Processor.Durable, c.CachedInfo().Cluster)
		}
	}
	cs.Quorum = cs.MetaLeader != "" && cs.Stream != nil && cs.Stream.Leader != "" && (a.proc == nil || cs.Consumer != nil && cs.Consumer.Leader != "")
	return cs
}

// clusterCheck is /readyz's "cluster" check: the meta group, stream and consumer have leaders.
func (a *Appliance) clusterCheck(ctx context.Context) status.Check {
	cs := a.clusterStatus(ctx, a.server().NATSServer())
	c := status.Check{Name: "cluster", OK: cs.Quorum}
	if !cs.Quorum {
		var missing []string
		if cs.MetaLeader == "" {
			missing = append(missing, "the JetStream meta group")
		}
		if cs.Stream == nil || cs.Stream.Leader == "" {
			missing = append(missing, fmt.Sprintf("stream %q", a.cfg.Stream.Name))
		}
		if a.proc != nil && (cs.Consumer == nil || cs.Consumer.Leader == "") {
			missing = append(missing, fmt.Sprintf("consumer %q", a.cfg.Processor.Durable))
		}
		c.Reason = fmt.Sprintf("no quorum in cluster %q: waiting for a quorum (%d of %d other nodes reached); no leader for %s: publishes wait up to 3.5s, then get a 503",
			a.cfg.Cluster.Name, cs.RoutesUp, cs.OtherNodes, strings.Join(missing, ", "))
	}
	return c
}

// otherNodes is how many of cluster.routes lead to other nodes.
func (a *Appliance) otherNodes() (n int) {
	for _, r := range a.cfg.Cluster.Routes {
		if !ownRoute(r, a.cfg.Cluster.Listen) {
			n++
		}
	}
	return n
}

// ownRoute reports whether route leads to this node's own route listener (listen, host:port).
func ownRoute(route, listen string) bool {
	u, uerr := url.Parse(route)
	host, port, err := net.SplitHostPort(listen)
	if uerr != nil || err != nil || u.Port() != port {
		return false
	}
	rh := u.Hostname()
	return rh == host || host == "" || host == "0.0.0.0" || host == "::" || isLoopback(rh) && isLoopback(host)
}

// redactURL drops a URL's password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User(u.User.Username())
	return u.String()
}
