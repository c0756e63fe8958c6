// Package powerloss holds the appliance's power-loss tests (issue 9); it has no code of its own:
// the tests and the FUSE file system they cut the power under (powerfs, the files
// powerfs_*_test.go) are test code. docs/reliability.md says how the harness cuts the power and
// what each durability mode must recover; CONTRIBUTING.md lists the flags (-powerloss.cuts,
// -powerloss.seed, -powerloss.strict, ...).
//
// Each test runs the appliance as a child process (the test binary run again with
// ORDERSTORE_POWERLOSS_STORE set) on a powerfs mount, either directly or inside ext4 on a loop
// device whose image lives on the mount. After every cut the appliance must start by itself and its
// projection be the fold of what the stream holds; in the relaxed mode an order's history index
// that differs from the stream is reported, not failed.
package powerloss
