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
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/processor"
)

// ErrNotFound is matched (errors.Is) by the errors of [Appliance.Order],
// [Appliance.ReplayDeadLetter] and their kin for what does not exist.
var ErrNotFound = admin.ErrNotFound

// ErrProcessorDisabled is returned by [Appliance.Lag] when
// Processor.Enabled is false.
var ErrProcessorDisabled = errors.New("orderstore: the processor is disabled")

// Appliance is a running, ready orderstore: the store lock, the embedded
// nats-server with its streams declared and verified, the processor and the
// admin listener. It exists only once all of them run; see [Start].
type Appliance struct {
	cfg    Config
	log    *slog.Logger
	lock   *bootstrap.Lock
	report bootstrap.Report

	// The embedded server; the store guard may restart it (a new *Server
	// on the same store and port), so read it with server().
	srvMu      sync.Mutex
	srv        *embedded.Server
	srvChanged chan struct{} // closed and replaced when srv is replaced
	ec         embedded.Config
	id         *internalIdentity             // how orderstore's own connections sign in
	epoch      string                        // this run's EpochHeader value
	backupMu   sync.Mutex                    // one backup at a time
	hub        *hubWatch                     // a hub's source watcher; nil elsewhere
	dupName    atomic.Pointer[string]        // nats' log line about another node with this node's name
	nsrv       atomic.Pointer[server.Server] // for the monitoring handlers, set once nats runs
	guard      *storeGuard
	// Two internal connections, so that neither part shares the other's
	// fate: nc for declare, the admin API and lookups, pnc for the
	// processor and its projection writes.
	nc, pnc *nats.Conn
	js, pjs jetstream.JetStream
	// Group commit (durability "group-commit"): the store's sync; nil in
	// other modes. The ingest service takes every producer's publish in
	// every mode, on a connection of its own.
	commit        *committer
	ing           *ingest
	inc           *nats.Conn
	incClosed     chan struct{}
	ingLive       atomic.Pointer[ingest] // ing, for the connection's handlers
	dguard        *durableGuard          // answers clients' requests on the processor's durable
	wnc           *nats.Conn             // the hub watcher's, with an inbox of its own; nil elsewhere
	wncClosed     chan struct{}
	proj          *processor.Projection // reads, on nc
	proc          *processor.Processor  // nil when disabled
	stallAfter    time.Duration
	recovery      []string // what start-up found and did about a damaged store
	unclean       bool     // the last run did not stop cleanly
	startFailed   bool     // Start failed: keep the run marker
	consumerReset bool     // start-up declared the consumer again from the start

	adm      *admin.Server
	hs       *http.Server // nil when the admin listener is disabled
	adminLn  net.Listener
	serveErr chan error

	groupStarted bool
	procCancel   context.CancelFunc
	procDone     chan struct{} // closed once the processor's Run returned
	ncClosed     chan struct{} // closed once nc closed
	pncClosed    chan struct{} // closed once pnc closed

	closing chan struct{} // closed when Close begins
	done    chan struct{} // closed when the run group returned
	runErr  error

	closeOnce sync.Once
	closeDone chan struct{}
	closeErr  error
}

// Start runs the start-up in order (README.md, "Start-up, in order"): validate cfg, preflight
// and lock the store, open the admin listener (so a busy port fails at once
// and /readyz answers "recovering" during a long recovery), start nats,
// declare the stream, dead-letter stream, projection bucket and consumer,
// run the recovery check, start the processor. It returns once the
// processor consumes and every part runs, or with an error naming what
// failed; on error everything it started is stopped and the lock released.
//
// ctx bounds start-up only (a canceled ctx aborts it); stop a running
// appliance with [Appliance.Close].
func Start(ctx context.Context, cfg Config) (_ *Appliance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Stream.Subjects = append([]string(nil), cfg.Stream.Subjects...)
	log := loggerOrDiscard(cfg.Logger)
	a := &Appliance{
		cfg:        cfg,
		log:        log,
		serveErr:   make(chan error, 1),
		procDone:   make(chan struct{}),
		ncClosed:   make(chan struct{}),
		pncClosed:  make(chan struct{}),
		incClosed:  make(chan struct{}),
		wncClosed:  make(chan struct{}),
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
		closeDone:  make(chan struct{}),
		srvChanged: make(chan struct{}),
	}
	a.guard = newStoreGuard(a)
	a.epoch = newEpoch()
	defer func() {
		if err != nil {
			a.startFailed = true // an interrupted start-up may have left work undone
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = errors.Join(err, a.stop(cctx))
		}
	}()

	// Preflight comes before the admin listener: a second instance on the
	// same store is told so, not that the admin port is busy.
	lock, rep, err := bootstrap.Preflight(cfg.preflightConfig())
	if err != nil {
		return nil, err
	}
	a.lock, a.report = lock, rep
	if err := a.markRunning(); err != nil {
		return nil, err
	}
	for _, w := range rep.Warnings {
		log.Warn("preflight", "warning", w)
	}
	if moved, err := migrateLegacyAccount(rep.StoreDir); err != nil {
		return nil, err
	} else if moved {
		log.Info("store moved to its account", "from", "jetstream/"+legacyAccount, "to", "jetstream/"+StreamAccount)
	}
	for _, w := range cfg.PlaintextWarnings() {
		log.Warn("PLAINTEXT LISTENER", "warning", w)
	}
	log.Info("preflight ok", "store_dir", rep.StoreDir, "lock", lock.Path(),
		"free_disk", bytesize.Format(int64(rep.FreeBytes)), "used", bytesize.Format(rep.UsedBytes),
		"max_file_store", bytesize.Format(cfg.JetStream.MaxFileStore))

	if err := a.startAdmin(); err != nil {
		return nil, err
	}
	if err := a.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := a.declare(ctx); err != nil {
		return nil, err
	}
	if err := a.clusterRetry(ctx, "projection", func(c context.Context) (err error) {
		a.proj, err = NewProjection(c, a.js, cfg)
		return err
	}); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = a.checkHighWater(dctx, cfg.DeclareSpec())
	cancel()
	if err != nil {
		return nil, err
	}
	// This run's epoch and where it begins, before any event of it is
	// stored (a hub checks each edge's epochs: edgeepoch.go).
	if err := a.recordEpoch(ctx); err != nil {
		return nil, err
	}
	// nats writes the metadata of what it declared (meta.inf, the
	// consumer's state) without fsync: make it durable before any event is
	// acknowledged.
	if err := a.syncMetadata(ctx); err != nil {
		return nil, err
	}
	if cfg.Processor.Enabled {
		var h processor.Handler = cfg.Processor.Handler
		if h == nil {
			if h, err = NewProjection(ctx, a.pjs, cfg); err != nil {
				return nil, err
			}
		}
		pc := cfg.ProcessorSpec(h)
		// Nobody else may bind it (the durable guard): a gap in what it
		// is delivered is read back from the stream.
		pc.Exclusive = true
		if a.consumerReset {
			// Declared again from the start: what lies below the stream's
			// first sequence was processed by the consumer before.
			if st, err := a.js.Stream(ctx, cfg.DeclareSpec().ConsumerStream()); err == nil && st.CachedInfo().State.FirstSeq > 0 {
				pc.SeenUpTo = st.CachedInfo().State.FirstSeq - 1
			}
		}
		if a.commit != nil {
			// Projection writes and dead letters are made durable before
			// their events are acked, so the consumer's ack floor is never
			// ahead of the projection after a power cut.
			pc.Sync = a.commit.SyncLazy
		}
		if a.proc, err = processor.New(a.pjs, pc); err != nil {
			return nil, err
		}
		// In a cluster the consumer's Raft group may still be electing
		// its leader: wait until it answers, so the processor starts on it.
		if err := a.clusterRetry(ctx, "processor", func(c context.Context) error {
			_, err := a.pjs.Consumer(c, pc.Stream, pc.Durable)
			return err
		}); err != nil {
			return nil, err
		}
		// The longest an event can rightly hold the ack floor: every
		// delivery waits ack_wait, then the longest backoff.
		a.stallAfter = time.Duration(cfg.Processor.MaxDeliver) * (cfg.Processor.AckWait + slices.Max(append([]time.Duration{0}, cfg.Processor.Backoff...)))
	}
	b := admin.Backend{JS: a.js, DeadLetters: a, Orders: a, Checks: a.checks, Recovery: a.recovery, Topology: a.topology, Backup: a.backupTar,
		Publish: func(ctx context.Context, subject string, h nats.Header, data []byte) (*jetstream.PubAck, error) {
			return a.publishMsg(ctx, subject, h, data)
		}}
	if a.commit != nil {
		b.Ingest = a.commit.ingestStats
	}
	if cfg.Hub.Enabled() {
		// Its requests to the edges are answered over the leaf links, on
		// an inbox prefix that is the only one of orderstore's to cross.
		if a.wnc, _, err = a.connectInbox("orderstore-hubwatch", a.wncClosed, hubWatchInboxPrefix); err != nil {
			return nil, err
		}
		a.hub = newHubWatch(a)
	}
	if a.proc != nil {
		b.Processor = a
	}
	if s, d, ok := cfg.protectedConsumers(); ok {
		if a.dguard, err = startDurableGuard(a.nc, s, d, log.With("component", "durable-guard")); err != nil {
			return nil, err
		}
	}
	if a.inc, _, err = a.connect("orderstore-ingest", a.incClosed); err != nil {
		return nil, err
	}
	if a.ing, err = startIngest(a.inc, a.ingestConfig(), log.With("component", "ingest")); err != nil {
		return nil, err
	}
	a.ingLive.Store(a.ing)
	if a.commit != nil {
		log.Info("group commit: producers are acked once a sync made their events durable",
			"sync", "fdatasync of the stream's last blocks; "+a.commit.how+" for the rest")
	}
	b.Guard = a.guardStats
	a.adm.SetBackend(b)

	a.runGroup()
	if a.proc != nil {
		select {
		case <-a.proc.Ready():
		case <-a.done:
			return nil, fmt.Errorf("start: %w", a.runErr)
		case <-ctx.Done():
			return nil, fmt.Errorf("start: processor: %w", ctx.Err())
		}
	}
	log.Info("orderstore ready", "client_url", a.clientURLForLog(), "admin", a.AdminAddr(), "store_dir", rep.StoreDir)
	return a, nil
}

// startAdmin builds the admin handler (readiness is served from it even
// when the listener is disabled) and, unless Admin.Listen is "", listens.
func (a *Appliance) startAdmin() error {
	cfg := a.cfg
	durable := ""
	if cfg.Processor.Enabled {
		durable = cfg.Processor.Durable
	}
	policy, desc := cfg.Durability()
	storeDir := a.report.StoreDir
	a.adm = admin.New(admin.Config{
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
		Monitoring:       monitoring(a.nsrv.Load),
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
	tcfg, err := loadTLS("admin.tls", cfg.Admin.TLS)
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
	a.hs = &http.Server{
		Handler:           a.adm,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.Admin.ReadTimeout,
		WriteTimeout:      cfg.Admin.WriteTimeout,
		IdleTimeout:       cfg.Admin.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.With("component", "admin").Handler(), slog.LevelWarn),
	}
	if a.hs.ReadHeaderTimeout > cfg.Admin.ReadTimeout && cfg.Admin.ReadTimeout > 0 {
		a.hs.ReadHeaderTimeout = cfg.Admin.ReadTimeout
	}
	go func() {
		if err := a.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.serveErr <- err
		}
	}()
	a.log.Info("admin listening", "addr", ln.Addr().String(), "token", cfg.Admin.Token != "", "tls", tcfg != nil)
	return nil
}

// startNATS starts the embedded server and the internal connection.
func (a *Appliance) startNATS(ctx context.Context) error {
	id, err := newInternalIdentity()
	if err != nil {
		return err
	}
	a.id = id
	ec, err := a.cfg.embeddedConfig(a.log, id)
	if err != nil {
		return err
	}
	ec.OnError = func(msg string) {
		a.guard.onNATSError(msg)
		if strings.Contains(msg, "Remote server has a duplicate name") {
			a.dupName.Store(&msg)
		}
	}
	t0 := time.Now()
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return withHint(err, startHint(a.cfg, err))
	}
	a.ec = ec
	a.setServer(srv)
	a.startupNotes()
	policy, desc := a.cfg.Durability()
	a.log.Info("nats ready", "client_url", a.clientURLForLog(), "took", time.Since(t0).Round(time.Millisecond).String(),
		"durability", policy, "meaning", desc)

	if a.cfg.Cluster.Enabled() {
		if err := a.waitForMetaLeader(ctx); err != nil {
			return err
		}
	}
	if a.nc, a.js, err = a.connect("orderstore-internal", a.ncClosed); err != nil {
		return err
	}
	if a.pnc, a.pjs, err = a.connect("orderstore-processor", a.pncClosed); err != nil {
		return err
	}
	if a.cfg.groupCommit() {
		msgs := filepath.Join(a.report.StoreDir, "jetstream", StreamAccount, "streams", a.cfg.Stream.Name, "msgs")
		if a.commit, err = newCommitter(a.report.StoreDir, msgs); err != nil {
			return err
		}
	}
	return nil
}

// guardStats is what the ingest service and the durable guard refused.
func (a *Appliance) guardStats() *admin.GuardStats {
	g := &admin.GuardStats{}
	if in := a.ing; in != nil {
		g.OverBudget, g.Unanswered, g.ForgedAnswers, g.ElectionRetries = in.refused.Load(), in.unanswer.Load(), in.forged.Load(), in.elections.Load()
		g.Overloaded, g.ReplyCollisions, g.IngestPauses = in.shed.Load(), in.collided.Load(), in.pauses.Load()
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
func (a *Appliance) server() *embedded.Server {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	return a.srv
}

// serverChanged returns a channel closed when the server is replaced.
func (a *Appliance) serverChanged() <-chan struct{} {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	return a.srvChanged
}

func (a *Appliance) setServer(srv *embedded.Server) {
	a.srvMu.Lock()
	defer a.srvMu.Unlock()
	a.srv = srv
	a.nsrv.Store(srv.NATSServer())
	if a.commit != nil {
		a.commit.ForceFull() // nats recovered the store again: sync all of it
	}
	close(a.srvChanged)
	a.srvChanged = make(chan struct{})
}

// connect opens an in-process connection that reconnects when the server
// drops it (a slow consumer, a protocol error, an operator's kick) and
// closes (for the watchdog) only when it cannot.
func (a *Appliance) connect(name string, closed chan struct{}) (*nats.Conn, jetstream.JetStream, error) {
	return a.connectInbox(name, closed, internalInboxPrefix)
}

// connectInbox is connect with replies on inbox.
func (a *Appliance) connectInbox(name string, closed chan struct{}, inbox string) (*nats.Conn, jetstream.JetStream, error) {
	log := a.log.With("component", "nats-client", "conn", name)
	// In-process through the appliance, so a reconnect reaches the server
	// running now (the store guard may have restarted it). Reconnects give
	// up after about 5 minutes without a server, the longest the guard
	// gives a restart (stream recovery on a large store).
	opts := []nats.Option{nats.InProcessServer(a), nats.Name(name),
		nats.MaxReconnects(1200), nats.ReconnectWait(250 * time.Millisecond),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if in := a.ingLive.Load(); in != nil && name == "orderstore-ingest" {
				// Answers to what it passed on come on this connection.
				in.failPending("the connection to the stream was lost")
			}
			select {
			case <-a.closing:
			default:
				log.Warn("internal connection lost, reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("internal connection reconnected") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("internal connection", "err", err) }),
	}
	opts = append(opts, a.id.options(inbox)...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect in-process (%s): %w", name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream (%s): %w", name, err)
	}
	return nc, js, nil
}

// checks are the readiness checks of what admin cannot see: both internal
// connections are up, and the processor's ack floor moves.
func (a *Appliance) checks(ctx context.Context) []admin.Check {
	conns := admin.Check{Name: "connections", OK: true}
	for _, c := range []struct {
		name string
		nc   *nats.Conn
	}{{"admin", a.nc}, {"processor", a.pnc}, {"ingest", a.inc}} {
		if c.nc != nil && !c.nc.IsConnected() {
			conns.OK = false
			conns.Reason = strings.TrimPrefix(conns.Reason+"; ", "; ") + fmt.Sprintf("the %s's internal connection is %s", c.name, c.nc.Status())
		}
	}
	out := []admin.Check{conns, a.guard.check()}
	if a.commit != nil {
		c := admin.Check{Name: "durability", OK: true}
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
		c := admin.Check{Name: "progress", OK: true}
		if !pr.StuckSince.IsZero() && time.Since(pr.StuckSince) > a.stallAfter {
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
	spec := a.cfg.DeclareSpec()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if a.cfg.Cluster.Enabled() {
		// Peers may still be electing stream leaders: retry for longer.
		cancel()
		dctx, cancel = context.WithTimeout(ctx, clusterDeclareTimeout)
	}
	defer cancel()
	var unloaded map[string]int64
	if !a.cfg.Cluster.Enabled() {
		// A clustered stream is loaded from the meta group's
		// assignments, asynchronously: its files say nothing yet.
		unloaded = a.notLoaded(dctx, spec)
	}
	if err := a.clusterRetry(dctx, "declare", func(ctx context.Context) error { return a.declareRecovering(ctx, spec) }); err != nil {
		return err
	}
	if err := a.checkReloaded(dctx, unloaded); err != nil {
		return err
	}
	err := a.clusterRetry(dctx, "recovery check", func(ctx context.Context) error { return bootstrap.Verify(ctx, a.js, spec) })
	if errors.Is(err, bootstrap.ErrAckFloorAhead) && spec.Consumer != nil {
		// The stream lost its last events (a power cut with a relaxed
		// sync_interval): a consumer past them would skip the events that
		// reuse their sequence numbers. Declare it again from the start;
		// the projection skips what it applied (and checkHighWater makes
		// it forget the lost sequence numbers).
		if derr := a.js.DeleteConsumer(dctx, spec.ConsumerStream(), spec.Consumer.Durable); derr != nil {
			return errors.Join(err, fmt.Errorf("reset consumer %q: %w", spec.Consumer.Durable, derr))
		}
		if derr := a.declareRecovering(dctx, spec); derr != nil {
			return derr
		}
		a.note("consumer %q was ahead of the stream (%v): the stream lost its last events; declared it again from the start of the stream, the projection skips what it already applied", spec.Consumer.Durable, err)
		a.consumerReset = true
		err = bootstrap.Verify(dctx, a.js, spec)
	}
	if err != nil {
		return err
	}
	st := a.cfg.Stream
	a.log.Info("stream ready", "stream", st.Name, "subjects", st.Subjects, "max_age", formatDuration(st.MaxAge),
		"max_bytes", bytesize.Format(st.MaxBytes), "max_msgs", st.MaxMsgs, "discard", st.Discard,
		"duplicate_window", formatDuration(st.DuplicateWindow))
	return nil
}

// runGroup starts the actors: the processor, the admin listener and
// watchdogs on nats and on the internal connection. When one of them
// fails, the group ends and [Appliance.Wait] returns its error; the
// staged stop is [Appliance.Close]'s.
func (a *Appliance) runGroup() {
	a.groupStarted = true
	var g run.Group
	{ // watchdog on the embedded server (and on the one the store guard starts in its place)
		stop := make(chan struct{})
		g.Add(func() error {
			for {
				srv, changed := a.server(), a.serverChanged()
				select {
				case <-srv.Done():
					if err := srv.Wait(); err != nil {
						return err
					}
					select { // stopped on purpose: by Close, or by the guard for a restart
					case <-changed:
					case <-a.closing:
						return nil
					case <-stop:
						return nil
					}
				case <-changed:
				case <-stop:
					return nil
				}
			}
		}, func(error) { close(stop) })
	}
	{ // watchdog on JetStream: nats switches it off on some store errors (a permission error) and says so only in a warning
		stop := make(chan struct{})
		g.Add(func() error {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return nil
				case <-t.C:
				}
				if a.guard.restarting.Load() {
					continue
				}
				if srv := a.server(); !srv.NATSServer().JetStreamEnabled() {
					select {
					case <-srv.Done(): // stopping: the other watchdog tells why
						continue
					case <-a.closing:
						return nil
					default:
					}
					return errors.New("nats switched JetStream off (see its log: a store that cannot be written?)")
				}
			}
		}, func(error) { close(stop) })
	}
	if a.commit != nil { // a failed sync stops the appliance: the next start reads the store back from disk
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case <-a.commit.Failed():
				return a.commit.Err()
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
	}
	if a.hub != nil { // a hub's source watcher
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error { return a.hub.run(ctx) }, func(error) { cancel() })
	}
	{ // the store guard: refuses publishes while the store cannot write, restarts nats once it can
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error { return a.guard.run(ctx) }, func(error) { cancel() })
	}
	for _, c := range []struct {
		name   string
		closed chan struct{}
	}{{"orderstore-internal", a.ncClosed}, {"orderstore-processor", a.pncClosed}, {"orderstore-ingest", a.incClosed}, {"orderstore-hubwatch", a.wncClosed}} {
		// watchdog on an internal connection: it reconnects by itself and
		// closes only when it cannot
		if c.name == "orderstore-hubwatch" && a.wnc == nil {
			continue
		}
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case <-c.closed:
				select {
				case <-a.closing:
					return nil
				default:
					return fmt.Errorf("internal nats connection %q closed and could not reconnect", c.name)
				}
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
	}
	if a.proc != nil {
		pctx, cancel := context.WithCancel(context.Background())
		a.procCancel = cancel
		g.Add(func() error {
			defer close(a.procDone)
			err := a.proc.Run(pctx)
			if err == nil && pctx.Err() == nil {
				err = errors.New("processor stopped")
			}
			return err
		}, func(error) { cancel() })
	} else {
		close(a.procDone)
	}
	if a.hs != nil {
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case err := <-a.serveErr:
				return fmt.Errorf("admin listener %s: %w", a.cfg.Admin.Listen, err)
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
	}
	go func() {
		err := g.Run()
		select {
		case <-a.closing:
			err = nil // stopped on request
		default:
			if err != nil {
				a.log.Error("appliance failed", "err", err)
			}
		}
		a.runErr = err
		close(a.done)
	}()
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
func (a *Appliance) Recovery() []string { return a.recovery }

// StoreDir returns the absolute store directory.
func (a *Appliance) StoreDir() string { return a.report.StoreDir }

// Config returns the configuration the appliance runs with.
func (a *Appliance) Config() Config { return a.cfg }

// Handler returns the admin HTTP handler (health, metrics, API, dashboard),
// for a program that serves it on a listener of its own.
func (a *Appliance) Handler() http.Handler { return a.adm }

// Done is closed when the appliance stopped running: a part failed (see
// [Appliance.Wait]) or Close stopped it.
func (a *Appliance) Done() <-chan struct{} { return a.done }

// Wait blocks until the appliance stops. It returns the error of the part
// that failed (nats stopped, the processor's consumer vanished, the admin
// listener failed), or nil after Close. After a failure, call Close to
// stop the rest and release the store.
func (a *Appliance) Wait() error {
	<-a.done
	return a.runErr
}

// Ready reports whether the appliance is ready: JetStream answers, its
// stream, dead-letter stream, projection bucket and consumer exist as
// declared, and the processor runs. The error names every failed check.
// It is what /readyz serves.
func (a *Appliance) Ready(ctx context.Context) error {
	status, checks := a.adm.Readiness(ctx)
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
func (a *Appliance) Stats() processor.Stats {
	if a.proc == nil {
		return processor.Stats{}
	}
	return a.proc.Stats()
}

// Lag returns how far the processor's consumer is behind the stream.
func (a *Appliance) Lag(ctx context.Context) (processor.LagInfo, error) {
	if a.proc == nil {
		return processor.LagInfo{}, ErrProcessorDisabled
	}
	return processor.Lag(ctx, a.js, a.cfg.DeclareSpec().ConsumerStream(), a.cfg.Processor.Durable)
}

// Order returns an order's projected state; an unknown or invalid id
// matches [ErrNotFound].
func (a *Appliance) Order(ctx context.Context, id string) (processor.Order, error) {
	if !processor.ValidOrderID(id) {
		return processor.Order{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	o, err := a.proj.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return processor.Order{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	return o, err
}

// DeadLetters returns up to limit dead letters from sequence from on, and
// the sequence to continue from (0 at the end).
func (a *Appliance) DeadLetters(ctx context.Context, from uint64, limit int) ([]processor.DeadLetter, uint64, error) {
	return processor.ListDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, from, limit)
}

// LatestDeadLetters returns up to n of the most recent dead letters,
// oldest first.
func (a *Appliance) LatestDeadLetters(ctx context.Context, n int) ([]processor.DeadLetter, error) {
	return processor.LatestDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, n)
}

// ReplayDeadLetter republishes dead letter seq to its original subject
// and deletes it; it returns the event's new stream sequence. An unknown
// seq matches [ErrNotFound].
func (a *Appliance) ReplayDeadLetter(ctx context.Context, seq uint64) (uint64, error) {
	// Published as a producer's event is (with group commit: acknowledged
	// once durable, before the dead letter is removed), and refused when
	// the original subject is too long for orderstore's own connection.
	n, err := processor.Replay(ctx, ingestJetStream{a.js, a}, a.cfg.Processor.DeadLetterStream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	}
	return n, err
}

// Close stops the appliance and waits. In order (stop runs exactly these):
//  1. the admin listener stops taking requests and finishes those in
//     flight;
//  2. the ingest service stops taking publishes and answers those it took
//     (at most 10 s; what is left gets a 503 "may or may not be stored");
//  3. the processor stops fetching, finishes and acks the events it holds
//     (canceling it also ends the run group's other actors: the store
//     guard's and the hub watcher's loops);
//  4. orderstore's connections drain, one after the other: the hub
//     watcher's, the ingest service's, the processor's, the internal one;
//  5. the store guard stops (no restart of nats from here on);
//  6. nats-server shuts down (Shutdown + WaitForShutdown: every stream
//     flushed and closed);
//  7. group commit's committer stops;
//  8. the run group's last actors are waited for;
//  9. after a clean stop the store is marked stopped (the next start
//     skips the crash checks), and the store lock is released.
//
// ctx bounds steps 1 to 4 and 8: when it ends, what is left in flight is
// cut off (unacked events are redelivered on the next start) and the
// error says which step it cut. Step 6 is always waited for, because
// releasing the lock while nats still writes would let a second process
// corrupt the store. Close is idempotent and safe to call concurrently:
// every call waits for the first and returns its result.
func (a *Appliance) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.closeErr = a.stop(ctx)
		close(a.closeDone)
	})
	<-a.closeDone
	return a.closeErr
}

// stop runs Close's steps for whatever has been started.
func (a *Appliance) stop(ctx context.Context) error {
	close(a.closing)
	var errs []error
	if a.hs != nil {
		if err := a.hs.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("admin listener %s: shutdown: %w", a.cfg.Admin.Listen, err))
			a.hs.Close()
		}
	}
	if a.ing != nil {
		// Answer every publish taken before the processor and the
		// connections stop.
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		a.ing.Close(ictx)
		cancel()
	}
	if a.groupStarted {
		if a.procCancel != nil {
			a.procCancel()
		}
		select {
		case <-a.procDone:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("processor: not drained: %w", ctx.Err()))
		}
	}
	for _, c := range []struct {
		nc     *nats.Conn
		closed chan struct{}
	}{{a.wnc, a.wncClosed}, {a.inc, a.incClosed}, {a.pnc, a.pncClosed}, {a.nc, a.ncClosed}} {
		if c.nc != nil {
			if err := drain(ctx, c.nc, c.closed); err != nil {
				errs = append(errs, err)
			}
		}
	}
	a.guard.stop() // no restart from here on
	if srv := a.server(); srv != nil {
		errs = append(errs, srv.Close())
	}
	if a.commit != nil {
		a.commit.Close()
	}
	if a.groupStarted {
		select {
		case <-a.done:
		case <-ctx.Done():
		}
	}
	if a.lock != nil {
		if !a.startFailed && errors.Join(errs...) == nil {
			errs = append(errs, a.markStopped()) // a clean stop: nats flushed every store
		}
		errs = append(errs, a.lock.Release())
	}
	return errors.Join(errs...)
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

func buildOrUnknown(b BuildInfo) BuildInfo {
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

// Durability returns the durability mode ("group-commit", "always" or
// "interval 1s") and its one-line meaning, as the startup log, /readyz and
// `orderstore status` state it.
func (c Config) Durability() (mode, description string) {
	switch c.DurabilityMode() {
	case DurabilityGroupCommit:
		return DurabilityGroupCommit, "acked once one sync of the store made the event durable (group commit): an acknowledged event survives power loss"
	case DurabilityAlways:
		return DurabilityAlways, "fsync before every ack: an acknowledged event survives power loss"
	}
	d := formatDuration(c.JetStream.SyncInterval)
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

// hinted attaches the remedy the CLI prints on a "hint:" line.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }

// Hint says what to do about the error.
func (h *hinted) Hint() string { return h.hint }

func withHint(err error, hint string) error {
	if hint == "" {
		return err
	}
	return &hinted{err, hint}
}

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
