package orderstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orderstore/orderstore/embedded"
)

// natsServer is the embedded nats-server component: the server running
// now, which the store guard may replace with a new one on the same store
// and port (read it with current).
type natsServer struct {
	cfg embedded.Config
	// onReplace sees every server set, the first included (before
	// anyone can read it with current).
	onReplace func(*embedded.Server)

	mu      sync.Mutex
	srv     *embedded.Server
	changed chan struct{} // closed and replaced when srv is replaced
}

func newNATSServer(onReplace func(*embedded.Server)) *natsServer {
	return &natsServer{onReplace: onReplace, changed: make(chan struct{})}
}

// current returns the server running now (nil before the first start).
func (n *natsServer) current() *embedded.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// replaced returns a channel closed when the server is replaced.
func (n *natsServer) replaced() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// set makes srv the server running now.
func (n *natsServer) set(srv *embedded.Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.srv = srv
	if n.onReplace != nil {
		n.onReplace(srv)
	}
	close(n.changed)
	n.changed = make(chan struct{})
}

// watch is the component's run: it fails when the server stops on its
// own (not for a restart by the store guard), or when nats switches
// JetStream off (it does on some store errors, a permission error, and
// says so only in a warning). restarting tells when the guard restarts
// it.
func (n *natsServer) watch(ctx context.Context, restarting func() bool) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		srv, changed := n.current(), n.replaced()
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

// stop shuts the server down and waits for it (every stream flushed and
// closed).
func (n *natsServer) stop(context.Context) error {
	if srv := n.current(); srv != nil {
		return srv.Close()
	}
	return nil
}
