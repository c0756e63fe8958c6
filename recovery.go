package orderstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"

	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/storedir"
)

// What start-up does about a damaged store (see docs/reliability.md):
//
//   - nats-server's own recovery warnings (a damaged or truncated block, an
//     unreadable metadata file, a consumer moved back) are kept and reported;
//   - a stream nats skipped (its meta.inf unreadable, as after a power cut
//     in a relaxed mode) is declared again with its configuration, and nats
//     reads its message blocks; if that brings nothing back, start-up fails
//     naming the directory, and so does every later start while the
//     projection holds orders of a stream that is now empty;
//   - a consumer whose state file nats cannot read is moved aside and
//     declared again from the start of the stream (the projection skips
//     what it already applied);
//   - a stream that ends below what the projection applied lost events: the
//     projection is rebuilt from what the stream holds (its bucket purged,
//     the consumer declared again from the start), so that it is the fold
//     of the stream again and new events, which reuse the lost sequence
//     numbers, are applied instead of skipped.
//
// Every such finding is a recovery note: logged at start-up, listed in
// /v1/status and `orderstore status`, counted by orderstore_recovery_notes,
// and named by /readyz's "recovery" check (ready, with a warning).

// streamDir is where nats keeps stream name's files.
func (a *Appliance) streamDir(name string) string {
	return storedir.Dir(a.report.StoreDir).Stream(StreamAccount, name)
}

func (a *Appliance) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.recovery = append(a.recovery, msg)
	a.log.Warn("store recovery", "note", msg)
}

// notLoaded returns the streams orderstore owns that have message files
// on disk which nats did not load (their meta.inf unreadable, as after a
// power cut in a relaxed sync mode, where nats writes it without fsync).
func (a *Appliance) notLoaded(ctx context.Context, spec bootstrap.Spec) map[string]int64 {
	names := []string{spec.Stream.Name}
	if spec.DeadLetter != nil {
		names = append(names, spec.DeadLetter.Name)
	}
	if spec.Projection != nil {
		names = append(names, "KV_"+spec.Projection.Bucket)
	}
	out := map[string]int64{}
	for _, name := range names {
		if _, err := a.js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		blks, _ := filepath.Glob(filepath.Join(a.streamDir(name), "msgs", "*.blk"))
		var size int64
		for _, b := range blks {
			if st, err := os.Stat(b); err == nil {
				size += st.Size()
			}
		}
		if size > 0 {
			out[name] = size
		}
	}
	return out
}

// checkReloaded runs after declare for the streams nats had not loaded:
// declaring them with their known configuration makes nats read their
// message blocks again. If it did not (the stream is empty), start-up
// fails rather than serve an empty stream over the old files.
func (a *Appliance) checkReloaded(ctx context.Context, unloaded map[string]int64) error {
	for name, size := range unloaded {
		dir := a.streamDir(name)
		s, err := a.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("recovery check: stream %q: %w", name, err)
		}
		st := s.CachedInfo().State
		if st.Msgs == 0 && st.LastSeq == 0 {
			return withHint(fmt.Errorf("recovery check: stream %q has %d bytes of message blocks in %q that nats did not load, and declaring it again did not bring them back", name, size, dir),
				fmt.Sprintf("stop orderstore, restore %q from a backup (or move it away to start with an empty stream, keeping the old files for inspection)", dir))
		}
		a.note("stream %q: nats could not read its metadata (meta.inf, e.g. after a power cut with a relaxed sync_interval) and skipped it; orderstore declared it again with its configuration and nats recovered %d events (sequences %d..%d) from its blocks",
			name, st.Msgs, st.FirstSeq, st.LastSeq)
	}
	return nil
}

// consumerDir is where nats keeps the processor's durable's files.
func (a *Appliance) consumerDir(spec bootstrap.Spec) string {
	return storedir.Dir(a.report.StoreDir).Consumer(StreamAccount, spec.ConsumerStream(), spec.Consumer.Durable)
}

// moveAside moves a consumer's directory nats could not use out of nats'
// tree, so that it is declared again from the start of the stream (the
// projection skips what it already applied).
func (a *Appliance) moveAside(spec bootstrap.Spec, why string) error {
	dir := a.consumerDir(spec)
	aside, err := storedir.Dir(a.report.StoreDir).MoveAside(dir, time.Now())
	if err != nil {
		return withHint(fmt.Errorf("consumer %q: %s, and moving its directory aside failed: %w", spec.Consumer.Durable, why, err),
			fmt.Sprintf("stop orderstore and move %q away; it is declared again from the start of the stream", dir))
	}
	a.note("consumer %q: %s; moved its directory to %q and declared it again from the start of the stream: the projection skips what it already applied",
		spec.Consumer.Durable, why, aside)
	a.consumerReset = true
	return nil
}

// unloadedConsumer moves aside the processor's durable when its directory
// is on disk but nats did not load it: its meta.inf or o.dat was
// unreadable (nats writes them without fsync in the relaxed modes, and a
// power cut can leave them empty). Declaring it over that directory would keep both the
// unreadable meta.inf (nats writes it only when it is missing) and the
// state file beside it, which a power cut can leave ahead of the stream:
// the consumer would then skip the new events that reuse the lost
// sequence numbers, or wait for ever on deliveries the stream no longer
// has (nats reconciles a consumer with its stream only when it loads it
// at start-up).
func (a *Appliance) unloadedConsumer(ctx context.Context, spec bootstrap.Spec) error {
	if spec.Consumer == nil {
		return nil
	}
	if _, err := os.Stat(a.consumerDir(spec)); err != nil {
		return nil // not on disk: a first start, or moved aside already
	}
	_, err := a.js.Consumer(ctx, spec.ConsumerStream(), spec.Consumer.Durable)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // loaded (or nats cannot tell now: the declaration will)
	}
	return a.moveAside(spec, "nats did not load it at start-up (its metadata, meta.inf, or its state, o.dat, unreadable, e.g. after a power cut with a relaxed sync_interval: see nats' warning)")
}

// declareRecovering declares spec; a consumer whose stored state nats
// cannot read is moved aside and declared again.
func (a *Appliance) declareRecovering(ctx context.Context, spec bootstrap.Spec) error {
	_, err := bootstrap.Declare(ctx, a.js, spec, a.log.With("component", "bootstrap"))
	if err == nil || spec.Consumer == nil || !strings.Contains(err.Error(), "error creating store for consumer") {
		return err
	}
	if err := a.moveAside(spec, fmt.Sprintf("nats could not read its state (%v)", err)); err != nil {
		return err
	}
	_, err = bootstrap.Declare(ctx, a.js, spec, a.log.With("component", "bootstrap"))
	return err
}

// checkHighWater compares the stream's last sequence with the highest the
// projection applied: a stream that ends below it lost acknowledged events
// (a damaged block, a power cut with a relaxed sync_interval), and the next
// events will reuse those sequences. After an unclean stop with a relaxed
// sync_interval, the bucket may also have lost its last writes while the
// consumer's acks survived: a consumer whose ack floor is past what the
// projection holds would never deliver those events again. Either way the
// projection is rebuilt.
func (a *Appliance) checkHighWater(ctx context.Context, spec bootstrap.Spec) error {
	if a.proj == nil || spec.Projection == nil {
		return nil
	}
	// The projection's sequence numbers are those of the stream the
	// consumer reads (a hub's aggregate stream).
	// A restarted cluster node may not reach the streams yet (no
	// responders until their replicas have a leader): the reads are
	// retried like the declaration.
	cs := spec.ConsumerStream()
	var (
		s  jetstream.Stream
		hw uint64
	)
	if err := a.clusterRetry(ctx, "recovery check", func(c context.Context) (err error) {
		if s, err = a.js.Stream(c, cs); err != nil {
			return fmt.Errorf("recovery check: stream %q: %w", cs, err)
		}
		if hw, err = a.proj.HighWater(c, 256); err != nil {
			return fmt.Errorf("recovery check: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	last := s.CachedInfo().State.LastSeq
	why := ""
	switch {
	case last == 0 && hw > 0 && !(a.unclean && a.cfg.relaxedSync()):
		// Nothing left to rebuild from: purging would destroy the only
		// copy of the orders' state. Refused at every start until an
		// operator decides. (After an unclean stop in a relaxed mode an
		// empty stream is the documented loss, the events of the last
		// interval: the projection is rebuilt, to empty, below.)
		return withHint(fmt.Errorf("recovery check: stream %q is empty but the projection %q holds orders applied up to sequence %d: the stream's events are gone (a deleted or unreadable store?)",
			cs, spec.Projection.Bucket, hw),
			fmt.Sprintf("restore %q from a backup; or, to accept the loss and start over, remove the projection (its directory %q) and start again",
				a.streamDir(cs), a.streamDir("KV_"+spec.Projection.Bucket)))
	case hw > last:
		why = fmt.Sprintf("stream %q ends at sequence %d but the projection had applied events up to %d: %d acknowledged events were lost from the store (see nats' recovery warnings)",
			cs, last, hw, hw-last)
	case a.unclean && a.cfg.relaxedSync() && spec.Consumer != nil && a.cfg.Processor.Handler == nil:
		c, err := a.js.Consumer(ctx, cs, spec.Consumer.Durable)
		if err != nil {
			return fmt.Errorf("recovery check: consumer %q: %w", spec.Consumer.Durable, err)
		}
		// The bucket may have lost the writes of its last sync interval
		// while the consumer's acks of those events survived. Check the
		// events acknowledged in that time (and a margin) against the
		// projection.
		floor := c.CachedInfo().AckFloor.Stream
		kvs, err := a.js.Stream(ctx, "KV_"+spec.Projection.Bucket)
		if err != nil {
			return fmt.Errorf("recovery check: projection bucket: %w", err)
		}
		notBefore := kvs.CachedInfo().State.LastTime.Add(-3*a.cfg.JetStream.SyncInterval - 2*time.Second)
		seq, missing, err := a.proj.Unapplied(ctx, s, 1, floor, 20000, notBefore)
		if err != nil {
			return fmt.Errorf("recovery check: %w", err)
		}
		if missing {
			why = fmt.Sprintf("after an unclean stop with sync_interval %s, consumer %q has acknowledged up to sequence %d but the projection lacks event %d (its last writes were not synced)",
				duration.Format(a.cfg.JetStream.SyncInterval), spec.Consumer.Durable, floor, seq)
		}
	}
	if why == "" {
		return nil
	}
	// The projection holds the effect of events the stream no longer has,
	// and the next events will reuse their sequence numbers: rebuild it
	// from what the stream holds, so that it is again the fold of the
	// stream (the events lost are gone from both).
	// The consumer is reset first and the bucket purged second: if
	// start-up stops in between, the next start finds the same condition
	// and does it again.
	if spec.Consumer != nil {
		if err := a.js.DeleteConsumer(ctx, spec.ConsumerStream(), spec.Consumer.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("recovery check: rebuild the projection: reset consumer %q: %w", spec.Consumer.Durable, err)
		}
		if err := a.declareRecovering(ctx, spec); err != nil {
			return err
		}
		a.consumerReset = true
	}
	kvs, err := a.js.Stream(ctx, "KV_"+spec.Projection.Bucket)
	if err != nil {
		return fmt.Errorf("recovery check: projection bucket: %w", err)
	}
	if err := kvs.Purge(ctx); err != nil {
		return fmt.Errorf("recovery check: rebuild the projection: purge: %w", err)
	}
	a.note("%s; the projection is rebuilt from the %d events the stream holds, so that it is the fold of the stream again (and new events reusing lost sequence numbers are applied)",
		why, s.CachedInfo().State.Msgs)
	return nil
}

// startupNotes turns nats-server's start-up warnings into recovery notes.
func (a *Appliance) startupNotes() {
	for _, p := range a.server().StartupProblems() {
		if storeProblem(p) {
			a.note("nats: %s", p)
		}
	}
}

// markRunning records whether the last run stopped cleanly and marks this
// one as running (storedir's run marker).
func (a *Appliance) markRunning() (err error) {
	a.unclean, err = storedir.Dir(a.report.StoreDir).MarkRunning(os.Getpid())
	return err
}

// storeProblem reports whether a warning nats logged at start-up is about
// the store (a damaged block, unreadable metadata, a consumer moved back)
// rather than the network (a hub or route not reachable yet) or the
// config (plaintext passwords).
func storeProblem(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"plaintext passwords", "leafnode", "route", "connect", "gateway", "cluster", "raft", "meta leader"} {
		if strings.Contains(m, s) {
			return false
		}
	}
	for _, s := range []string{"stream", "consumer", "block", "msgs", "meta", "checksum", "recover", "store", "corrupt", "truncat", "index", "state"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// syncMetadata makes a stream or consumer change durable with group commit
// (nats rewrites meta.inf and o.dat without fsync when it does not sync
// every write); a no-op in the other modes.
func (a *Appliance) syncMetadata(ctx context.Context) error {
	if a.commit == nil {
		return nil
	}
	return a.commit.SyncAll(ctx)
}
