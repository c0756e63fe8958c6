// Package bootstrap prepares a store for orderstore and checks it. Before nats-server starts,
// [Preflight] checks the store directory (created if missing, a probe file written and fsynced) and
// the free disk, and takes the store's exclusive [Lock]. Once the server runs, [Declare] creates or
// updates the streams, the projection bucket and the durable consumer that a [Spec] describes
// (orderstore.Config.DeclareSpec builds it), refusing a destructive change with a [DriftError], and
// [Verify], the recovery check, finds a consumer ahead of a stream that lost events. [CheckStored]
// finds Declare's drift in a stopped store's files (for `orderstore check`). A failure's Hint,
// where it has one, tells an operator what to do.
package bootstrap
