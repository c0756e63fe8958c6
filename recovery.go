package orderstore

import (
	"context"
	"os"

	"github.com/orderstore/orderstore/internal/storedir"
)

// What start-up does about a damaged store is internal/recovery's (see
// docs/reliability.md); the appliance runs its check (declare,
// checkStore) and keeps its notes.

// markRunning records whether the last run stopped cleanly and marks this
// one as running (storedir's run marker).
func (a *Appliance) markRunning() (err error) {
	a.unclean, err = storedir.Dir(a.report.StoreDir).MarkRunning(os.Getpid())
	return err
}

// syncMetadata makes a stream or consumer change durable with group commit
// (nats rewrites meta.inf and o.dat without fsync when it does not sync
// every write); a no-op in the other modes.
func (a *Appliance) syncMetadata(ctx context.Context) error {
	if a.commit == nil {
		return nil
	}
	return a.commit.SyncAll(ctx)
}
