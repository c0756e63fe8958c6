package orderstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// conn is one of orderstore's own connections.
type conn struct {
	*nats.Conn
	closed chan struct{} // closed once it closed for good
	// status is its nats.Status as its handlers last told it, read without its lock (IsConnected
	// takes the lock, which a write into the in-process pipe holds while the server's read loop
	// waits: the publish connection's publishes wait in admission's line).
	status *atomic.Int32
}

// connect opens one of orderstore's own connections, in-process, with replies on inbox, as a
// component: it reconnects when the server drops it (a slow consumer, a protocol error, an
// operator's kick, a restart by the store guard) and closes only when it cannot, which fails the
// appliance; its stop step drains it.
func (a *Appliance) connect(name, inbox string) (conn, jetstream.JetStream, error) {
	log := a.log.With("component", "nats-client", "conn", name)
	c := conn{closed: make(chan struct{}), status: new(atomic.Int32)}
	c.status.Store(int32(nats.CONNECTED))
	// In-process through the appliance, so a reconnect reaches the server running now (the store
	// guard may have restarted it). Reconnects give up after about 5 minutes without a server, the
	// longest the guard gives a restart (stream recovery on a large store).
	opts := []nats.Option{nats.InProcessServer(a), nats.Name(name),
		nats.MaxReconnects(1200), nats.ReconnectWait(250 * time.Millisecond),
		nats.ClosedHandler(func(*nats.Conn) { c.status.Store(int32(nats.CLOSED)); close(c.closed) }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			c.status.CompareAndSwap(int32(nats.CONNECTED), int32(nats.RECONNECTING))
			if !a.sup.stopping() {
				log.Warn("internal connection lost, reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.status.CompareAndSwap(int32(nats.RECONNECTING), int32(nats.CONNECTED))
			log.Info("internal connection reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("internal connection", "err", err) }),
	}
	nc, err := nats.Connect("", append(opts, a.id.Options(inbox)...)...)
	if err != nil {
		return conn{}, nil, fmt.Errorf("connect in-process (%s): %w", name, err)
	}
	c.Conn = nc
	a.sup.add(component{name: "connection " + name,
		run: watch(c.closed, func() error {
			return fmt.Errorf("internal nats connection %q closed and could not reconnect", name)
		}),
		stop: func(ctx context.Context) error { return drain(ctx, nc, c.closed) }})
	// A write whose ack never comes (its stream's leader died with it) fails after
	// internalAckTimeout, to be retried, instead of holding the processor's partition for good.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(internalAckTimeout))
	if err != nil {
		return conn{}, nil, fmt.Errorf("jetstream (%s): %w", name, err)
	}
	return c, js, nil
}

// internalAckTimeout bounds the wait for the ack of an internal
// connection's asynchronous write (the projection's).
const internalAckTimeout = 10 * time.Second

// drain drains nc and waits for it to close, at most 10s or until ctx ends; then it closes it.
func drain(ctx context.Context, nc *nats.Conn, closed <-chan struct{}) error {
	if nc.IsClosed() {
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) {
			return nil // nothing in flight to drain
		}
		return fmt.Errorf("drain connection %s: %w", nc.Opts.Name, err)
	}
	select {
	case <-closed:
		return nil
	case <-time.After(10 * time.Second):
		nc.Close()
		return fmt.Errorf("drain connection %s: not drained after 10s", nc.Opts.Name)
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("drain connection %s: %w", nc.Opts.Name, ctx.Err())
	}
}
