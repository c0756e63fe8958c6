package orderstore

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/status"
)

// checks are the readiness checks of what admin cannot see: the internal
// connections are up, no group commit sync failed or hangs, and the processor's ack floor moves.
func (a *Appliance) checks(ctx context.Context) []status.Check {
	conns := status.Check{Name: "connections", OK: true}
	for _, c := range []struct {
		name string
		c    conn
	}{{"admin", a.internal}, {"HTTP ingest", a.publisher}, {"processor", a.processor}} {
		if st := c.c.status; st != nil && nats.Status(st.Load()) != nats.CONNECTED {
			conns.OK, conns.Reason = false, strings.TrimPrefix(conns.Reason+"; ", "; ")+fmt.Sprintf("the %s's internal connection is %s", c.name, nats.Status(st.Load()))
		}
	}
	out := []status.Check{conns, a.storeGuard.Check()}
	if err := a.sup.Err(); err != nil {
		// A part that stopped takes readiness with it.
		out = append(out, status.Check{Name: "components", Reason: err.Error() +
			": the appliance stopped working; close it and start it again (orderstore run exits non-zero, so that systemd restarts it)"})
	}
	if r := a.reload.Load(); !r.Successful {
		out = append(out, status.Check{Name: "config_reload", OK: true, Reason: "warning: the last reload failed, the schemas before it stay in force: " +
			r.Error + "; fix it (orderstore check -config FILE lists every problem), then reload again (systemctl reload orderstore)"})
	}
	if a.commit != nil {
		c, hung := status.Check{Name: "durability", OK: true}, cmp.Or(a.cfg.syncHungAfter, syncHungAfter)
		if err := a.commit.Err(); err != nil {
			c.OK, c.Reason = false, err.Error()+"; restart orderstore (it exits non-zero so that systemd does)"
		} else if stream, d := a.syncInFlight(); d > hung {
			c.OK, c.Reason = false, fmt.Sprintf("group commit: a sync of stream %s under jetstream.store_dir %s has been in flight for %s (over %s): "+
				"publishes wait for their acks; the disk or NFS server under it is hung or failing: check dmesg (I/O errors, hung tasks) and the storage; "+
				"ready again once the sync returns", stream, a.report.StoreDir, duration.Format(d.Round(time.Second)), duration.Format(hung))
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
			c.OK, c.Reason = false, fmt.Sprintf("the ack floor has been stuck at %d for %s with %d events outstanding, longer than an event can take (max_deliver × (ack_wait + longest backoff) = %s): an event cannot be settled; see the log and `orderstore dlq list`",
				pr.AckFloor, time.Since(pr.StuckSince).Round(time.Second), pr.Outstanding, a.stallAfter)
		}
		out = append(out, c)
	}
	return out
}

// syncHungAfter is how long a group commit sync may be in flight before readiness fails: a
// healthy one takes milliseconds (the histogram's top bucket is 2.5 s), and 30 s is the kernel's
// default timeout of one disk command (/sys/block/*/device/timeout), after which it is retried.
const syncHungAfter = 30 * time.Second

// syncInFlight is the group commit sync in flight the longest: its stream and how long (0: none).
func (a *Appliance) syncInFlight() (string, time.Duration) {
	if srv := a.monitored.Load(); srv != nil {
		if stream, since := srv.GroupCommitSyncing(); !since.IsZero() {
			return stream, time.Since(since)
		}
	}
	return "", 0
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
