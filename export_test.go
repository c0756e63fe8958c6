package orderstore

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SetRebuildPace makes a projection rebuild fold 1,000 events per step
// and pause d after each: slow enough to stop it half-way.
func SetRebuildPace(c *Config, d time.Duration) { c.rebuildPace = d }

// FailSyncs makes every group-commit sync of app fail with err from now
// on, as a disk that reports a write-back error would.
func FailSyncs(app *Appliance, err error) { app.commit.InjectFault(err) }

// InternalJetStream is orderstore's own JetStream connection of app: the
// one principal that may touch the processor's durable (tests make a part
// fail with it).
func InternalJetStream(app *Appliance) jetstream.JetStream { return app.js }
