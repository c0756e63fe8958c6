package natsrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/natsserver/server"
)

// attemptTimeout bounds one attempt of what Retry retries.
const attemptTimeout = 4 * time.Second

// Retry runs f until it succeeds, fails with what a cluster does not answer while its peers boot or
// elect leaders (no reply, "cluster not available", "no suitable peers", "insufficient resources":
// see Retryable), or ctx ends. Each attempt has its own timeout; drift and other errors return at
// once. Nodes declaring the same objects at once converge: the server compares configurations.
func Retry(ctx context.Context, log *slog.Logger, cluster, what string, f func(context.Context) error) error {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || !Retryable(err) {
			return err
		}
		log.Info(what+": the cluster is not ready yet, retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s in cluster %q: gave up after %d attempts: %w", what, cluster, attempt, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// Retryable reports whether err is what a cluster answers while its peers boot or elect leaders.
func Retryable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) {
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
	return slices.ContainsFunc([]string{"timeout", "no responders", "not available", "no suitable peers", "insufficient resources", "leader"},
		func(s string) bool { return strings.Contains(msg, s) })
}

// MetaLeader is the JetStream meta group's leader ("" while none).
func MetaLeader(ns *server.Server) string {
	jsz, err := ns.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return ""
	}
	return jsz.Meta.Leader
}

// PeersUp counts the other nodes this node has a route to (nats keeps a
// pool of several route connections per peer).
func PeersUp(ns *server.Server) int {
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
