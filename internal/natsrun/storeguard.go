package natsrun

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/status"
)

// StoreGuard handles a store that cannot write (a full disk, an I/O error), where nats-server marks
// the stream with a "critical write error" and sends publishers no reply at all, for good. The
// guard answers them with an error itself, makes /readyz 503, waits for free disk and restarts nats
// on the same store and port (docs/operations.md, "A full disk").
type StoreGuard struct {
	cfg  GuardConfig
	log  *slog.Logger
	nats *Server    // the server it restarts
	conn *nats.Conn // where the refusals subscribe (SetConn)

	mu    sync.Mutex
	werr  string    // the write error; "" while the store writes
	since time.Time // when it was seen

	wake       chan struct{} // a write error was seen
	ownFailed  chan struct{} // closed once the stream's own writes failed
	ownOnce    sync.Once
	stopped    chan struct{} // no more restarts (Close)
	stopOnce   sync.Once
	restartMu  sync.Mutex // held while nats restarts
	restarting atomic.Bool
	restarts   atomic.Int64
	lastStart  time.Time // of the last restart, for the backoff
}

// GuardConfig is what the store guard needs of the appliance.
type GuardConfig struct {
	StoreDir string
	Stream   string   // whose write errors stop its publishers' answers
	Subjects []string // the stream's subjects: refused while it cannot write
	Headroom int64    // free disk the store needs before nats restarts
}

// NewStoreGuard returns the guard of srv.
func NewStoreGuard(cfg GuardConfig, srv *Server, log *slog.Logger) *StoreGuard {
	return &StoreGuard{cfg: cfg, nats: srv, log: log, wake: make(chan struct{}, 1), stopped: make(chan struct{}), ownFailed: make(chan struct{})}
}

// OnNATSError sees every error line of nats-server.
func (g *StoreGuard) OnNATSError(msg string) {
	if !strings.Contains(msg, "critical write error") {
		return
	}
	g.mu.Lock()
	if g.werr == "" {
		g.werr, g.since = msg, time.Now()
	}
	if strings.Contains(msg, "> "+g.cfg.Stream+"'") {
		g.ownOnce.Do(func() { close(g.ownFailed) })
	}
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// state is the write error and since when; "" while the store writes.
func (g *StoreGuard) state() (string, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.werr, g.since
}

// Check is the readiness check "store_writes".
func (g *StoreGuard) Check() status.Check {
	c := status.Check{Name: "store_writes", OK: true}
	if werr, since := g.state(); werr != "" {
		c.OK, c.Reason = false, fmt.Sprintf("the store cannot write since %s (%s): publishes are refused; orderstore restarts nats once free disk is at least jetstream.disk_headroom",
			since.UTC().Format(time.RFC3339), werr)
	}
	return c
}

// Run is the component's run: it handles each write error nats reports.
func (g *StoreGuard) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.stopped:
			return nil
		case <-g.wake:
		}
		if werr, _ := g.state(); werr == "" {
			continue // a late signal for an error the last restart cleared
		}
		if err := g.recover(ctx); err != nil {
			return err
		}
	}
}

// recover refuses publishes while the store cannot write, waits for room, and restarts nats.
func (g *StoreGuard) recover(ctx context.Context) error {
	werr, _ := g.state()
	g.log.Error("the store cannot write: publishers are refused until it can, then nats restarts", "err", werr,
		"hint", "free disk space under "+g.cfg.StoreDir)
	// Publishers of the stream get an answer from us while it sends none.
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	// refuse answers the stream's publishers from here on, once (it sets
	// ownFailed to nil), and flushes so that the server has the refusal.
	ownFailed := g.ownFailed
	refuse := func() {
		ownFailed = nil
		reply := ingest.APIError(503, "orderstore: the store cannot write (disk full?); retry later")
		for _, subj := range g.cfg.Subjects {
			sub, err := g.conn.Subscribe(subj, func(m *nats.Msg) {
				if m.Reply != "" {
					_ = m.Respond(reply)
				}
			})
			if err != nil {
				g.log.Warn("cannot refuse publishes while the store cannot write", "subject", subj, "err", err)
				continue
			}
			subs = append(subs, sub)
		}
		_ = g.conn.Flush()
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		free, err := bootstrap.FreeBytes(g.cfg.StoreDir)
		if err == nil && free > uint64(max(g.cfg.Headroom, 1<<20)) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-g.stopped:
			return nil
		case <-ownFailed:
			refuse()
		case <-t.C:
		}
	}
	select {
	case <-ownFailed: // nil once refused
		refuse() // until the restart below is done
	default:
	}
	return g.restart(ctx)
}

// restart replaces the embedded server with a new one on the same store and port.
func (g *StoreGuard) restart(ctx context.Context) error {
	g.restartMu.Lock()
	defer g.restartMu.Unlock()
	select {
	case <-g.stopped:
		return nil
	default:
	}
	// Back off between restarts: a store that still cannot write must not
	// make nats restart in a loop (each restart drops every client).
	if wait := time.Until(g.lastStart.Add(g.backoff())); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		case <-g.stopped:
			return nil
		}
	}
	g.restarting.Store(true)
	defer g.restarting.Store(false)
	g.lastStart = time.Now()
	old := g.nats.Current()
	ec := g.nats.Config
	if ec.Port == -1 {
		if u, err := url.Parse(old.ClientURL()); err == nil {
			ec.Port, _ = strconv.Atoi(u.Port())
		}
	}
	t0 := time.Now()
	if err := old.Close(); err != nil {
		return fmt.Errorf("restart nats after a write error: stop: %w", err)
	}
	// From here on a write error is the new server's: forget the old one before it can report one.
	g.mu.Lock()
	g.werr = ""
	g.ownFailed, g.ownOnce = make(chan struct{}), sync.Once{}
	g.mu.Unlock()
	srv, err := embedded.Start(ctx, ec) // bounded by ec.ReadyTimeout
	if err != nil {
		return fmt.Errorf("restart nats after a write error: %w", err)
	}
	g.nats.Set(srv)
	n := g.restarts.Add(1)
	g.log.Info("store writable again: nats restarted", "took", time.Since(t0).Round(time.Millisecond).String(), "restarts", n)
	for _, p := range srv.StartupProblems() {
		g.log.Warn("store recovery", "note", "nats: "+p)
	}
	return nil
}

// backoff is the least time between two restarts: 5s, doubling with each restart up to 5 minutes.
func (g *StoreGuard) backoff() time.Duration {
	return min(5*time.Second<<min(max(g.restarts.Load()-1, 0), 6), 5*time.Minute)
}

// Stop ends restarts and waits for one under way.
func (g *StoreGuard) Stop(context.Context) error {
	g.stopOnce.Do(func() { close(g.stopped) })
	g.restartMu.Lock()
	g.restartMu.Unlock()
	return nil
}

// Restarting reports whether the guard is restarting nats now.
func (g *StoreGuard) Restarting() bool { return g.restarting.Load() }

// SetConn is where the refusals subscribe (set before Run).
func (g *StoreGuard) SetConn(nc *nats.Conn) { g.conn = nc }
