// Package powerloss holds the appliance's power-loss tests (issue 9); it
// has no code of its own: the tests and the FUSE file system they cut the
// power under (powerfs, the files powerfs_*_test.go) are test code.
// docs/reliability.md says how the harness cuts the power and what each
// durability mode must recover; CONTRIBUTING.md lists the flags
// (-powerloss.cuts, -powerloss.seed, -powerloss.strict, ...).
//
// Each test runs the appliance as a child process (the test binary run
// again with ORDERSTORE_POWERLOSS_STORE set) on a powerfs mount, either
// directly or inside ext4 on a loop device whose image lives on the mount.
// A start that the recovery check refuses in relaxed mode (the durable's
// ack floor ahead of the stream, nats-server#5412) is reported, its hint's
// remedy applied (remove the consumer) and the appliance started again.
// What is not part of the relaxed contract is reported, not failed: the
// projection differing from the fold.
package powerloss
