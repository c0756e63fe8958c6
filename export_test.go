package orderstore

import "github.com/nats-io/nats.go/jetstream"

// FailSyncs makes every group-commit sync of app fail with err from now
// on, as a disk that reports a write-back error would.
func FailSyncs(app *Appliance, err error) { app.commit.InjectFault(err) }

// InternalJetStream is orderstore's own JetStream connection of app: the
// one principal that may touch the processor's durable (tests make a part
// fail with it).
func InternalJetStream(app *Appliance) jetstream.JetStream { return app.js }
