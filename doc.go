// Package orderstore runs the orderstore appliance inside a Go program: a durable event log for
// order events on an embedded nats-server with JetStream, with the ORDER_EVENTS stream kept on disk
// within its limits, the built-in processor folding events into the ORDERS projection, and the HTTP
// admin listener. The orderstore binary is one program built on it.
//
// # Overview
//
// Start from [DefaultConfig], change what you need (the fields mirror the TOML file's tables: the
// file's stream.max_age is Config.Stream.MaxAge) and call [Start]:
//
//	cfg := orderstore.DefaultConfig()
//	cfg.JetStream.StoreDir = dir
//	cfg.Server.Port = -1  // a random port
//	cfg.Admin.Listen = "" // no admin listener
//	app, err := orderstore.Start(ctx, cfg)
//	...
//	defer app.Close(ctx)
//	nc, err := nats.Connect(app.ClientURL()) // or nats.InProcessServer(app)
//
// # Lifecycle
//
// [Start] runs start-up in order (its doc lists the steps) and returns only a ready [Appliance], or
// an error after stopping whatever it had started. [Appliance.Wait] returns when a part fails;
// [Appliance.Close] stops the parts in the reverse order, each completely before the next.
//
// Package orderstoretest starts an appliance per test; package embedded/embeddedtest a bare broker.
package orderstore
