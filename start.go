package orderstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/edgehub"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/natsrun"
	"github.com/orderstore/orderstore/internal/recovery"
	"github.com/orderstore/orderstore/internal/storedir"
	"github.com/orderstore/orderstore/processor"
)

// openStore runs the preflight, takes the store's lock and marks it running. Preflight comes before
// the admin listener: a second instance on the store is told so, not that the admin port is busy.
func (a *Appliance) openStore(context.Context) error {
	cfg, log := a.cfg, a.log
	lock, rep, err := cfg.lockStore()
	if err != nil {
		return err
	}
	a.report = rep
	a.sup.add(component{name: "store", stop: func(context.Context) error {
		var errs []error
		if a.sup.clean() {
			errs = append(errs, storedir.Dir(a.report.StoreDir).MarkStopped()) // a clean stop: nats flushed every store
		}
		return errors.Join(append(errs, lock.Release())...)
	}})
	if r, _, err := storedir.Dir(rep.StoreDir).ReadRestored(); err != nil || r.Restoring {
		return cmp.Or(err, WithHint(fmt.Errorf("preflight: store_dir %q holds a restore that did not finish: part of a backup only", rep.StoreDir),
			"move jetstream.store_dir away, then run orderstore restore again"))
	}
	interval := cfg.JetStream.SyncInterval // validated: set in durability "interval" only
	// Whether the last run stopped cleanly (with its sync interval: a
	// relaxed mode in either run is checked), this one marked running.
	unclean, last, err := storedir.Dir(rep.StoreDir).MarkRunning(os.Getpid(), interval)
	if err != nil {
		return err
	}
	a.rc = &recovery.Check{Dir: storedir.Dir(rep.StoreDir), Account: StreamAccount, Spec: a.spec, Log: a.log,
		Retry: a.clusterRetry, Unclean: unclean, SyncInterval: max(interval, last), BuiltinProjection: cfg.Processor.Handler == nil || cfg.historyMaxBytes() > 0,
		CheckRecords: cfg.Processor.Handler == nil && !cfg.Cluster.Enabled()}
	for _, w := range rep.Warnings {
		log.Warn("preflight", "warning", w)
	}
	stale, _ := filepath.Glob(filepath.Join(rep.StoreDir, backupStaging+"*")) // a backup's copy a crash left
	for _, s := range stale {
		log.Warn("preflight: removing a backup's staged copy left by a crash", "path", s, "err", os.RemoveAll(s))
	}
	if moved, err := storedir.Dir(rep.StoreDir).MoveAccount(legacyAccount, StreamAccount); errors.Is(err, storedir.ErrBothAccounts) {
		return WithHint(err, "an older orderstore wrote the first, this one the second; keep one (move the other away) and start again")
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

// lockStore checks c's key against the store (reading only: a wrong key changes nothing), runs the
// preflight and takes the lock; a new encrypted store gets its key check before nats writes a byte.
func (c Config) lockStore() (*bootstrap.Lock, bootstrap.Report, error) {
	write, err := storeKey(c.JetStream.StoreDir, c.JetStream)
	if err != nil {
		return nil, bootstrap.Report{}, err
	}
	lock, rep, err := bootstrap.Preflight(c.preflightConfig())
	if err == nil && write {
		e := storedir.Encryption{Cipher: c.JetStream.cipherName(), KeyCheck: storedir.KeyCheck(c.JetStream.EncryptionKey)}
		if err = storedir.Dir(rep.StoreDir).WriteEncryption(e); err != nil {
			err = errors.Join(err, lock.Release())
		}
	}
	return lock, rep, err
}

// startCommitter follows group commit (durability "group-commit"), which embedded nats runs in its
// file store: a failed sync stops the appliance, and the next start reads the store back.
func (a *Appliance) startCommitter(context.Context) error {
	if a.cfg.DurabilityMode() != DurabilityGroupCommit {
		return nil
	}
	a.commit = ingest.NewCommitter(a.cfg.Stream.Name)
	a.sup.add(component{name: "group commit", run: watch(a.commit.Failed(), a.commit.Err)})
	return nil
}

// startNATS starts the embedded server, watched: when it stops on its
// own, or switches JetStream off, the appliance fails.
func (a *Appliance) startNATS(ctx context.Context) (err error) {
	if a.id, err = natsconf.NewIdentity(); err != nil {
		return err
	}
	ec, err := a.cfg.embeddedConfig(a.log, a.id)
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
	a.nats = natsrun.NewServer(func(srv *embedded.Server) { a.monitored.Store(srv.NATSServer()) })
	// The store guard hears nats' errors from its start on; it runs once
	// the internal connection exists (startStoreGuard).
	a.storeGuard = natsrun.NewStoreGuard(natsrun.GuardConfig{StoreDir: a.report.StoreDir, Stream: a.cfg.Stream.Name, Subjects: a.cfg.Stream.Subjects,
		Headroom: a.cfg.JetStream.DiskHeadroom}, a.nats, a.log)
	ec.OnError = func(msg string) {
		if c := a.commit; c != nil && c.Err() != nil {
			// A failed group commit sync is final: the appliance stops
			// (startCommitter), rather than the guard restarting nats.
			return
		}
		a.storeGuard.OnNATSError(msg)
		if strings.Contains(msg, "Remote server has a duplicate name") {
			a.dupName.Store(&msg)
		}
	}
	a.nats.Config = ec
	t0 := time.Now()
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return WithHint(err, startHint(a.cfg, err))
	}
	a.nats.Set(srv)
	a.sup.add(component{name: "nats", run: func(ctx context.Context) error { return a.nats.Watch(ctx, a.storeGuard.Restarting) }, stop: a.nats.Stop})
	a.rc.StartupProblems(a.server().StartupProblems())
	policy, desc := a.cfg.DurabilityPolicy()
	a.log.Info("nats ready", "client_url", a.clientURLForLog(), "took", time.Since(t0).Round(time.Millisecond).String(),
		"durability", policy, "meaning", desc)
	if a.cfg.Cluster.Enabled() {
		return a.waitForMetaLeader(ctx)
	}
	return nil
}

// connectInternal opens the internal connection (declare, the admin API,
// lookups), the publisher's and the processor's.
func (a *Appliance) connectInternal(context.Context) (err error) {
	if a.internal, a.js, err = a.connect("orderstore-internal", natsconf.InternalInbox); err != nil {
		return err
	}
	if a.publisher, a.pubjs, err = a.connect("orderstore-publish", natsconf.InternalInbox); err != nil {
		return err
	}
	a.processor, a.pjs, err = a.connect("orderstore-processor", natsconf.InternalInbox)
	return err
}

// startStoreGuard runs the store guard: it refuses publishes while the store cannot write and
// restarts nats once it can. It stops before nats does (no restart from there on).
func (a *Appliance) startStoreGuard(context.Context) error {
	a.storeGuard.SetConn(a.internal.Conn)
	a.sup.add(component{name: "store guard", run: a.storeGuard.Run, stop: a.storeGuard.Stop})
	return nil
}

// declare declares what the config names and runs the recovery check.
func (a *Appliance) declare(ctx context.Context) error {
	timeout := 30 * time.Second
	if a.cfg.Cluster.Enabled() {
		timeout = clusterDeclareTimeout // peers may still be electing stream leaders: retry for longer
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
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

// checkStore runs the checks after the declaration: the projection's high-water mark against the
// stream (lost sequences forgotten), this run's epoch recorded, nats' metadata made durable.
func (a *Appliance) checkStore(ctx context.Context) error {
	if err := a.clusterRetry(ctx, "projection", func(c context.Context) (err error) {
		if a.reads.Live, err = NewProjection(c, a.js, a.cfg); err != nil {
			return err
		}
		if a.hstream, err = a.js.Stream(c, a.spec.ConsumerStream()); err != nil {
			return fmt.Errorf("stream %q: %w", a.spec.ConsumerStream(), err)
		}
		return nil
	}); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := a.rc.HighWater(dctx, a.reads.Live)
	cancel()
	if err != nil {
		return err
	}
	// This run's epoch and where it begins, in the stream's metadata (a hub checks each edge's
	// epochs: internal/edgehub); not in a cluster: no hub sources a cluster by epoch.
	if !a.cfg.Cluster.Enabled() {
		if err := edgehub.RecordEpoch(ctx, a.js, a.cfg.Stream.Name, a.epoch); err != nil {
			return err
		}
	}
	// nats writes the metadata of what it declared (meta.inf, the consumer's state) without fsync:
	// with group commit, make it durable before any event is acknowledged (nats syncs the metadata
	// files it writes, not the directories it makes for a new stream, bucket or consumer). A no-op
	// in the other modes.
	if a.commit == nil {
		return nil
	}
	return durable.SyncTree(storedir.Dir(a.report.StoreDir).JetStream())
}

// startProcessor runs the processor unless disabled; its stop lets it finish and ack what it holds.
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
	// Nobody else may bind it (the durable guard): a gap in its deliveries is read from the stream.
	pc.Exclusive = true
	// In a cluster every node runs a processor on the durable: what a
	// sibling was delivered is read back only if it was not applied.
	pc.Shared = cfg.Cluster.Enabled()
	if a.rc.ConsumerReset() {
		// Declared again from the start: what lies below the stream's
		// first sequence was processed by the consumer before.
		if st, err := a.js.Stream(ctx, a.spec.ConsumerStream()); err == nil && st.CachedInfo().State.FirstSeq > 0 {
			pc.SeenUpTo = st.CachedInfo().State.FirstSeq - 1
		}
	}
	if pc.SettledThrough, err = a.settledBeforeRestore(ctx, pc); err != nil {
		return err
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
	a.pause = processor.NewPausable(proc)
	a.sup.add(component{name: "processor", run: a.pause.Run, // the stop's ctx bounds its drain too:
		stop: func(ctx context.Context) error { context.AfterFunc(ctx, proc.CutDrain); return nil }})
	return nil
}

// startHubWatch runs a hub's source watcher, with a connection of its own per edge: its requests
// to an edge are answered over the leaf links, on an inbox prefix that names the edge, the only
// one of orderstore's to cross (so that only that edge's leaf user may answer).
func (a *Appliance) startHubWatch(context.Context) error {
	if !a.cfg.Hub.Enabled() {
		return nil
	}
	edges := map[string]*nats.Conn{}
	for _, e := range a.cfg.Hub.Edges {
		c, _, err := a.connect("orderstore-hubwatch-"+e, natsconf.HubWatchInbox+"."+e)
		if err != nil {
			return err
		}
		edges[e] = c.Conn
	}
	a.hub = edgehub.New(edgehub.Config{Edges: a.cfg.Hub.Edges, Stream: a.cfg.Stream.Name, Spec: a.spec, DeadLetterStream: a.cfg.Processor.DeadLetterStream,
		DeadLetterPrefix: deadLetterSubjectPrefix(a.cfg.Processor.DeadLetterStream), EpochHeader: EpochHeader},
		a.js, edges, a.log)
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
	if a.durableGuard, err = natsrun.StartDurableGuard(a.internal.Conn, s, d, a.log.With("component", "durable-guard")); err != nil {
		return err
	}
	a.sup.add(component{name: "durable guard", stop: func(context.Context) error { a.durableGuard.Close(); return nil }})
	return nil
}

// settledBeforeRestore is what a restore found settled by the backed-up processor
// (storedir.Restored) and this one has not passed: it is not handled again. The file goes once the
// processor is past it, or when the recovery check reset the consumer (the projection starts over).
func (a *Appliance) settledBeforeRestore(ctx context.Context, pc processor.Config) (uint64, error) {
	dir := storedir.Dir(a.report.StoreDir)
	r, ok, err := dir.ReadRestored()
	if err != nil || !ok {
		return 0, err
	}
	var floor uint64
	if cons, err := a.pjs.Consumer(ctx, pc.Stream, pc.Durable); err == nil {
		floor = cons.CachedInfo().AckFloor.Stream
	}
	if a.rc.ConsumerReset() || r.Stream != pc.Stream || floor >= r.SettledThrough {
		return 0, dir.RemoveRestored()
	}
	a.log.Info("restored from a backup: events the backed-up processor settled are acked unhandled",
		"settled_through", r.SettledThrough, "ack_floor", floor)
	return r.SettledThrough, nil
}
