package orderstore

import (
	"context"

	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/storedir"
)

// What start-up does about a damaged store is internal/recovery's (see
// docs/reliability.md); the appliance runs its check (declare,
// checkStore) and keeps its notes.

// syncMetadata makes what start-up declared durable with group commit: nats
// syncs the metadata files it writes, not the directories it makes for a
// new stream, bucket or consumer. A no-op in the other modes.
func (a *Appliance) syncMetadata(context.Context) error {
	if a.commit == nil {
		return nil
	}
	return durable.SyncTree(storedir.Dir(a.report.StoreDir).JetStream())
}
