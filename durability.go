package orderstore

import (
	"fmt"
	"time"

	"github.com/orderstore/orderstore/internal/duration"
)

// Durability modes of [JetStreamConfig.Durability].
const (
	DurabilityGroupCommit = "group-commit"
	DurabilityAlways      = "always"
	DurabilityInterval    = "interval"
)

// DurabilityMode is the durability in force: JetStream.Durability, or, when that is "", "interval"
// with a SyncInterval, else "group-commit" on a single node and "always" in a cluster.
func (c Config) DurabilityMode() string {
	switch {
	case c.JetStream.Durability != "":
		return c.JetStream.Durability
	case c.JetStream.SyncInterval > 0:
		return DurabilityInterval
	case c.Cluster.Enabled():
		return DurabilityAlways
	}
	return DurabilityGroupCommit
}

// natsSyncInterval is the embedded server's sync_interval: 0 (always) for
// "always", the interval for "interval", and nats' own default (2 min) for
// group commit, where orderstore's syncs make events durable.
func (c Config) natsSyncInterval() time.Duration {
	switch c.DurabilityMode() {
	case DurabilityInterval:
		return c.JetStream.SyncInterval
	case DurabilityGroupCommit:
		return 2 * time.Minute
	}
	return 0
}

// DurabilityPolicy returns the durability mode ("group-commit", "always" or "interval 1s") and its
// one-line meaning, as the startup log, /readyz and `orderstore status` state it.
func (c Config) DurabilityPolicy() (mode, description string) {
	switch c.DurabilityMode() {
	case DurabilityGroupCommit:
		return DurabilityGroupCommit, "acked once one sync of the store made the event durable (group commit): an acknowledged event survives power loss"
	case DurabilityAlways:
		return DurabilityAlways, "fsync before every ack: an acknowledged event survives power loss"
	}
	d := duration.Format(c.JetStream.SyncInterval)
	return DurabilityInterval + " " + d, fmt.Sprintf("fsync every %s: a process crash loses nothing, power loss can lose up to %s of acknowledged events", d, d)
}
