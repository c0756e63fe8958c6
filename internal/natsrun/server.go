// Package natsrun runs the embedded nats-server as one of the appliance's components, and the store
// guard that restarts it on the same store and port once a store that could not write can again.
package natsrun

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orderstore/orderstore/embedded"
)

// Server is the embedded nats-server component: the server running now, which the store guard may
// replace with a new one on the same store and port (read it with Current).
type Server struct {
	// Config is what the server runs with (and a restart starts again).
	Config    embedded.Config
	onReplace func(*embedded.Server)

	mu      sync.Mutex
	srv     *embedded.Server
	changed chan struct{} // closed and replaced when srv is replaced
}

// NewServer returns the component; onReplace sees every server Set, the
// first included (before anyone can read it with Current).
func NewServer(onReplace func(*embedded.Server)) *Server {
	return &Server{onReplace: onReplace, changed: make(chan struct{})}
}

// Current returns the server running now (nil before the first start).
func (n *Server) Current() *embedded.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Set makes srv the server running now.
func (n *Server) Set(srv *embedded.Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.srv = srv
	if n.onReplace != nil {
		n.onReplace(srv)
	}
	close(n.changed)
	n.changed = make(chan struct{})
}

// Watch is the component's run: it fails when the server stops on its own (not for a restart by the
// store guard), or when nats switches JetStream off (it does on some store errors, a permission
// error, and says so only in a warning). restarting tells when the guard restarts it.
func (n *Server) Watch(ctx context.Context, restarting func() bool) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n.mu.Lock()
		srv, changed := n.srv, n.changed
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			continue
		case <-srv.Done():
			if err := srv.Wait(); err != nil {
				return err
			}
			select { // stopped on purpose: for a restart, or by its stop step
			case <-changed:
				continue
			case <-ctx.Done():
				return nil
			}
		case <-t.C:
		}
		if restarting() || srv.NATSServer().JetStreamEnabled() {
			continue
		}
		select {
		case <-srv.Done(): // stopping: the check above tells why
			continue
		default:
		}
		return errors.New("nats switched JetStream off (see its log: a store that cannot be written?)")
	}
}

// Stop shuts the server down and waits for it (every stream flushed and closed).
func (n *Server) Stop(context.Context) error {
	if srv := n.Current(); srv != nil {
		return srv.Close()
	}
	return nil
}
