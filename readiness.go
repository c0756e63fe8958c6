package orderstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/orderstore/orderstore/status"
)

// checks are the readiness checks of what admin cannot see: both internal
// connections are up, and the processor's ack floor moves.
func (a *Appliance) checks(ctx context.Context) []status.Check {
	conns := status.Check{Name: "connections", OK: true}
	for _, c := range []struct {
		name string
		nc   *nats.Conn
	}{{"admin", a.internal.Conn}, {"processor", a.processor.Conn}} {
		if c.nc != nil && !c.nc.IsConnected() {
			conns.OK = false
			conns.Reason = strings.TrimPrefix(conns.Reason+"; ", "; ") + fmt.Sprintf("the %s's internal connection is %s", c.name, c.nc.Status())
		}
	}
	out := []status.Check{conns, a.storeGuard.Check()}
	if err := a.sup.Err(); err != nil {
		// A part that stopped takes readiness with it.
		out = append(out, status.Check{Name: "components", Reason: err.Error() +
			": the appliance stopped working; close it and start it again (orderstore run exits non-zero, so that systemd restarts it)"})
	}
	if a.commit != nil {
		c := status.Check{Name: "durability", OK: true}
		if err := a.commit.Err(); err != nil {
			c.OK, c.Reason = false, err.Error()+"; restart orderstore (it exits non-zero so that systemd does)"
		}
		out = append(out, c)
	}
	if a.cfg.Cluster.Enabled() {
		out = append(out, a.clusterCheck(ctx))
	}
	if a.proc != nil {
		pr := a.proc.Progress()
		c := status.Check{Name: "progress", OK: true}
		if a.pause.Paused() {
			c.Reason = "paused while a projection rebuild takes over"
		} else if !pr.StuckSince.IsZero() && time.Since(pr.StuckSince) > a.stallAfter {
			c.OK = false
			c.Reason = fmt.Sprintf("the ack floor has been stuck at %d for %s with %d events outstanding, longer than an event can take (max_deliver × (ack_wait + longest backoff) = %s): an event cannot be settled; see the log and `orderstore dlq list`",
				pr.AckFloor, time.Since(pr.StuckSince).Round(time.Second), pr.Outstanding, a.stallAfter)
		}
		out = append(out, c)
	}
	return out
}

// guardStats is what admission and the durable guard refused or held back.
func (a *Appliance) guardStats() *status.GuardStats {
	g := &status.GuardStats{}
	if ad := a.admit; ad != nil {
		c := ad.Counts()
		g.Refused, g.HeldBack, g.Overloaded = c.Refused, c.Held, c.Overloaded
	}
	if a.durableGuard != nil {
		g.ForeignConsumerRequests = a.durableGuard.Refused()
	}
	return g
}
