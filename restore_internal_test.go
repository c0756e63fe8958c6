package orderstore

import (
	"testing"
	"time"

	"github.com/orderstore/orderstore/internal/natsconf"
)

// A restore runs nats with relaxed syncing whatever the config's
// durability: with durability "always" nats fsynced each restored event
// (strace: 20,228 fsyncs for 20,000 events, against 121 in the default
// mode), and on a disk whose fsync takes milliseconds nats gives up on
// the restore (a chunk taking 5 s).
func TestRestoreSyncsRelaxed(t *testing.T) {
	id, err := natsconf.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"", DurabilityGroupCommit, DurabilityAlways, DurabilityInterval} {
		cfg := DefaultConfig()
		cfg.JetStream.StoreDir, cfg.JetStream.Durability = t.TempDir(), mode
		if mode == DurabilityInterval {
			cfg.JetStream.SyncInterval = 10 * time.Millisecond
		}
		ec, err := cfg.restoreConfig().embeddedConfig(loggerOrDiscard(nil), id)
		if err != nil {
			t.Fatal(err)
		}
		if ec.SyncInterval < time.Minute || ec.GroupCommit {
			t.Errorf("durability %q: the restore's nats syncs every %s (0: before every write), group commit %v; want relaxed syncing", mode, ec.SyncInterval, ec.GroupCommit)
		}
	}
}
