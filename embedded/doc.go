// Package embedded runs an in-process nats-server with JetStream for orderstore and for any Go
// program or test that wants a real broker without installing one.
//
// [Start] validates a [Config], starts nats-server and returns only once the server is ready for
// connections, or with an error. The server never installs signal handlers (the program that embeds
// it owns signals), logs into log/slog, binds loopback unless told otherwise, and fsyncs every
// publish before acknowledging it unless [Config.SyncInterval] says otherwise; with
// [Config.GroupCommit] one fsync covers every publish waiting for it. Clients connect over TCP to
// [Server.ClientURL], or in-process:
//
//	nc, err := nats.Connect("", nats.InProcessServer(srv))
//
// Start locks [Config.StoreDir] while the server runs: a second server on it, of this process or
// another, fails with [ErrLocked] (two servers on one store lose acknowledged publishes).
//
// This package imports only nats-server and the standard library (and, on Windows, the
// golang.org/x/sys nats-server uses), so other projects can use it without pulling in
// orderstore's configuration, metrics or CLI. Tests use package embeddedtest.
package embedded
