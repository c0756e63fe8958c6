// Package embedded runs an in-process nats-server with JetStream for
// orderstore and for any Go program or test that wants a real broker
// without installing one.
//
// # Overview
//
// [Start] validates a [Config], starts nats-server and returns only once the
// server is ready for connections, or with an error. A fatal error during
// start-up (client port in use, unusable store directory) is returned as
// soon as nats-server reports it, not after a timeout. The server never
// installs signal handlers (the program that embeds it owns signals), logs into
// log/slog, binds loopback unless told otherwise, and fsyncs every publish
// before acknowledging it unless [Config.SyncInterval] says otherwise; with
// [Config.GroupCommit] one fsync covers every publish waiting for it.
//
// Clients connect over TCP to [Server.ClientURL], or in-process:
//
//	nc, err := nats.Connect("", nats.InProcessServer(srv))
//
// # Lifecycle
//
// A *Server exists only once it is ready. [Server.Done] is closed when it
// stops for any reason; [Server.Wait] tells a requested stop from a crash;
// [Server.Close] stops it and waits, and may be called any number of times.
//
// This package imports only nats-server and the standard library, so other
// projects can use it without pulling in orderstore's configuration,
// metrics or CLI. Tests use package embeddedtest.
package embedded
