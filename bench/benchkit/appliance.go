package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/status"
)

// Config is the defaults on store dir, on a random client port and without the admin listener.
func Config(dir string) orderstore.Config {
	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir, cfg.Server.Port, cfg.Admin.Listen = dir, -1, ""
	return cfg
}

// ApplySync sets the durability a bench's -sync names: "" keeps the default (group commit),
// "always" (an fsync before every ack), "group-commit", or a duration (durability "interval" with
// that sync_interval).
func ApplySync(cfg *orderstore.Config, mode string) error {
	switch mode {
	case "":
		return nil
	case orderstore.DurabilityAlways, orderstore.DurabilityGroupCommit:
		cfg.JetStream.Durability = mode
		return nil
	}
	d, err := time.ParseDuration(mode)
	if err != nil || d <= 0 {
		return fmt.Errorf("-sync %q: want group-commit, always or a positive duration", mode)
	}
	cfg.JetStream.Durability, cfg.JetStream.SyncInterval = orderstore.DurabilityInterval, d
	return nil
}

// Start starts an appliance, giving it up to 10 minutes (a large store's recovery).
func Start(ctx context.Context, cfg orderstore.Config) (*orderstore.Appliance, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	return orderstore.Start(sctx, cfg)
}

// Stop closes app, giving it up to 5 minutes.
func Stop(app *orderstore.Appliance) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return app.Close(ctx)
}

// Env is a store directory of its own, the appliance running on it (if any) and the connections
// opened to it. The appliance can be stopped and started again on the same store.
type Env struct {
	Dir   string
	Cfg   orderstore.Config // what Start starts: Config(Dir) until changed
	App   *orderstore.Appliance
	conns []*nats.Conn
}

// NewEnv makes a fresh store directory under parent (the system temp dir when "") named after
// pattern (os.MkdirTemp), with the durability sync names (ApplySync) and room for events of about
// 150 bytes on disk many times over.
func NewEnv(parent, pattern, sync string, events int) (*Env, error) {
	cfg := Config("")
	if err := ApplySync(&cfg, sync); err != nil {
		return nil, err
	}
	if need := int64(events) * 2048; need > cfg.Stream.MaxBytes {
		cfg.Stream.MaxBytes, cfg.JetStream.MaxFileStore = need, need+2<<30
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return nil, err
	}
	cfg.JetStream.StoreDir = dir
	return &Env{Dir: dir, Cfg: cfg}, nil
}

// Start validates Cfg and starts the appliance with it, with its processor or without. Without, the
// appliance does not declare the processor's consumer: the whole spec is declared, as the appliance
// would.
func (e *Env) Start(ctx context.Context, processorOn bool) error {
	if err := e.Cfg.Validate(); err != nil {
		return err
	}
	cfg := e.Cfg
	cfg.Processor.Enabled = processorOn
	app, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	e.App = app
	if processorOn {
		return nil
	}
	js, err := e.Connect(false, "bench-declare")
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = bootstrap.Declare(dctx, js, e.Cfg.DeclareSpec(), nil)
	return err
}

// Connect opens a connection: in-process as the appliance's own, or TCP as an external producer.
func (e *Env) Connect(tcp bool, name string, jsopts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	url, opts := e.App.ClientURL(), []nats.Option{nats.Name(name)}
	if !tcp {
		url, opts = "", append(opts, nats.InProcessServer(e.App))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	e.conns = append(e.conns, nc)
	return jetstream.New(nc, jsopts...)
}

// Publisher is Connect for a Window of window async publishes: room for
// twice as many pending, a minute for each ack.
func (e *Env) Publisher(tcp bool, name string, window int) (jetstream.JetStream, error) {
	return e.Connect(tcp, name,
		jetstream.WithPublishAsyncMaxPending(max(4000, 2*window)),
		jetstream.WithPublishAsyncTimeout(60*time.Second))
}

// CaughtUp is CaughtUp for the appliance's own processor; an event it dead-lettered is an error.
func (e *Env) CaughtUp(ctx context.Context, want uint64, timeout time.Duration) (orderstore.Stats, error) {
	st, err := CaughtUp(ctx, want, timeout, e.App.Lag, e.App.Stats, nil)
	if err == nil && st.DeadLettered > 0 {
		err = fmt.Errorf("processor: %d events dead-lettered", st.DeadLettered)
	}
	return st, err
}

// Stop closes the connections and stops the appliance; the store stays.
func (e *Env) Stop() {
	for _, nc := range e.conns {
		nc.Close()
	}
	e.conns = nil
	if e.App != nil {
		if err := Stop(e.App); err != nil {
			Logf("warning: closing the appliance: %v", err)
		}
		e.App = nil
	}
}

// Close stops the appliance and removes the store; again, it does nothing.
func (e *Env) Close() {
	e.Stop()
	if err := os.RemoveAll(e.Dir); err != nil {
		Logf("warning: removing %s: %v", e.Dir, err)
	}
}

// CaughtUp waits until a processor's consumer has nothing pending or unacked (lag) and the
// processor has settled (processed, found duplicate or dead-lettered) at least want events (stats),
// polling every 25 ms and logging its progress every 10 s; it returns the stats it saw last. A
// value from stopped (nil: none) ends the wait: the processor stopped.
func CaughtUp(ctx context.Context, want uint64, timeout time.Duration,
	lag func(context.Context) (orderstore.Lag, error), stats func() orderstore.Stats, stopped <-chan error) (orderstore.Stats, error) {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		if err := Sleep(ctx, 25*time.Millisecond); err != nil {
			return orderstore.Stats{}, err
		}
		select {
		case err := <-stopped:
			return orderstore.Stats{}, fmt.Errorf("processor stopped: %v", err)
		default:
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := lag(lctx)
		cancel()
		st := stats()
		if err == nil && l.Pending == 0 && l.AckPending == 0 && st.Processed+st.Duplicates+st.DeadLettered >= want {
			return st, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			Logf("   processed %s, pending %s, ack pending %d", Num(int(st.Processed)), Num(int(l.Pending)), l.AckPending)
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not caught up after %s: pending %d, ack pending %d, processed %d (%v)", timeout, l.Pending, l.AckPending, st.Processed, err)
		}
	}
}

// Status is app's GET /v1/status, served in-process.
func Status(app *orderstore.Appliance) (*status.Status, error) {
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/status", nil))
	var st status.Status
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/status: %d %s", rec.Code, rec.Body)
	}
	return &st, json.Unmarshal(rec.Body.Bytes(), &st)
}
