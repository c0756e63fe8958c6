// Package embeddedtest starts real, isolated JetStream brokers for Go tests:
// no Docker, no install, no shared state between tests.
//
//	func TestOrders(t *testing.T) {
//		srv := embeddedtest.Start(t)
//		js := embeddedtest.JetStream(t, srv)
//		...
//	}
//
// Each broker has its own t.TempDir() store and a random port, so parallel
// tests never see each other's streams. Everything is closed by t.Cleanup.
// Set ORDERSTORE_TEST_LOG=debug (or info) to see the server's log in t.Log.
//
// The package imports only package embedded, nats.go and the standard
// library. For ORDER_EVENTS declared exactly as the appliance declares it,
// or a whole appliance with its processor, use package orderstoretest.
package embeddedtest

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
)

// Start starts a broker for t on a random loopback port with a fresh store directory, and stops it
// when the test ends. opts adjust the config before start (e.g. to reuse a StoreDir for a restart
// test). It calls t.Fatal if the broker does not start.
func Start(t testing.TB, opts ...func(*embedded.Config)) *embedded.Server {
	t.Helper()
	cfg := embedded.Config{
		StoreDir:  t.TempDir(),
		Port:      -1,
		MaxMemory: 64 << 20,
		// The appliance's default limit, so its streams' reservations
		// fit. It is an accounting limit: nothing is allocated up front.
		MaxStore: 10 << 30,
		Logger:   Logger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("embeddedtest.Start: %v", err)
	}
	t.Cleanup(func() {
		srv.Close()
		if err := srv.Wait(); err != nil {
			t.Errorf("embeddedtest: broker: %v", err)
		}
	})
	return srv
}

// Connect opens an in-process client connection to srv (an *embedded.Server, an
// *orderstore.Appliance, ...), closed when the test ends.
func Connect(t testing.TB, srv nats.InProcessConnProvider, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(srv)}, opts...)...)
	if err != nil {
		t.Fatalf("embeddedtest.Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new in-process connection.
func JetStream(t testing.TB, srv nats.InProcessConnProvider, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, srv, opts...))
	if err != nil {
		t.Fatalf("embeddedtest.JetStream: %v", err)
	}
	return js
}

// Logger returns a logger into t.Log at the level ORDERSTORE_TEST_LOG
// names (debug, info, warn), or nil (discard) when it is unset.
func Logger(t testing.TB) *slog.Logger {
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "trace": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn}
	level, ok := levels[strings.ToLower(os.Getenv("ORDERSTORE_TEST_LOG"))]
	if !ok {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// WaitFor polls f every 20ms until it returns nil, and fails the test with f's last error if that
// has not happened within timeout. Use it for state that becomes true eventually (a consumer
// catching up, a port closing) instead of sleeping.
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for err := f(); err != nil; err = f() {
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
