package orderstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/natsserver/server"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/edgehub"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/natsrun"
	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/internal/rebuild"
	"github.com/orderstore/orderstore/internal/recovery"
	"github.com/orderstore/orderstore/internal/validate"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// ErrNotFound is matched (errors.Is) by the errors of [Appliance.Order],
// [Appliance.ReplayDeadLetter] and their kin for what does not exist.
var ErrNotFound = errors.New("orderstore: not found")

// The processor's types the appliance's methods return, under the names its API uses. The JSON
// shapes the appliance reports (/v1/status, its topology, build information) are package status's.
type (
	// Order is an order's projected state.
	Order = processor.Order
	// Event is one order event, as a fold of an order's events sees it.
	Event = processor.Event
	// DeadLetter is one dead-lettered event.
	DeadLetter = processor.DeadLetter
	// Stats are the processor's counters.
	Stats = processor.Stats
	// Lag is how far the processor's consumer is behind.
	Lag = processor.LagInfo
)

// ErrProcessorDisabled is returned by [Appliance.Lag] when Processor.Enabled is false.
var ErrProcessorDisabled = errors.New("orderstore: the processor is disabled")

// Appliance is a running, ready orderstore: the store lock, the embedded
// nats-server with its streams declared and verified, the processor and the
// admin listener. It exists only once all of them run; see [Start].
type Appliance struct {
	cfg  Config
	spec bootstrap.Spec // what cfg declares, computed once
	log  *slog.Logger
	sup  *supervisor // the run group: every component, in start order, and their goroutines

	// The store: what preflight and start-up found in it.
	report   bootstrap.Report
	rc       *recovery.Check // what start-up found and did about a damaged store
	backupMu sync.Mutex      // one backup at a time

	// The embedded nats-server and what runs inside it.
	nats       *natsrun.Server                    // the embedded server (the store guard may replace it)
	monitored  atomic.Pointer[server.Server]      // for the monitoring handlers, set once nats runs
	id         *natsconf.Identity                 // how orderstore's own connections sign in
	epoch      string                             // this run's EpochHeader value
	dupName    atomic.Pointer[string]             // nats' log line about another node with this node's name
	storeGuard *natsrun.StoreGuard                // refuses publishes while the store cannot write; restarts nats
	commit     *ingest.Committer                  // group commit's figures and failure; nil in other modes
	admit      *ingest.Admission                  // nats' admission hook: every publish into the stream
	validator  atomic.Pointer[validate.Validator] // schema validation at admission; swapped by SetValidation

	reload atomic.Pointer[status.ConfigReload] // the last reload's outcome (SetValidation, ReloadFailed)

	// orderstore's own connections, each of its own so that no part shares another's fate: for
	// declare, the admin API and lookups (internal), the processor and its projection writes
	// (processor), and the events orderstore publishes into the stream (publisher: HTTP ingest,
	// Publish, replays), which wait in admission's line on it; a hub's source watcher has one per
	// edge (startHubWatch).
	internal, processor, publisher conn
	js, pjs, pubjs                 jetstream.JetStream // on internal, processor, publisher
	pubSlots                       chan struct{}       // publishMsg's publishes in flight

	// The processor, the projection it writes, and its rebuilds.
	proc               *processor.Processor  // nil when disabled
	procHandler        processor.Handler     // the processor's handler
	stallAfter         time.Duration         // the longest an event may hold the ack floor
	pause              *processor.Pausable   // runs proc; a rebuild's takeover pauses it
	durableGuard       *natsrun.DurableGuard // answers clients' requests on the processor's durable
	hstream            jetstream.Stream      // the stream history reads come from (a hub's aggregate)
	hub                *edgehub.Watcher      // a hub's source watcher; nil elsewhere
	reads              rebuild.Reads         // the projection, on internal; a takeover's shadow
	rebuild            *rebuild.Runner       // nil when the projection cannot be rebuilt
	rebuildUnsupported error                 // why not
	handlerVersion     string                // the fold's version (processor.Versioned)
	index              *orderindex.Index     // orders by status and age; nil when processor.order_index is off

	// The admin API's handler and its listener.
	admin   *admin.Server
	adminLn *admin.Listener // nil when it is disabled
}

// Start runs the start-up in order (docs/operations.md, "Start-up, in order"); each step starts its
// components, which [Appliance.Close] stops in the reverse order:
//
//  1. validate cfg and the files it names (TLS certificates, schemas);
//  2. the store: preflight (store_dir, free disk), its lock, the run marker, a legacy layout moved;
//  3. the admin handler and listener, so that a busy port fails at once
//     and /readyz answers "recovering" during a long recovery;
//  4. group commit's watch (durability "group-commit": nats-server's file
//     store syncs, and a failed sync fails the appliance);
//  5. nats-server, with the admission hook every publish into the stream
//     passes, and a watchdog on it;
//  6. orderstore's internal, publisher and processor connections;
//  7. the store guard;
//  8. declare the stream, dead-letter stream, projection bucket and
//     consumer, with the recovery check of what nats loaded;
//  9. the checks after the declaration: lost sequences, this run's epoch,
//     the metadata made durable;
//  10. the rebuild runner, finishing a takeover a stop interrupted;
//  11. the order index: a watch of the projection bucket that loads its
//     records, then follows every write;
//  12. the processor;
//  13. the rebuild runner's fold under way, or one a new handler version
//     asks for;
//  14. a hub's source watcher and its connections, one per edge;
//  15. the durable guard;
//  16. the admin API's backend, and the admin listener's intake.
//
// (TestStartDocIsTheStepTable checks this list against startSteps.)
//
// It returns once the processor consumes and every part runs (none failed meanwhile), or with
// an error naming what failed; on error everything it started is stopped and the lock released.
//
// ctx bounds only start-up (canceling ctx aborts it); [Appliance.Close] stops a running one.
func Start(ctx context.Context, cfg Config) (*Appliance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The files the config names (TLS, schemas) load, or a *FileError
	// names each that does not: a configuration error, as check says.
	if err := cfg.CheckFiles(); err != nil {
		return nil, err
	}
	v, err := cfg.validator()
	if err != nil {
		return nil, err
	}
	cfg.Stream.Subjects = append([]string(nil), cfg.Stream.Subjects...)
	log := loggerOrDiscard(cfg.Logger)
	a := &Appliance{cfg: cfg, spec: cfg.DeclareSpec(), log: log, sup: newSupervisor(log),
		epoch: rand.Text()[:12], pubSlots: make(chan struct{}, publishSlots)} // 12 random letters and digits
	a.validator.Store(v)
	a.reloaded(nil)
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
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("start: processor: %w", ctx.Err()), a.sup.failStart())
		}
	}
	if err := a.sup.Err(); err != nil { // a part failed during start-up (whichever case the select took)
		return nil, errors.Join(fmt.Errorf("start: %w", err), a.sup.failStart())
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
	{"orderstore's internal, publisher and processor connections", (*Appliance).connectInternal,
		"the processor's connection drains, then the publisher's, then the internal one"},
	{"the store guard", (*Appliance).startStoreGuard,
		"the store guard: no restart of nats from here on (one under way is waited for)"},
	{"declare the stream, dead-letter stream, projection bucket and consumer, with the recovery check of what nats loaded", (*Appliance).declare, ""},
	{"the checks after the declaration: lost sequences, this run's epoch, the metadata made durable", (*Appliance).checkStore, ""},
	{"the rebuild runner, finishing a takeover a stop interrupted", (*Appliance).openRebuild, ""},
	{"the order index: a watch of the projection bucket that loads its records, then follows every write", (*Appliance).startOrderIndex,
		"the order index's watch"},
	{"the processor", (*Appliance).startProcessor,
		"the processor: it stops fetching, finishes and acks the events it holds"},
	{"the rebuild runner's fold under way, or one a new handler version asks for", (*Appliance).runRebuild,
		"the projection rebuild: a fold under way stops, and the next start goes on from its last durable position"},
	{"a hub's source watcher and its connections, one per edge", (*Appliance).startHubWatch,
		"a hub's source watcher, then its connection drains"},
	{"the durable guard", (*Appliance).startDurableGuard,
		"the durable guard"},
	{"the admin API's backend, and the admin listener's intake", (*Appliance).openAdmin,
		"admission's line (a publish waiting in it is answered 429), then the admin listener's intake: it stops taking requests and finishes those in flight"},
}

// server returns the embedded server running now.
func (a *Appliance) server() *embedded.Server { return a.nats.Current() }

// ClientURL returns the URL NATS clients connect to, with the real port (also for Server.Port -1).
func (a *Appliance) ClientURL() string { return a.server().ClientURL() }

// clientURLForLog is ClientURL as a client must spell it: tls:// when
// the client port requires TLS (nats.go dials nats:// in plaintext first).
func (a *Appliance) clientURLForLog() string {
	u := a.ClientURL()
	if rest, ok := strings.CutPrefix(u, "nats://"); ok && a.cfg.Server.TLS.CertFile != "" {
		return "tls://" + rest
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

// Recovery returns what start-up found and did about a damaged store (nats' recovery warnings, a
// consumer declared again, lost sequence numbers); empty after a clean start.
func (a *Appliance) Recovery() []string { return a.rc.Notes() }

// StoreDir returns the absolute store directory.
func (a *Appliance) StoreDir() string { return a.report.StoreDir }

// Config returns the configuration the appliance runs with.
func (a *Appliance) Config() Config { return a.cfg }

// Handler returns the admin HTTP handler (health, metrics, API, dashboard),
// for a program that serves it on a listener of its own. Validate's "a non-loopback admin
// listener needs a token" sees only Admin.Listen, not that listener: without Admin.Token the
// handler answers anyone who reaches it, so protect it or set the token.
func (a *Appliance) Handler() http.Handler { return a.admin }

// Done is closed once the appliance stopped: a part failed ([Appliance.Wait]) or Close stopped it.
func (a *Appliance) Done() <-chan struct{} { return a.sup.done }

// Wait blocks until the appliance stops. It returns the error of the part that failed (nats
// stopped, the processor's consumer vanished, the admin listener failed), or nil after Close. After
// a failure, call Close to stop the rest and release the store.
func (a *Appliance) Wait() error {
	<-a.sup.done
	return a.sup.Err()
}

// Ready reports whether the appliance is ready: JetStream answers, its stream, dead-letter stream,
// projection bucket and consumer exist as declared, and the processor runs. The error names every
// failed check. It is what /readyz serves.
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
	return processor.Lag(ctx, a.js, a.spec.ConsumerStream(), a.cfg.Processor.Durable)
}

// Order returns an order's projected state; an unknown or invalid id matches [ErrNotFound].
func (a *Appliance) Order(ctx context.Context, id string) (Order, error) {
	if !processor.ValidOrderID(id) {
		return processor.Order{}, fmt.Errorf("order %q: %w", id, ErrNotFound)
	}
	proj, done := a.reads.For(ctx, id)
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

// LatestDeadLetters returns up to n of the most recent dead letters, oldest first.
func (a *Appliance) LatestDeadLetters(ctx context.Context, n int) ([]DeadLetter, error) {
	return processor.LatestDeadLetters(ctx, a.js, a.cfg.Processor.DeadLetterStream, n)
}

// ReplayDeadLetter republishes dead letter seq to its original subject and deletes it; it returns
// the event's new stream sequence. An unknown seq matches [ErrNotFound].
func (a *Appliance) ReplayDeadLetter(ctx context.Context, seq uint64) (uint64, error) {
	// Published as a producer's event is (with group commit: acknowledged
	// once durable, before the dead letter is removed), and refused when
	// the original subject is too long for orderstore's own connection.
	if a.cfg.Hub.Enabled() {
		if d, err := processor.GetDeadLetter(ctx, a.js, a.cfg.Processor.DeadLetterStream, seq); err == nil && d.Header.Get(edgehub.HeaderOriginalSource) != "" {
			return 0, fmt.Errorf("dead letter %d is not replayed: %s (its producer had no ack, and may have published it again)", seq, d.Error)
		}
	}
	n, err := processor.Replay(ctx, guardedJetStream{a.js, a}, a.cfg.Processor.DeadLetterStream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	}
	return n, err
}

// Close stops the appliance and waits. It stops the components [Start] started, last started first,
// each completely (its stop step, then its goroutines) before the next:
//
//  1. admission's line (a publish waiting in it is answered 429), then the admin listener's intake:
//     it stops taking requests and finishes those in flight;
//  2. the durable guard;
//  3. a hub's source watcher, then its connection drains;
//  4. the projection rebuild: a fold under way stops, and the next start
//     goes on from its last durable position;
//  5. the processor: it stops fetching, finishes and acks the events it holds;
//  6. the order index's watch;
//  7. the store guard: no restart of nats from here on (one under way is waited for);
//  8. the processor's connection drains, then the publisher's, then the internal one;
//  9. nats-server shuts down (Shutdown + WaitForShutdown: every stream flushed and closed, group
//     commit syncing and answering every publish it holds first);
//  10. group commit's watch stops;
//  11. the admin listener closes;
//  12. after a clean stop the store is marked stopped (the next start
//     skips the crash checks), and the store lock is released.
//
// (TestCloseDocIsTheStepTable checks this list against startSteps.)
//
// ctx bounds each step's wait: when it ends, what is left in flight is cut off (the processor's
// drain too; unacked events are redelivered on the next start) and the error says which stop step
// it cut. A part whose goroutine still runs a second after the rest of the stop is named "<part>:
// not stopped"; nothing else of the appliance runs once Close returned. nats' shutdown is always
// waited for, because releasing the lock while nats still writes would let a second process corrupt
// the store. Close is idempotent and safe to call concurrently: every call waits for the first and
// returns its result.
func (a *Appliance) Close(ctx context.Context) error { return a.sup.stop(ctx) }
