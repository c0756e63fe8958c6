package orderstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/natsserver/server"
)

const (
	// clusterJoinTimeout bounds the wait for the JetStream meta leader
	// when ctx has no deadline: the other nodes may boot later.
	clusterJoinTimeout = 5 * time.Minute
	// clusterDeclareTimeout bounds declaring in a cluster, retries
	// included; each attempt has declareAttemptTimeout.
	clusterDeclareTimeout = 3 * time.Minute
	declareAttemptTimeout = 4 * time.Second
)

// waitForMetaLeader waits until the JetStream meta group has a leader and
// this node is current with it, logging every few seconds how many routes
// are up. A node whose name another node has is a config error.
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
		if metaLeader(ns) != "" && ns.JetStreamIsCurrent() {
			a.admin.SetStarting("")
			a.log.Info("joined the cluster", "cluster", a.cfg.Cluster.Name, "meta_leader", metaLeader(ns), "took", time.Since(t0).Round(time.Millisecond).String())
			return nil
		}
		others := 0
		for _, r := range a.cfg.Cluster.Routes {
			if !ownRoute(r, a.cfg.Cluster.Listen) {
				others++
			}
		}
		a.admin.SetStarting(fmt.Sprintf("waiting for a quorum of cluster %q (%d of %d other nodes reached): a majority of the nodes must run", a.cfg.Cluster.Name, peersUp(ns), others))
		if time.Now().After(next) {
			next = time.Now().Add(5 * time.Second)
			a.log.Info("waiting for the JetStream meta leader", "cluster", a.cfg.Cluster.Name, "peers_up", peersUp(ns),
				"routes", len(a.cfg.Cluster.Routes), "waited", time.Since(t0).Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return withHint(fmt.Errorf("cluster %q: no JetStream meta leader after %s (%d other nodes reached): %w", a.cfg.Cluster.Name,
				time.Since(t0).Round(time.Second), peersUp(ns), ctx.Err()),
				"a majority of the nodes must run and reach each other: check cluster.routes and that the other nodes are up (see \"waiting for the JetStream meta leader\" lines)")
		case <-tick.C:
		}
	}
}

// metaLeader is the JetStream meta group's leader ("" while none).
func metaLeader(ns *server.Server) string {
	jsz, err := ns.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// clusterRetry runs f (declaring, the recovery check) once on a single
// node. In a cluster it retries what a cluster answers while its peers
// boot or elect leaders (no reply, "cluster not available", "no suitable
// peers", "insufficient resources"), each attempt with its own timeout,
// until ctx ends; drift and other errors return at once. Several nodes
// declaring the same objects at once converge: the server compares the
// configurations.
func (a *Appliance) clusterRetry(ctx context.Context, what string, f func(context.Context) error) error {
	if !a.cfg.Cluster.Enabled() {
		return f(ctx)
	}
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, declareAttemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || !retryableInCluster(err) {
			return err
		}
		a.log.Info(what+": the cluster is not ready yet, retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s in cluster %q: gave up after %d attempts: %w", what, a.cfg.Cluster.Name, attempt, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func retryableInCluster(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10008, // cluster not available
			10005, // no suitable peers
			10023, // insufficient resources
			10074, // replicas > 1 not supported in non-clustered mode (not yet clustered)
			10059, // stream not found: another node's create of the same stream is in flight
			10014: // consumer not found: likewise
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{"timeout", "no responders", "not available", "no suitable peers", "insufficient resources", "leader"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// peersUp counts the other nodes this node has a route to (nats keeps a
// pool of several route connections per peer).
func peersUp(ns *server.Server) int {
	rz, err := ns.Routez(&server.RoutezOptions{})
	if err != nil {
		return 0
	}
	seen := map[string]bool{}
	for _, r := range rz.Routes {
		seen[r.RemoteID] = true
	}
	return len(seen)
}
