package orderstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/natsserver/server"
)

// PauseIngest pauses the publishes of user's account ("": the anonymous
// one) as the ingest service does under a flood, or ends the pause.
func PauseIngest(app *Appliance, user string, paused bool) error {
	acct := app.cfg.natsInput().AccountOf(user)
	if acct == "" {
		return fmt.Errorf("no user %q", user)
	}
	return app.pauseIngest(acct, paused)
}

// SetRebuildPace makes a projection rebuild fold 1,000 events per step
// and pause d after each: slow enough to stop it half-way.
func SetRebuildPace(c *Config, d time.Duration) { c.rebuildPace = d }

// FailSyncs makes every group-commit sync of app fail with err from now
// on, as a disk that reports a write-back error would.
func FailSyncs(app *Appliance, err error) {
	app.nats.Current().NATSServer().InjectGroupCommitFault(err)
}

// InternalJetStream is orderstore's own JetStream connection of app: the
// one principal that may touch the processor's durable (tests make a part
// fail with it).
func InternalJetStream(app *Appliance) jetstream.JetStream { return app.js }

// IngestQueued is what app's ingest service has yet to take: publishes
// waiting in its subscriptions, and bytes nats holds for its connection.
// With both 0 and nothing in flight (status ingest.waiting), no answer to
// an earlier publish is still on its way through the service.
func IngestQueued(app *Appliance) (queued, natsPending int) {
	queued = app.ing.Queued()
	if srv := app.monitored.Load(); srv != nil {
		if cz, err := srv.Connz(&server.ConnzOptions{Limit: 10000}); err == nil {
			for _, c := range cz.Conns {
				if strings.HasPrefix(c.Name, ingestConnPrefix) {
					natsPending += c.Pending
				}
			}
		}
	}
	return queued, natsPending
}
