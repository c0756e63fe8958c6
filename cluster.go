package orderstore

import (
	"context"
	"fmt"
	"time"

	"github.com/orderstore/orderstore/internal/natsrun"
)

const (
	// clusterJoinTimeout bounds the wait for the JetStream meta leader
	// when ctx has no deadline: the other nodes may boot later.
	clusterJoinTimeout = 5 * time.Minute
	// clusterDeclareTimeout bounds declaring in a cluster, retries included.
	clusterDeclareTimeout = 3 * time.Minute
)

// waitForMetaLeader waits until the JetStream meta group has a leader and this node is current with
// it, logging every few seconds how many routes are up. Two nodes of one name are a config error.
func (a *Appliance) waitForMetaLeader(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, clusterJoinTimeout)
		defer cancel()
	}
	t0 := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	next := time.Now().Add(2 * time.Second)
	for {
		ns := a.server().NATSServer()
		if msg := a.dupName.Load(); msg != nil {
			return &ValidationError{Problems: []*FieldError{{Field: "Server.Name", Key: "server.name", Value: fmt.Sprintf("%q", a.cfg.Server.Name),
				Reason: fmt.Sprintf("another node of cluster %q has the same name (nats: %s): every node needs its own", a.cfg.Cluster.Name, *msg)}}}
		}
		if natsrun.MetaLeader(ns) != "" && ns.JetStreamIsCurrent() {
			a.admin.SetStarting("")
			a.log.Info("joined the cluster", "cluster", a.cfg.Cluster.Name, "meta_leader", natsrun.MetaLeader(ns), "took", time.Since(t0).Round(time.Millisecond).String())
			return nil
		}
		a.admin.SetStarting(fmt.Sprintf("waiting for a quorum of cluster %q (%d of %d other nodes reached): a majority of the nodes must run", a.cfg.Cluster.Name, natsrun.PeersUp(ns), a.otherNodes()))
		if time.Now().After(next) {
			next = time.Now().Add(5 * time.Second)
			a.log.Info("waiting for the JetStream meta leader", "cluster", a.cfg.Cluster.Name, "peers_up", natsrun.PeersUp(ns),
				"routes", len(a.cfg.Cluster.Routes), "waited", time.Since(t0).Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return WithHint(fmt.Errorf("cluster %q: no JetStream meta leader after %s (%d other nodes reached): %w", a.cfg.Cluster.Name,
				time.Since(t0).Round(time.Second), natsrun.PeersUp(ns), ctx.Err()),
				"a majority of the nodes must run and reach each other: check cluster.routes and that the other nodes are up (see \"waiting for the JetStream meta leader\" lines)")
		case <-tick.C:
		}
	}
}

// clusterRetry runs f once on a single node; in a cluster it retries
// while the cluster is not ready (natsrun.Retry), until ctx ends.
func (a *Appliance) clusterRetry(ctx context.Context, what string, f func(context.Context) error) error {
	if !a.cfg.Cluster.Enabled() {
		return f(ctx)
	}
	return natsrun.Retry(ctx, a.log, a.cfg.Cluster.Name, what, f)
}
