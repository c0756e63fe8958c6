package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	rungroup "github.com/oklog/run"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/sdnotify"
	"github.com/orderstore/orderstore/internal/setup"
	"github.com/orderstore/orderstore/processor"
)

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (default: $ORDERSTORE_CONFIG, else built-in defaults)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "orderstore run: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}

	// Signals are caught from the first moment, so SIGTERM during a long
	// stream recovery stops start-up cleanly instead of killing the process.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)

	cfg, cfgName, err := loadConfig(*configPath)
	if err != nil {
		printErr(stderr, err)
		return exitUsage
	}
	logger := newLogger(stderr, cfg.Log.Level, cfg.Log.Format)
	bi := getBuildInfo()
	logger.Info("orderstore starting", "version", bi.Version, "config", cfgName, "pid", os.Getpid())

	a, err := preflight(cfg, logger)
	if err != nil {
		printErr(stderr, err)
		return exitFailure
	}
	defer a.close(logger)

	// The admin listener opens before nats starts: a busy port fails at
	// once, and during a long stream recovery /readyz answers "recovering".
	var nsrv atomic.Pointer[server.Server]
	adm, err := startAdmin(cfg, bi, logger, func() *server.Server { return nsrv.Load() })
	if err != nil {
		printErr(stderr, err)
		return exitFailure
	}
	defer adm.shutdown()

	// Start-up is cancelled by a signal.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	started := make(chan struct{})
	var startSig atomic.Bool
	go func() {
		select {
		case <-sigc:
			startSig.Store(true)
			cancelStart()
		case <-started:
		}
	}()

	sdnotify.Status("recovering streams")
	err = a.start(startCtx, cfg, logger)
	close(started)
	if err != nil {
		if startSig.Load() || (ctx.Err() == nil && errors.Is(err, context.Canceled)) {
			logger.Info("start-up interrupted by signal, shutdown complete")
			return exitOK
		}
		printErr(stderr, err)
		var drift *bootstrap.DriftError
		if errors.As(err, &drift) {
			return exitUsage
		}
		return exitFailure
	}
	nsrv.Store(a.srv.NATSServer())

	var g rungroup.Group
	{ // signals
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case s := <-sigc:
				return &rungroup.SignalError{Signal: s}
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
	}
	{ // watchdog on the embedded server
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case <-a.srv.Done():
				return a.srv.Wait()
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
	}
	var proc *processor.Processor
	if cfg.Processor.Enabled {
		proc, err = newProcessor(ctx, a, cfg, logger)
		if err != nil {
			printErr(stderr, err)
			return exitFailure
		}
		pctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error { return proc.Run(pctx) }, func(error) { cancel() })
	}
	if adm != nil { // admin HTTP, serving since start-up
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case err := <-adm.serveErr:
				return fmt.Errorf("admin listener %s: %w", cfg.Admin.Listen, err)
			case <-stop:
				return nil
			}
		}, func(error) { close(stop); adm.shutdown() })
		kv, err := a.js.KeyValue(ctx, cfg.Processor.ProjectionBucket)
		if err != nil {
			printErr(stderr, fmt.Errorf("projection bucket %q: %w", cfg.Processor.ProjectionBucket, err))
			return exitFailure
		}
		b := admin.Backend{JS: a.js, DeadLetters: dlqAdapter{a.js, cfg.Processor.DeadLetterStream}, Orders: ordersAdapter{processor.NewProjection(a.js, kv)}}
		if proc != nil {
			b.Processor = procAdapter{proc, a.js, cfg.Stream.Name, cfg.Processor.Durable}
		}
		adm.srv.SetBackend(b)
	}
	if ctx.Done() != nil { // the caller's context (tests)
		cctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { <-cctx.Done(); return ctx.Err() }, func(error) { cancel() })
	}

	{ // announce readiness once every part runs, the processor included
		stop := make(chan struct{})
		g.Add(func() error {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for proc != nil && !proc.Running() {
				select {
				case <-stop:
					return nil
				case <-tick.C:
				}
			}
			logger.Info("orderstore ready", "client_url", a.srv.ClientURL(), "admin", cfg.Admin.Listen, "store_dir", a.report.StoreDir)
			if err := sdnotify.Ready(); err != nil {
				logger.Warn("sd_notify", "err", err)
			}
			<-stop
			return nil
		}, func(error) { close(stop) })
	}
	err = g.Run()
	sdnotify.Stopping()
	var sigErr *rungroup.SignalError
	switch {
	case errors.As(err, &sigErr):
		logger.Info("signal received, shutting down", "signal", sigErr.Signal.String())
	case err == nil || errors.Is(err, context.Canceled):
	default:
		a.close(logger)
		printErr(stderr, err)
		return exitFailure
	}
	if err := a.close(logger); err != nil {
		printErr(stderr, err)
		return exitFailure
	}
	logger.Info("shutdown complete")
	return exitOK
}

// adminListener is the admin HTTP server, serving from start-up.
type adminListener struct {
	srv      *admin.Server
	hs       *http.Server
	serveErr chan error
	once     sync.Once
}

// startAdmin opens [admin] listen and serves on it; nil when disabled.
func startAdmin(cfg configT, bi buildInfo, logger *slog.Logger, nsrv func() *server.Server) (*adminListener, error) {
	if cfg.Admin.Listen == "" {
		return nil, nil
	}
	token, err := cfg.AdminToken()
	if err != nil {
		return nil, withHint(err, "fix admin.token_file or set admin.token")
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, withHint(fmt.Errorf("admin listener %s: %w", cfg.Admin.Listen, err),
			fmt.Sprintf("another process listens on %s; stop it or set admin.listen (\"\" disables the admin listener)", cfg.Admin.Listen))
	}
	durable := ""
	if cfg.Processor.Enabled {
		durable = cfg.Processor.Durable
	}
	storeDir, _ := filepath.Abs(cfg.JetStream.StoreDir)
	srv := admin.New(admin.Config{
		Token:            token,
		Stream:           cfg.Stream.Name,
		Subjects:         cfg.Stream.Subjects,
		Durable:          durable,
		DeadLetterStream: cfg.Processor.DeadLetterStream,
		ProjectionBucket: cfg.Processor.ProjectionBucket,
		MaxBytes:         int64(cfg.Stream.MaxBytes),
		MaxMsgs:          cfg.Stream.MaxMsgs,
		MaxAge:           cfg.Stream.MaxAge.D(),
		SyncPolicy:       cfg.JetStream.SyncInterval.String(),
		SyncDescription:  cfg.JetStream.SyncInterval.Describe(),
		StoreDir:         storeDir,
		FreeBytes:        func() (uint64, error) { return bootstrap.FreeBytes(storeDir) },
		Build:            admin.BuildInfo{Version: bi.Version, Commit: bi.Commit, Date: bi.Date, GoVersion: bi.Go, NATSServer: bi.NATSServer},
		Monitoring:       monitoring(nsrv),
		Logger:           logger.With("component", "admin"),
	})
	al := &adminListener{srv: srv, serveErr: make(chan error, 1), hs: &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.With("component", "admin").Handler(), slog.LevelWarn),
	}}
	go func() {
		if err := al.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			al.serveErr <- err
		}
	}()
	logger.Info("admin listening", "addr", ln.Addr().String(), "token", token != "")
	return al, nil
}

// shutdown stops taking requests and waits up to 5s for those in flight.
func (a *adminListener) shutdown() {
	if a == nil {
		return
	}
	a.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.hs.Shutdown(ctx)
	})
}

// newProcessor builds the built-in processor: the projection handler over
// the processor's durable, dead letters to the configured stream.
func newProcessor(ctx context.Context, a *appliance, cfg configT, logger *slog.Logger) (*processor.Processor, error) {
	proj, err := setup.Projection(ctx, a.js, cfg)
	if err != nil {
		return nil, err
	}
	pc := setup.ProcessorConfig(cfg)
	pc.Handler = proj
	pc.Logger = logger.With("component", "processor")
	return processor.New(a.js, pc)
}

// appliance is everything started before the run group.
type appliance struct {
	lock   *bootstrap.Lock
	report bootstrap.Report
	srv    *embedded.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	spec   bootstrap.Spec

	closed bool
	err    error
}

// preflight runs start-up step 2 of DESIGN.md: the store's checks and its
// lock. It comes before the admin listener, so a second instance on the same
// store is told so, not that the admin port is busy.
func preflight(cfg configT, logger *slog.Logger) (*appliance, error) {
	lock, rep, err := bootstrap.Preflight(setup.Preflight(cfg))
	if err != nil {
		return nil, err
	}
	for _, w := range rep.Warnings {
		logger.Warn("preflight", "warning", w)
	}
	logger.Info("preflight ok", "store_dir", rep.StoreDir, "lock", lock.Path(),
		"free_disk", bootstrap.FormatBytes(int64(rep.FreeBytes)), "used", bootstrap.FormatBytes(rep.UsedBytes),
		"max_file_store", cfg.JetStream.MaxFileStore.String())
	return &appliance{lock: lock, report: rep}, nil
}

// start runs start-up steps 3 to 5 of DESIGN.md on a preflighted store:
// start nats, declare, recovery check. On error the caller closes a.
func (a *appliance) start(ctx context.Context, cfg configT, logger *slog.Logger) error {
	ec, internalPassword := setup.Embedded(cfg, logger)
	t0 := time.Now()
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return withHint(err, startHint(cfg, err))
	}
	a.srv = srv
	logger.Info("nats ready", "client_url", srv.ClientURL(), "took", time.Since(t0).Round(time.Millisecond).String(),
		"sync_interval", cfg.JetStream.SyncInterval.String(), "durability", cfg.JetStream.SyncInterval.Describe())

	nopts := []nats.Option{nats.InProcessServer(srv), nats.Name("orderstore-internal")}
	if internalPassword != "" {
		nopts = append(nopts, nats.UserInfo(setup.InternalUser, internalPassword))
	}
	nc, err := nats.Connect("", nopts...)
	if err != nil {
		return fmt.Errorf("connect in-process: %w", err)
	}
	a.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	a.js = js

	a.spec = setup.Spec(cfg)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := bootstrap.Declare(dctx, js, a.spec, logger.With("component", "bootstrap")); err != nil {
		return err
	}
	if err := bootstrap.Verify(dctx, js, a.spec); err != nil {
		return err
	}
	st := cfg.Stream
	logger.Info("stream ready", "stream", st.Name, "subjects", st.Subjects, "max_age", st.MaxAge.String(),
		"max_bytes", st.MaxBytes.String(), "max_msgs", st.MaxMsgs, "discard", st.Discard,
		"duplicate_window", st.DuplicateWindow.String())
	return nil
}

// close stops, in order: the internal connection (drained), nats
// (Shutdown + WaitForShutdown), the store lock. Safe to call twice.
func (a *appliance) close(logger *slog.Logger) error {
	if a.closed {
		return a.err
	}
	a.closed = true
	var errs []error
	if a.nc != nil {
		drained := make(chan struct{})
		a.nc.SetClosedHandler(func(*nats.Conn) { close(drained) })
		if err := a.nc.Drain(); err != nil {
			a.nc.Close()
		} else {
			select {
			case <-drained:
			case <-time.After(10 * time.Second):
				a.nc.Close()
			}
		}
	}
	if a.srv != nil {
		errs = append(errs, a.srv.Close())
	}
	if a.lock != nil {
		errs = append(errs, a.lock.Release())
	}
	a.err = errors.Join(errs...)
	return a.err
}

func startHint(cfg configT, err error) string {
	msg := err.Error()
	switch {
	case containsAny(msg, "address already in use", "bind"):
		return fmt.Sprintf("another process listens on %s:%d; stop it or set server.port (or -1 for a random port)", cfg.Server.Host, cfg.Server.Port)
	case containsAny(msg, "storage directory", "store"):
		return "check jetstream.store_dir: it must be a writable directory"
	}
	return ""
}
