package orderstore

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/natsserver/server"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/edgehub"
	"github.com/orderstore/orderstore/internal/hint"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/natsrun"
	"github.com/orderstore/orderstore/internal/rebuild"
	"github.com/orderstore/orderstore/internal/recovery"
	"github.com/orderstore/orderstore/internal/storedir"
	"github.com/orderstore/orderstore/internal/validate"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// ErrNotFound is matched (errors.Is) by the errors of [Appliance.Order],
// [Appliance.ReplayDeadLetter] and their kin for what does not exist.
var ErrNotFound = errors.New("orderstore: not found")

// The processor's types the appliance's methods return, under the names
// its API uses. The JSON shapes the appliance reports (/v1/status, its
// topology, build information) are package status's.
type (
	// Order is an order's projected state.
	Order = processor.Order
	// DeadLetter is one dead-lettered event.
	DeadLetter = processor.DeadLetter
	// Stats are the processor's counters.
	Stats = processor.Stats
	// Lag is how far the processor's consumer is behind.
	Lag = processor.LagInfo
)

// ErrProcessorDisabled is returned by [Appliance.Lag] when
// Processor.Enabled is false.
var ErrProcessorDisabled = errors.New("orderstore: the processor is disabled")

// Appliance is a running, ready orderstore: the store lock, the embedded
// nats-server with its streams declared and verified, the processor and the
// admin listener. It exists only once all of them run; see [Start].
type Appliance struct {
	cfg    Config
	log    *slog.Logger
	sup    *supervisor // every component, in start order, and their goroutines
	lock   *bootstrap.Lock
	report bootstrap.Report

	nats      *natsrun.Server               // the embedded server (the store guard may replace it)
	monitored atomic.Pointer[server.Server] // for the monitoring handlers, set once nats runs
	id        *natsconf.Identity            // how orderstore's own connections sign in
	epoch     string                        // this run's EpochHeader value
	dupName   atomic.Pointer[string]        // nats' log line about another node with this node's name
	guard     *natsrun.StoreGuard
	// orderstore's own connections, each of its own so that no part
	// shares another's fate: for declare, the admin API and lookups
	// (internal), the processor and its projection writes (processor),
	// a hub's source watcher (hubwatch).
	internal, processor, hubwatch conn
	js, pjs                       jetstream.JetStream // on internal, on processor

	commit             *ingest.Committer                  // group commit's figures and failure; nil in other modes
	admit              *ingest.Admission                  // nats' admission hook: every publish into the stream
	dguard             *durableGuard                      // answers clients' requests on the processor's durable
	hub                *edgehub.Watcher                   // a hub's source watcher; nil elsewhere
	proj               *processor.Projection              // reads, on internal
	hstream            historyStream                      // the stream history reads come from
	validator          atomic.Pointer[validate.Validator] // schema validation at ingest; swapped by SetValidation
	proc               *processor.Processor               // nil when disabled
	procHandler        processor.Handler                  // the processor's handler
	pause              *pausable                          // runs proc; a rebuild's takeover pauses it
	reads              atomic.Pointer[shadowReads]        // during a rebuild's takeover: reads from the shadow
	rebuild            *rebuild.Runner                    // nil when the projection cannot be rebuilt
	rebuildUnsupported error                              // why not
	handlerVersion     string                             // the fold's version (processor.Versioned)
	backupMu           sync.Mutex                         // one backup at a time

	stallAfter time.Duration
	rc         *recovery.Check // what start-up found and did about a damaged store
	unclean    bool            // the last run did not stop cleanly

	admin      *admin.Server
	httpServer *http.Server // the admin listener's; nil when it is disabled
	adminLn    net.Listener

	closeOnce sync.Once
	closeDone chan struct{}
	closeErr  error
}

// conn is one of orderstore's own connections.
type conn struct {
	*nats.Conn
	closed chan struct{} // closed once it closed for good
}

// Start runs the start-up in order (README.md, "Start-up, in order"); each
// step starts its components, which [Appliance.Close] stops in the reverse
// order:
//
//  1. validate cfg;
//  2. the store: preflight (store_dir, free disk), its lock, the run
//     marker, a legacy layout moved;
//  3. the admin handler and listener, so that a busy port fails at once
//     and /readyz answers "recovering" during a long recovery;
//  4. group commit's watch (durability "group-commit": nats-server's file
//     store syncs, and a failed sync fails the appliance);
//  5. nats-server, with the admission hook every publish into the stream
//     passes, and a watchdog on it;
//  6. orderstore's internal and processor connections;
//  7. the store guard;
//  8. declare the stream, dead-letter stream, projection bucket and
//     consumer, with the recovery check of what nats loaded;
//  9. the checks after the declaration: lost sequences, this run's epoch,
//     the metadata made durable;
//  10. the rebuild runner, finishing a takeover a stop interrupted;
//  11. the processor;
//  12. the rebuild runner's fold under way, or one a new handler version
//     asks for;
//  13. a hub's source watcher and its connection;
//  14. the durable guard;
//  15. the admin API's backend, and the admin listener's intake.
//
// (TestStartDocIsTheStepTable checks this list against startSteps.)
//
// It returns once the processor consumes and every part runs, or with an
// error naming what failed; on error everything it started is stopped and
// the lock released.
//
// ctx bounds start-up only (a canceled ctx aborts it); stop a running
// appliance with [Appliance.Close].
func Start(ctx context.Context, cfg Config) (*Appliance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := cfg.validator()
	if err != nil {
		return nil, err
	}
	cfg.Stream.Subjects = append([]string(nil), cfg.Stream.Subjects...)
	log := loggerOrDiscard(cfg.Logger)
	a := &Appliance{cfg: cfg, log: log, sup: newSupervisor(log), epoch: newEpoch(), closeDone: make(chan struct{})}
	a.validator.Store(v)
	for _, step := range startSteps {
		a.sup.stage(func(ctx context.Context) error { return step.run(a, ctx) })
	}
	if err := a.sup.start(ctx); err != nil {
		return nil, err
	}
	if a.proc != nil {
		select {
		case <-a.proc.Ready():
		case <-a.sup.done:
			return nil, errors.Join(fmt.Errorf("start: %w", a.sup.Err()), a.sup.failStart())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("start: processor: %w", ctx.Err()), a.sup.failStart())
		}
	}
	if cfg.historyMaxBytes() == 0 {
		log.Warn("no history index: jetstream.max_file_store leaves no room for it next to the stream, the dead letters and the projection; an order's events and its state as of a moment cannot be looked up (raise max_file_store and set processor.history_max_bytes)")
	}
	log.Info("orderstore ready", "client_url", a.clientURLForLog(), "admin", a.AdminAddr(), "store_dir", a.report.StoreDir)
	return a, nil
}

// startSteps are Start's steps after the config's validation, in order,
// each with its item in Start's doc and, when it starts a component, its
// item in Close's doc (Close stops the steps in the reverse order).
var startSteps = []struct {
	doc  string
	run  func(*Appliance, context.Context) error
	stop string
}{
	{"the store: preflight (store_dir, free disk), its lock, the run marker, a legacy layout moved", (*Appliance).openStore,
		"after a clean stop the store is marked stopped (the next start skips the crash checks), and the store lock is released"},
	{`the admin handler and listener, so that a busy port fails at once and /readyz answers "recovering" during a long recovery`, (*Appliance).startAdmin,
		"the admin listener closes"},
	{`group commit's watch (durability "group-commit": nats-server's file store syncs, and a failed sync fails the appliance)`, (*Appliance).startCommitter,
		"group commit's watch stops"},
	{"nats-server, with the admission hook every publish into the stream passes, and a watchdog on it", (*Appliance).startNATS,
		"nats-server shuts down (Shutdown + WaitForShutdown: every stream flushed and closed, group commit syncing and answering every publish it holds first)"},
	{"orderstore's internal and processor connections", (*Appliance).connectInternal,
		"the processor's connection drains, then the internal one"},
	{"the store guard", (*Appliance).startStoreGuard,
		"the store guard: no restart of nats from here on (one under way is waited for)"},
	{"declare the stream, dead-letter stream, projection bucket and consumer, with the recovery check of what nats loaded", (*Appliance).declare, ""},
	{"the checks after the declaration: lost sequences, this run's epoch, the metadata made durable", (*Appliance).checkStore, ""},
	{"the rebuild runner, finishing a takeover a stop interrupted", (*Appliance).openRebuild, ""},
	{"the processor", (*Appliance).startProcessor,
		"the processor: it stops fetching, finishes and acks the events it holds"},
	{"the rebuild runner's fold under way, or one a new handler version asks for", (*Appliance).runRebuild,
		"the projection rebuild: a fold under way stops, and the next start goes on from its last durable position"},
	{"a hub's source watcher and its connection", (*Appliance).startHubWatch,
		"a hub's source watcher, then its connection drains"},
	{"the durable guard", (*Appliance).startDurableGuard,
		"the durable guard"},
	{"the admin API's backend, and the admin listener's intake", (*Appliance).openAdmin,
		"the admin listener's intake: it stops taking requests and finishes those in flight"},
}

// openStore runs the preflight, takes the store's lock and marks it
// running. Preflight comes before the admin listener: a second instance
// on the same store is told so, not that the admin port is busy.
func (a *Appliance) openStore(context.Context) error {
	cfg, log := a.cfg, a.log
	lock, rep, err := bootstrap.Preflight(cfg.preflightConfig())
	if err != nil {
		return err
	}
	a.lock, a.report = lock, rep
	a.sup.add(component{name: "store", stop: func(context.Context) error {
		var errs []error
		if a.sup.clean() {
			errs = append(errs, storedir.Dir(a.report.StoreDir).MarkStopped()) // a clean stop: nats flushed every store
		}
		return errors.Join(append(errs, a.lock.Release())...)
	}})
	if err := a.markRunning(); err != nil {
		return err
	}
	var interval time.Duration
	if cfg.relaxedSync() {
		interval = cfg.JetStream.SyncInterval
	}
	a.rc = &recovery.Check{Dir: storedir.Dir(rep.StoreDir), Account: StreamAccount, Spec: cfg.DeclareSpec(), Log: a.log,
		Retry: a.clusterRetry, Unclean: a.unclean, SyncInterval: interval, BuiltinProjection: cfg.Processor.Handler == nil || cfg.historyMaxBytes() > 0}
	for _, w := range rep.Warnings {
		log.Warn("preflight", "warning", w)
	}
	if moved, err := storedir.Dir(rep.StoreDir).MoveAccount(legacyAccount, StreamAccount); errors.Is(err, storedir.ErrBothAccounts) {
		return withHint(err, "an older orderstore wrote the first, this one the second; keep one (move the other away) and start again")
	} else if err != nil {
		return err
	} else if moved {
		log.Info("store moved to its account", "from", "jetstream/"+legacyAccount, "to", "jetstream/"+StreamAccount)
	}
	for _, w := range cfg.PlaintextWarnings() {
		log.Warn("PLAINTEXT LISTENER", "warning", w)
	}
	log.Info("preflight ok", "store_dir", rep.StoreDir, "lock", lock.Path(),
		"free_disk", bytesize.Format(int64(rep.FreeBytes)), "used", bytesize.Format(rep.UsedBytes),
		"max_file_store", bytesize.Format(cfg.JetStream.MaxFileStore))
	return nil
}

// startAdmin builds the admin handler (readiness is served from it even
// when the listener is disabled) and, unless Admin.Listen is "", listens.
func (a *Appliance) startAdmin(context.Context) error {
	cfg := a.cfg
	durable := ""
	if cfg.Processor.Enabled {
		durable = cfg.Processor.Durable
	}
	policy, desc := cfg.DurabilityPolicy()
	storeDir := a.report.StoreDir
	a.admin = admin.New(admin.Config{
		Token:            cfg.Admin.Token,
		AllowedHosts:     adminHosts(cfg.Admin),
		Stream:           cfg.Stream.Name,
		ConsumerStream:   cfg.DeclareSpec().ConsumerStream(),
		Subjects:         cfg.Stream.Subjects,
		MaxEventBytes:    int64(cfg.Stream.MaxMsgSize),
		Durable:          durable,
		DeadLetterStream: cfg.Processor.DeadLetterStream,
		ProjectionBucket: cfg.Processor.ProjectionBucket,
		MaxBytes:         cfg.Stream.MaxBytes,
		MaxMsgs:          cfg.Stream.MaxMsgs,
		MaxAge:           cfg.Stream.MaxAge,
		SyncPolicy:       policy,
		SyncDescription:  desc,
		StoreDir:         storeDir,
		FreeBytes:        func() (uint64, error) { return bootstrap.FreeBytes(storeDir) },
		DiskHeadroom:     cfg.JetStream.DiskHeadroom,
		MaxStore:         cfg.JetStream.MaxFileStore,
		Build:            buildOrUnknown(cfg.Build),
		Monitoring:       monitoring(a.monitored.Load),
		Logger:           a.log.With("component", "admin"),
	})
	if cfg.Admin.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return withHint(fmt.Errorf("admin listener %s: %w", cfg.Admin.Listen, err),
			fmt.Sprintf("another process listens on %s; stop it or set admin.listen (\"\" disables the admin listener)", cfg.Admin.Listen))
	}
	tcfg, err := natsconf.LoadTLS("admin.tls", cfg.Admin.TLS, false)
	if err != nil {
		ln.Close()
		return err
	}
	// A cap on open admin connections, below the process's file
	// descriptors: a flood of idle keep-alives cannot starve nats of
	// descriptors for its clients and stores.
	ln = limitListener(ln, maxAdminConns)
	if tcfg != nil {
		ln = tls.NewListener(ln, tcfg)
	}
	a.adminLn = ln
	hs := &http.Server{
		Handler:           a.admin,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.Admin.ReadTimeout,
		WriteTimeout:      cfg.Admin.WriteTimeout,
		IdleTimeout:       cfg.Admin.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.With("component", "admin").Handler(), slog.LevelWarn),
	}
	if hs.ReadHeaderTimeout > cfg.Admin.ReadTimeout && cfg.Admin.ReadTimeout > 0 {
		hs.ReadHeaderTimeout = cfg.Admin.ReadTimeout
	}
	a.httpServer = hs
	served := make(chan struct{}) // closed once Serve returned, with serveErr
	var serveErr error
	go func() { serveErr = hs.Serve(ln); close(served) }()
	a.sup.add(component{name: "admin listener " + cfg.Admin.Listen,
		run: func(ctx context.Context) error {
			select {
			case <-served:
				return serveErr
			case <-ctx.Done():
				return nil
			}
		},
		// After the intake's graceful shutdown this closes nothing more;
		// after a failed start it closes the listener and its connections.
		stop: func(context.Context) error {
			hs.Close()
			<-served
			return nil
		}})
	a.log.Info("admin listening", "addr", ln.Addr().String(), "token", cfg.Admin.Token != "", "tls", tcfg != nil)
	return nil
}

// openAdmin gives the admin API its backend; the admin listener's intake
// is the last component to start and the first to stop: Close stops it
// taking requests and finishes those in flight before anything else
// stops.
func (a *Appliance) openAdmin(context.Context) error {
	b := admin.Backend{NotFound: ErrNotFound, JS: a.js, DeadLetters: a, Orders: a, History: historyBackend{a}, Validation: a.validationStats, Checks: a.checks, Recovery: a.rc.Notes(), Topology: a.topology, Backup: a.backupTar,
		Publish: func(ctx context.Context, subject string, h nats.Header, data []byte) (*jetstream.PubAck, error) {
			return a.publishMsg(ctx, subject, h, data)
		},
		Guard:   a.guardStats,
		Rebuild: rebuildBackend{a},
	}
	if c := a.commit; c != nil {
		b.Ingest = func() *status.IngestStats {
			st := c.Status()
			st.Waiting = a.admit.Counts().Waiting
			return st
		}
	}
	if a.proc != nil {
		b.Processor = a
	}
	a.admin.SetBackend(b)
	if hs := a.httpServer; hs != nil {
		a.sup.add(component{name: "admin intake", stop: func(ctx context.Context) error {
			if err := hs.Shutdown(ctx); err != nil {
				hs.Close()
				return fmt.Errorf("admin listener %s: shutdown: %w", a.cfg.Admin.Listen, err)
			}
			return nil
		}})
	}
	return nil
}

// startCommitter follows group commit (durability "group-commit"), which
// the embedded nats-server runs in its file store: a failed sync stops the
// appliance, and the next start reads the store back from disk.
func (a *Appliance) startCommitter(context.Context) error {
	if !a.cfg.groupCommit() {
		return nil
	}
	c := ingest.NewCommitter(a.cfg.Stream.Name)
	a.commit = c
	a.sup.add(component{name: "group commit",
		run: func(ctx context.Context) error {
			select {
			case <-c.Failed():
				return c.Err()
			case <-ctx.Done():
				return nil
			}
		}})
	return nil
}

// startNATS starts the embedded server, watched: when it stops on its
// own, or switches JetStream off, the appliance fails.
func (a *Appliance) startNATS(ctx context.Context) error {
	id, err := natsconf.NewIdentity()
	if err != nil {
		return err
	}
	a.id = id
	ec, err := a.cfg.embeddedConfig(a.log, id)
	if err != nil {
		return err
	}
	if c := a.commit; c != nil {
		ec.GroupCommit, ec.GroupCommitRound, ec.GroupCommitFailed = true, c.Round, c.Fail
	}
	a.admit = a.newAdmission()
	ec.Admit = a.admit.Admit
	if a.cfg.Cluster.Enabled() {
		// A producer's publish waits out the stream's leader election.
		ec.AwaitInterest = ingest.AwaitElection(StreamAccount, a.cfg.Stream.Subjects)
	}
	a.nats = natsrun.NewServer(func(srv *embedded.Server) {
		a.monitored.Store(srv.NATSServer())
	})
	// The store guard hears nats' errors from its start on; it runs once
	// the internal connection exists (startStoreGuard).
	a.guard = natsrun.NewStoreGuard(natsrun.GuardConfig{StoreDir: a.report.StoreDir, Stream: a.cfg.Stream.Name, Subjects: a.cfg.Stream.Subjects,
		Headroom: a.cfg.JetStream.DiskHeadroom}, a.nats, a.log)
	ec.OnError = func(msg string) {
		if c := a.commit; c != nil && c.Err() != nil {
			// A failed group commit sync is final: the appliance stops
			// (startCommitter), rather than the guard restarting nats.
			return
		}
		a.guard.OnNATSError(msg)
		if strings.Contains(msg, "Remote server has a duplicate name") {
			a.dupName.Store(&msg)
		}
	}
	a.nats.Config = ec
	t0 := time.Now()
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return withHint(err, startHint(a.cfg, err))
	}
	a.nats.Set(srv)
	guard := a.guard
	a.sup.add(component{name: "nats", run: func(ctx context.Context) error { return a.nats.Watch(ctx, guard.Restarting) }, stop: a.nats.Stop})
	a.rc.StartupProblems(a.server().StartupProblems())
	policy, desc := a.cfg.DurabilityPolicy()
	a.log.Info("nats ready", "client_url", a.clientURLForLog(), "took", time.Since(t0).Round(time.Millisecond).String(),
		"durability", policy, "meaning", desc)
	if a.cfg.Cluster.Enabled() {
		if err := a.waitForMetaLeader(ctx); err != nil {
			return err
		}
	}
	return nil
}

// connectInternal opens the internal connection (declare, the admin API,
// lookups) and the processor's.
func (a *Appliance) connectInternal(context.Context) (err error) {
	if a.internal, a.js, err = a.connect("orderstore-internal", natsconf.InternalInbox); err != nil {
		return err
	}
	a.processor, a.pjs, err = a.connect("orderstore-processor", natsconf.InternalInbox)
	return err
}

// startStoreGuard runs the store guard: it refuses publishes while the
// store cannot write and restarts nats once it can. It stops before nats
// does (no restart from there on).
func (a *Appliance) startStoreGuard(context.Context) error {
	a.guard.SetConn(a.internal.Conn)
	a.sup.add(component{name: "store guard", run: a.guard.Run, stop: a.guard.Stop})
	return nil
}

// guardStats is what admission and the durable guard refused or held back.
func (a *Appliance) guardStats() *status.GuardStats {
	g := &status.GuardStats{}
	if ad := a.admit; ad != nil {
		c := ad.Counts()
		g.Refused, g.HeldBack, g.Overloaded = c.Refused, c.Held, c.Overloaded
	}
	if a.dguard != nil {
		g.ForeignConsumerRequests = a.dguard.refused.Load()
	}
	return g
}

// newEpoch is a run's EpochHeader value: 12 random letters and digits.
func newEpoch() string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var b [12]byte
	crand.Read(b[:])
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b[:])
}

// server returns the embedded server running now.
func (a *Appliance) server() *embedded.Server { return a.nats.Current() }

// connect opens one of orderstore's own connections, in-process, with
// replies on inbox, as a component: it reconnects when the server drops
// it (a slow consumer, a protocol error, an operator's kick, a restart by
// the store guard) and closes only when it cannot, which fails the
// appliance; its stop step drains it.
func (a *Appliance) connect(name, inbox string) (conn, jetstream.JetStream, error) {
	log := a.log.With("component", "nats-client", "conn", name)
	c := conn{closed: make(chan struct{})}
	// In-process through the appliance, so a reconnect reaches the server
	// running now (the store guard may have restarted it). Reconnects give
	// up after about 5 minutes without a server, the longest the guard
	// gives a restart (stream recovery on a large store).
	opts := []nats.Option{nats.InProcessServer(a), nats.Name(name),
		nats.MaxReconnects(1200), nats.ReconnectWait(250 * time.Millisecond),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if !a.sup.stopping() {
				log.Warn("internal connection lost, reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("internal connection reconnected") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("internal connection", "err", err) }),
	}
	opts = append(opts, a.id.Options(inbox)...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return conn{}, nil, fmt.Errorf("connect in-process (%s): %w", name, err)
	}
	c.Conn = nc
	a.sup.add(component{name: "connection " + name,
		run: func(ctx context.Context) error {
			select {
			case <-c.closed:
				return fmt.Errorf("internal nats connection %q closed and could not reconnect", name)
			case <-ctx.Done():
				return nil
			}
		},
		stop: func(ctx context.Context) error { return drain(ctx, nc, c.closed) }})
	// A write whose ack never comes (its stream's leader died with it)
	// fails after internalAckTimeout, to be retried, instead of holding
	// the processor's partition for good.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(internalAckTimeout))
	if err != nil {
		return conn{}, nil, fmt.Errorf("jetstream (%s): %w", name, err)
	}
	return c, js, nil
}

// internalAckTimeout bounds the wait for the ack of an internal
// connection's asynchronous write (the projection's).
const internalAckTimeout = 10 * time.Second

// checks are the readiness checks of what admin cannot see: both internal
// connections are up, and the processor's ack floor moves.
func (a *Appliance) checks(ctx context.Context) []status.Check {
	conns := status.Check{Name: "connections", OK: true}
	for _, c := range []struct {
		name string
		nc   *nats.Conn
	}{{"admin", a.internal.Conn}, {"processor", a.processor.Conn}} {
		if c.nc != nil && !c.nc.IsConnected() {
			conns.OK = false
			conns.Reason = strings.TrimPrefix(conns.Reason+"; ", "; ") + fmt.Sprintf("the %s's internal connection is %s", c.name, c.nc.Status())
		}
	}
	out := []status.Check{conns, a.guard.Check()}
	if err := a.sup.Err(); err != nil {
		// A part that stopped takes readiness with it.
		out = append(out, status.Check{Name: "components", Reason: err.Error() +
			": the appliance stopped working; close it and start it again (orderstore run exits non-zero, so that systemd restarts it)"})
	}
	if a.commit != nil {
		c := status.Check{Name: "durability", OK: true}
		if err := a.commit.Err(); err != nil {
			c.OK, c.Reason = false, err.Error()+"; restart orderstore (it exits non-zero so that systemd does)"
		}
		out = append(out, c)
	}
	if a.cfg.Cluster.Enabled() {
		out = append(out, a.clusterCheck(ctx))
	}
	if a.proc != nil {
		pr := a.proc.Progress()
		c := status.Check{Name: "progress", OK: true}
		if a.pause.paused() {
			c.Reason = "paused while a projection rebuild takes over"
		} else if !pr.StuckSince.IsZero() && time.Since(pr.StuckSince) > a.stallAfter {
			c.OK = false
			c.Reason = fmt.Sprintf("the ack floor has been stuck at %d for %s with %d events outstanding, longer than an event can take (max_deliver × (ack_wait + longest backoff) = %s): an event cannot be settled; see the log and `orderstore dlq list`",
				pr.AckFloor, time.Since(pr.StuckSince).Round(time.Second), pr.Outstanding, a.stallAfter)
		}
		out = append(out, c)
	}
	return out
}

// declare declares what the config names and runs the recovery check.
func (a *Appliance) declare(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if a.cfg.Cluster.Enabled() {
		// Peers may still be electing stream leaders: retry for longer.
		cancel()
		dctx, cancel = context.WithTimeout(ctx, clusterDeclareTimeout)
	}
	defer cancel()
	a.rc.JS = a.js
	if err := a.rc.Declare(dctx, a.cfg.Cluster.Enabled()); err != nil {
		return err
	}
	st := a.cfg.Stream
	a.log.Info("stream ready", "stream", st.Name, "subjects", st.Subjects, "max_age", duration.Format(st.MaxAge),
		"max_bytes", bytesize.Format(st.MaxBytes), "max_msgs", st.MaxMsgs, "discard", st.Discard,
		"duplicate_window", duration.Format(st.DuplicateWindow))
	return nil
}

// checkStore runs what start-up checks after the declaration: the
// projection's high-water mark against the stream (lost sequences
// forgotten), this run's epoch recorded, the metadata nats wrote made
// durable.
func (a *Appliance) checkStore(ctx context.Context) error {
	if err := a.clusterRetry(ctx, "projection", func(c context.Context) (err error) {
		a.proj, err = NewProjection(c, a.js, a.cfg)
		return err
	}); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := a.rc.HighWater(dctx, a.proj)
	cancel()
	if err != nil {
		return err
	}
	// This run's epoch and where it begins, before any event of it is
	// stored (a hub checks each edge's epochs: internal/edgehub).
	if err := a.recordEpoch(ctx); err != nil {
		return err
	}
	// nats writes the metadata of what it declared (meta.inf, the
	// consumer's state) without fsync: make it durable before any event is
	// acknowledged.
	return a.syncMetadata(ctx)
}

// recordEpoch records where this run's epoch begins in the stream's
// metadata (not in a cluster: no hub sources a cluster by epoch).
func (a *Appliance) recordEpoch(ctx context.Context) error {
	if a.cfg.Cluster.Enabled() {
		return nil
	}
	return edgehub.RecordEpoch(ctx, a.js, a.cfg.Stream.Name, a.epoch)
}

// startProcessor runs the processor (unless disabled): its stop lets it
// finish and ack the events it holds.
func (a *Appliance) startProcessor(ctx context.Context) (err error) {
	cfg := a.cfg
	if !cfg.Processor.Enabled {
		return nil
	}
	// The built-in projection; or a custom handler, with the projection
	// beside it keeping the history index when there is room for one.
	proj, err := NewProjection(ctx, a.pjs, cfg)
	if err != nil {
		return err
	}
	var h processor.Handler = proj
	if cfg.Processor.Handler != nil {
		h = cfg.Processor.Handler
		if cfg.historyMaxBytes() > 0 {
			h = processor.WithHistory(h, proj)
		}
	}
	pc := cfg.ProcessorConfig(h)
	// Nobody else may bind it (the durable guard): a gap in what it is
	// delivered is read back from the stream.
	pc.Exclusive = true
	// In a cluster every node runs a processor on the durable: what a
	// sibling was delivered is read back only if it was not applied.
	pc.Shared = cfg.Cluster.Enabled()
	if a.rc.ConsumerReset() {
		// Declared again from the start: what lies below the stream's
		// first sequence was processed by the consumer before.
		if st, err := a.js.Stream(ctx, cfg.DeclareSpec().ConsumerStream()); err == nil && st.CachedInfo().State.FirstSeq > 0 {
			pc.SeenUpTo = st.CachedInfo().State.FirstSeq - 1
		}
	}
	proc, err := processor.New(a.pjs, pc)
	if err != nil {
		return err
	}
	// In a cluster the consumer's Raft group may still be electing its
	// leader: wait until it answers, so the processor starts on it.
	if err := a.clusterRetry(ctx, "processor", func(c context.Context) error {
		_, err := a.pjs.Consumer(c, pc.Stream, pc.Durable)
		return err
	}); err != nil {
		return err
	}
	// The longest an event can rightly hold the ack floor: every delivery
	// waits ack_wait, then the longest backoff.
	a.stallAfter = time.Duration(cfg.Processor.MaxDeliver) * (cfg.Processor.AckWait + slices.Max(append([]time.Duration{0}, cfg.Processor.Backoff...)))
	a.proc, a.procHandler = proc, h
	a.pause = &pausable{proc: proc}
	a.sup.add(component{name: "processor", run: a.pause.run})
	return nil
}

// startHubWatch runs a hub's source watcher, with a connection of its own:
// its requests to the edges are answered over the leaf links, on an inbox
// prefix that is the only one of orderstore's to cross.
func (a *Appliance) startHubWatch(context.Context) (err error) {
	if !a.cfg.Hub.Enabled() {
		return nil
	}
	if a.hubwatch, _, err = a.connect("orderstore-hubwatch", natsconf.HubWatchInbox); err != nil {
		return err
	}
	// With group commit the watcher's writes are acked once synced, as in
	// "always"; its metadata (the sources' config) is synced as written.
	syncMeta := func(context.Context) error { return nil }
	a.hub = edgehub.New(edgehub.Config{Edges: a.cfg.Hub.Edges, Stream: a.cfg.Stream.Name, Spec: a.cfg.DeclareSpec(), DeadLetterStream: a.cfg.Processor.DeadLetterStream,
		DeadLetterPrefix: deadLetterSubjectPrefix(a.cfg.Processor.DeadLetterStream), EpochHeader: EpochHeader},
		a.js, a.hubwatch.Conn, syncMeta, a.log)
	a.sup.add(component{name: "hub watcher", run: a.hub.Run})
	return nil
}

// startDurableGuard answers clients' requests on the processor's durable
// (and a hub's aggregate consumer): they are orderstore's alone.
func (a *Appliance) startDurableGuard(context.Context) (err error) {
	s, d, ok := a.cfg.natsInput().ProtectedConsumers()
	if !ok {
		return nil
	}
	if a.dguard, err = startDurableGuard(a.internal.Conn, s, d, a.log.With("component", "durable-guard")); err != nil {
		return err
	}
	g := a.dguard
	a.sup.add(component{name: "durable guard", stop: func(context.Context) error { g.Close(); return nil }})
	return nil
}

// ClientURL returns the URL NATS clients connect to, with the real port
// even when Server.Port was -1.
func (a *Appliance) ClientURL() string { return a.server().ClientURL() }

// clientURLForLog is ClientURL as a client must spell it: tls:// when
// the client port requires TLS (nats.go dials nats:// in plaintext first).
func (a *Appliance) clientURLForLog() string {
	u := a.ClientURL()
	if a.cfg.Server.TLS.CertFile != "" {
		if rest, ok := strings.CutPrefix(u, "nats://"); ok {
			return "tls://" + rest
		}
	}
	return u
}

// InProcessConn returns a connection to the embedded server that bypasses
// TCP, making *Appliance a nats.InProcessConnProvider:
//
//	nc, err := nats.Connect("", nats.InProcessServer(app))
func (a *Appliance) InProcessConn() (net.Conn, error) { return a.server().InProcessConn() }

// AdminAddr returns the admin listener's address (host:port, with the real
// port when Admin.Listen asked for port 0), or "" when it is disabled.
func (a *Appliance) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Recovery returns what start-up found and did about a damaged store (nats'
// recovery warnings, a consumer declared again, lost sequence numbers);
// empty after a clean start.
func (a *Appliance) Recovery() []string { return a.rc.Notes() }

// StoreDir returns the absolute store directory.
func (a *Appliance) StoreDir() string { return a.report.StoreDir }

// Config returns the configuration the appliance runs with.
func (a *Appliance) Config() Config { return a.cfg }

// Handler returns the admin HTTP handler (health, metrics, API, dashboard),
// for a program that serves it on a listener of its own.
func (a *Appliance) Handler() http.Handler { return a.admin }

// Done is closed when the appliance stopped running: a part failed (see
// [Appliance.Wait]) or Close stopped it.
func (a *Appliance) Done() <-chan struct{} { return a.sup.done }

// Wait blocks until the appliance stops. It returns the error of the part
// that failed (nats stopped, the processor's consumer vanished, the admin
// listener failed), or nil after Close. After a failure, call Close to
// stop the rest and release the store.
func (a *Appliance) Wait() error {
	<-a.sup.done
	return a.sup.Err()
}

// Ready reports whether the appliance is ready: JetStream answers, its
// stream, dead-letter stream, projection bucket and consumer exist as
// declared, and the processor runs. The error names every failed check.
// It is what /readyz serves.
func (a *Appliance) Ready(ctx context.Context) error {
	status, checks := a.admin.Readiness(ctx)
	if status == "ready" {
		return nil
	}
	var reasons []string
	for _, c := range checks {
		if !c.OK {
			reasons = append(reasons, c.Name+": "+c.Reason)
		}
	}
	return fmt.Errorf("orderstore %s: %s", status, strings.Join(reasons, "; "))
}

// Stats returns the processor's counters (zero when it is disabled).
func (a *Appliance) Stats() Stats {
	if a.proc == nil {
		return processor.Stats{}
	}
	return a.proc.Stats()
}

// Lag returns how far the processor's consumer is behind the stream.
func (a *Appliance) Lag(ctx context.Context) (Lag, error) {
	if a.proc == nil {
		return processor.LagInfo{}, ErrProcessorDisabled
	}
	return processor.Lag(ctx, a.js, a.cfg.DeclareSpec().ConsumerStream(), a.cfg.Processor.Durable)
}

// Order returns an order's projected state; an unknown or invalid id
// matches [ErrNotFound].
func (a *Appliance) Order(ctx context.Context, id string) (Order, error) {
	if !processor.ValidOrderID(id) {
		return processor.Order{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	proj, done := a.projFor(ctx, id)
	o, err := proj.Get(ctx, id)
	done()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return processor.Order{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	return o, err
}

// DeadLetters returns up to limit dead letters from sequence from on, and
// the sequence to continue from (0 at the end).
func (a *Appliance) DeadLetters(ctx context.Context, from uint64, limit int) ([]DeadLetter, uint64, error) {
	return processor.ListDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, from, limit)
}

// LatestDeadLetters returns up to n of the most recent dead letters,
// oldest first.
func (a *Appliance) LatestDeadLetters(ctx context.Context, n int) ([]DeadLetter, error) {
	return processor.LatestDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, n)
}

// ReplayDeadLetter republishes dead letter seq to its original subject
// and deletes it; it returns the event's new stream sequence. An unknown
// seq matches [ErrNotFound].
func (a *Appliance) ReplayDeadLetter(ctx context.Context, seq uint64) (uint64, error) {
	// Published as a producer's event is (with group commit: acknowledged
	// once durable, before the dead letter is removed), and refused when
	// the original subject is too long for orderstore's own connection.
	n, err := processor.Replay(ctx, guardedJetStream{a.js, a}, a.cfg.Processor.DeadLetterStream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	}
	return n, err
}

// Close stops the appliance and waits. It stops the components [Start]
// started, last started first, each completely (its stop step, then its
// goroutines) before the next:
//
//  1. the admin listener's intake: it stops taking requests and finishes
//     those in flight;
//  2. the durable guard;
//  3. a hub's source watcher, then its connection drains;
//  4. the projection rebuild: a fold under way stops, and the next start
//     goes on from its last durable position;
//  5. the processor: it stops fetching, finishes and acks the events it
//     holds;
//  6. the store guard: no restart of nats from here on (one under way is
//     waited for);
//  7. the processor's connection drains, then the internal one;
//  8. nats-server shuts down (Shutdown + WaitForShutdown: every stream
//     flushed and closed, group commit syncing and answering every
//     publish it holds first);
//  9. group commit's watch stops;
//  10. the admin listener closes;
//  11. after a clean stop the store is marked stopped (the next start
//     skips the crash checks), and the store lock is released.
//
// (TestCloseDocIsTheStepTable checks this list against startSteps.)
//
// ctx bounds each step's wait: when it ends, what is left in flight is
// cut off (unacked events are redelivered on the next start) and the
// error says which step it cut. nats' shutdown is always waited for,
// because releasing the lock while nats still writes would let a second
// process corrupt the store. Close is idempotent and safe to call
// concurrently: every call waits for the first and returns its result.
func (a *Appliance) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.closeErr = a.sup.stop(ctx)
		close(a.closeDone)
	})
	<-a.closeDone
	return a.closeErr
}

// drain drains nc and waits for it to close, at most 10s or until ctx
// ends; then it closes it.
func drain(ctx context.Context, nc *nats.Conn, closed <-chan struct{}) error {
	if nc.IsClosed() {
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) {
			return nil // nothing in flight to drain
		}
		return fmt.Errorf("drain internal connection: %w", err)
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-closed:
		return nil
	case <-t.C:
		nc.Close()
		return errors.New("drain internal connection: not drained after 10s")
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("drain internal connection: %w", ctx.Err())
	}
}

func buildOrUnknown(b status.BuildInfo) status.BuildInfo {
	for _, f := range []*string{&b.Version, &b.Commit, &b.Date, &b.GoVersion} {
		if *f == "" {
			*f = "unknown"
		}
	}
	if b.NATSServer == "" {
		b.NATSServer = server.VERSION
	}
	return b
}

// Durability modes of [JetStreamConfig.Durability].
const (
	DurabilityGroupCommit = "group-commit"
	DurabilityAlways      = "always"
	DurabilityInterval    = "interval"
)

// DurabilityMode is the durability in force: JetStream.Durability, or,
// when that is "", "interval" with a SyncInterval, else "group-commit" on
// a single node and "always" in a cluster.
func (c Config) DurabilityMode() string {
	switch {
	case c.JetStream.Durability != "":
		return c.JetStream.Durability
	case c.JetStream.SyncInterval > 0:
		return DurabilityInterval
	case c.Cluster.Enabled():
		return DurabilityAlways
	}
	return DurabilityGroupCommit
}

// groupCommit reports whether orderstore acks producers itself, after a
// sync (Durability "group-commit").
func (c Config) groupCommit() bool { return c.DurabilityMode() == DurabilityGroupCommit }

// relaxedSync reports whether nats syncs on a timer ("interval"), so that
// a power cut may lose acknowledged events.
func (c Config) relaxedSync() bool { return c.DurabilityMode() == DurabilityInterval }

// natsSyncInterval is the embedded server's sync_interval: 0 (always) for
// "always", the interval for "interval", and nats' own default (2 min) for
// group commit, where orderstore's syncs make events durable.
func (c Config) natsSyncInterval() time.Duration {
	switch c.DurabilityMode() {
	case DurabilityInterval:
		return c.JetStream.SyncInterval
	case DurabilityGroupCommit:
		return 2 * time.Minute
	}
	return 0
}

// DurabilityPolicy returns the durability mode ("group-commit", "always" or
// "interval 1s") and its one-line meaning, as the startup log, /readyz and
// `orderstore status` state it.
func (c Config) DurabilityPolicy() (mode, description string) {
	switch c.DurabilityMode() {
	case DurabilityGroupCommit:
		return DurabilityGroupCommit, "acked once one sync of the store made the event durable (group commit): an acknowledged event survives power loss"
	case DurabilityAlways:
		return DurabilityAlways, "fsync before every ack: an acknowledged event survives power loss"
	}
	d := duration.Format(c.JetStream.SyncInterval)
	return DurabilityInterval + " " + d, fmt.Sprintf("fsync every %s: a process crash loses nothing, power loss can lose up to %s of acknowledged events", d, d)
}

func startHint(cfg Config, err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address already in use") || strings.Contains(msg, "bind"):
		// The listener whose address the error names.
		for _, l := range []struct{ key, addr string }{{"leafnode.listen", cfg.LeafNode.Listen}, {"cluster.listen", cfg.Cluster.Listen}} {
			if _, port, err := net.SplitHostPort(l.addr); err == nil && port != "0" && strings.Contains(msg, ":"+port) {
				return fmt.Sprintf("another process listens on %s; stop it or set %s to a free host:port", l.addr, l.key)
			}
		}
		return fmt.Sprintf("another process listens on %s:%d; stop it or set server.port (or -1 for a random port)", cfg.Server.Host, cfg.Server.Port)
	case strings.Contains(msg, "storage directory") || strings.Contains(msg, "store"):
		return "check jetstream.store_dir: it must be a writable directory"
	}
	return ""
}

// Hinted is an error that says what to do about it: the remedy the CLI
// prints on a "hint:" line. Every error of Start, Close and the
// appliance's methods that has a remedy carries one somewhere in its
// chain (orderstore's own, and those of bootstrap's checks):
//
//	var h orderstore.Hinted
//	if errors.As(err, &h) {
//		fmt.Println("hint:", h.Hint())
//	}
type Hinted interface {
	error
	Hint() string
}

// WithHint returns err with hint attached (err itself if hint is empty):
// for a program that wraps orderstore and adds remedies of its own.
func WithHint(err error, hint string) error { return withHint(err, hint) }

// withHint attaches the remedy the CLI prints on a "hint:" line.
func withHint(err error, h string) error { return hint.Wrap(err, h) }

// monitoring mounts nats-server's own monitoring endpoints; until the
// server exists they answer 503.
func monitoring(srv func() *server.Server) map[string]http.HandlerFunc {
	wrap := func(h func(*server.Server) http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s := srv()
			if s == nil {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			h(s)(w, r)
		}
	}
	return map[string]http.HandlerFunc{
		"/varz":     wrap(func(s *server.Server) http.HandlerFunc { return s.HandleVarz }),
		"/jsz":      wrap(func(s *server.Server) http.HandlerFunc { return s.HandleJsz }),
		"/connz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleConnz }),
		"/healthz":  wrap(func(s *server.Server) http.HandlerFunc { return s.HandleHealthz }),
		"/subsz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleSubsz }),
		"/accountz": wrap(func(s *server.Server) http.HandlerFunc { return s.HandleAccountz }),
		"/leafz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleLeafz }),
		"/routez":   wrap(func(s *server.Server) http.HandlerFunc { return s.HandleRoutez }),
	}
}

// adminHosts are the names a request's Host may carry besides IP addresses
// and localhost: allowed_hosts, and the name in admin.listen if it is one.
func adminHosts(a AdminConfig) []string {
	hosts := append([]string(nil), a.AllowedHosts...)
	if h, _, err := net.SplitHostPort(a.Listen); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	return hosts
}

// maxAdminConns caps the admin listener's open connections.
const maxAdminConns = 256

// limitListener accepts at most n connections at a time; the next waits
// until one closes (net/http's Serve retries Accept).
func limitListener(l net.Listener, n int) net.Listener {
	return &limitedListener{Listener: l, sem: make(chan struct{}, n)}
}

type limitedListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
