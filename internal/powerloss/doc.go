// Package powerloss holds the appliance's power-loss tests (issue 9); it
// has no code of its own: the tests and the FUSE file system they cut the
// power under (powerfs, the files powerfs_*_test.go) are test code.
//
// # Overview
//
// Each test runs the appliance as a child process (the test binary run
// again with ORDERSTORE_POWERLOSS_STORE set) on a powerfs mount, either
// directly or inside ext4 on a loop device whose image lives on the mount.
// Publishers in the test record every acknowledged event; at a random
// moment the child is stopped, the power is cut and the child is killed;
// the file system comes back with only what was made durable, the
// appliance starts again on the same store, and the test checks what it
// recovered:
//
//   - durability "group-commit" (nats-server's patched file store acks
//     after one fdatasync of the blocks written since its last round) and
//     "always" (nats fsyncs every event): every acknowledged event is in
//     the stream, byte for byte, and once the processor caught up the
//     projection (the ORDERS bucket) equals the fold of the stream;
//   - durability "interval" with sync_interval "1s": every lost event was
//     acknowledged within the documented window before the cut, and the
//     appliance starts.
//
// A start that the recovery check refuses in relaxed mode (the durable's
// ack floor ahead of the stream, nats-server#5412) is reported, its hint's
// remedy applied (remove the consumer) and the appliance started again.
// What is not part of the relaxed contract is reported, not failed: the
// projection differing from the fold.
//
// TestPowerLossDuringRebuild does the same (FUSE, every mode) with a
// projection rebuild under way: a rebuild is started over the admin API
// while producers publish, the power is cut while it folds, takes over or
// has just ended, and after the restart the same rebuild must finish by
// itself before the same checks run.
//
// go test runs 3 cuts per variant and mode (about a minute with -race,
// and another for TestPowerLossDuringRebuild).
// The long run:
//
//	go test ./internal/powerloss -timeout 60m -v -powerloss.cuts=50
//
// -powerloss.seed repeats a run's random choices; -powerloss.strict uses
// the strict POSIX namespace model.
package powerloss
