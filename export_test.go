package orderstore

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/natsconf"
)

// HoldAdmission makes app's admission treat the stream's inbound queue as
// deep while wait > 0: every producer's publish then waits its turn in line
// and, after wait, is answered 429. 0 ends the hold.
func HoldAdmission(app *Appliance, wait time.Duration) { app.admit.Hold(wait) }

// AdmissionWaiting is how many publishes wait in admission's line now.
func AdmissionWaiting(app *Appliance) int64 { return app.admit.Counts().Waiting }

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

// OwnConnectionOptions sign a connection in as orderstore's own, in the
// stream's account: BenchmarkPublishLayout prices the account layout with
// them.
func OwnConnectionOptions(app *Appliance) []nats.Option {
	return app.id.Options(natsconf.InternalInbox) // its publishes ask for acks there
}

// HoldBackup makes app behave as if a backup were running until the
// returned func is called.
func HoldBackup(app *Appliance) (release func()) {
	app.backupMu.Lock()
	return app.backupMu.Unlock
}

// BackupStaging names the directories under store_dir a backup through
// the admin API is staged in.
const BackupStaging = backupStaging

// Stopping reports whether app's Close began.
func Stopping(app *Appliance) bool { return app.sup.stopping() }

// SetSyncHungAfter makes /readyz fail once a group commit sync has been in
// flight longer than d, instead of 30 s.
func SetSyncHungAfter(c *Config, d time.Duration) { c.syncHungAfter = d }
