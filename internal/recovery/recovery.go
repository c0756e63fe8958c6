// Package recovery is start-up's look at what a crash, a power cut or a damaged file left in
// the store, and what it does about it (docs/reliability.md, "What the damage rows mean"). Each
// finding is a note: logged, in /v1/status, orderstore_recovery_notes and /readyz's "recovery".
package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/hint"
	"github.com/orderstore/orderstore/internal/storedir"
	"github.com/orderstore/orderstore/processor"
)

// Check is one start-up's recovery check of the objects Spec declares.
type Check struct {
	JS      jetstream.JetStream
	Dir     storedir.Dir
	Account string // where the streams live
	Spec    bootstrap.Spec
	Log     *slog.Logger
	// Retry runs f, again while a cluster elects its leaders (required).
	Retry func(ctx context.Context, what string, f func(context.Context) error) error
	// Unclean: the last run did not stop cleanly.
	Unclean bool
	// SyncInterval > 0: nats syncs on a timer (the relaxed mode), in this
	// run or the last, so an unclean stop may have lost that long of writes.
	SyncInterval time.Duration
	// BuiltinProjection: the built-in projection, whose records say which events they applied.
	BuiltinProjection bool
	// CheckRecords: HighWater looks for acknowledged events the bucket's records lack (a single
	// node with the built-in handler, whose records mark what it dead-lettered).
	CheckRecords bool

	notes         []string
	problems      []string // nats' start-up warnings
	consumerReset bool
}

// Note records a finding and logs it.
func (c *Check) Note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.notes = append(c.notes, msg)
	c.Log.Warn("store recovery", "note", msg)
}

// Notes are the findings so far.
func (c *Check) Notes() []string { return c.notes }

// ConsumerReset reports whether the consumer was declared again from the start of the stream.
func (c *Check) ConsumerReset() bool { return c.consumerReset }

// StartupProblems turns nats-server's start-up warnings about the store into notes.
func (c *Check) StartupProblems(problems []string) {
	c.problems = append(c.problems, problems...)
	for _, p := range problems {
		if StoreProblem(p) {
			c.Note("nats: %s", p)
		}
	}
}

// StoreProblem reports whether a warning nats logged at start-up is about the store (a damaged
// block, unreadable metadata, a consumer moved back) rather than the network (a hub or route not
// reachable yet) or the config (plaintext passwords).
func StoreProblem(msg string) bool {
	m := strings.ToLower(msg)
	has := func(s string) bool { return strings.Contains(m, s) }
	return !slices.ContainsFunc([]string{"plaintext passwords", "leafnode", "route", "connect", "gateway", "cluster", "raft", "meta leader"}, has) &&
		slices.ContainsFunc([]string{"stream", "consumer", "block", "msgs", "meta", "checksum", "recover", "store", "corrupt", "truncat", "index", "state"}, has)
}

// Declare declares the spec, as start-up does, with what nats left unloaded brought back first: in
// a single node (clustered streams are loaded from the meta group's assignments, asynchronously, so
// their files say nothing yet), the streams nats skipped are declared again and must come back with
// their events, and a consumer nats did not load is moved aside. Then the recovery check: a
// consumer ahead of the stream is declared again from the start.
func (c *Check) Declare(ctx context.Context, clustered bool) error {
	var unloaded map[string]int64
	if !clustered {
		unloaded = c.notLoaded(ctx)
		if err := c.unloadedConsumer(ctx); err != nil {
			return err
		}
	}
	if err := c.Retry(ctx, "declare", c.declareRecovering); err != nil {
		for name := range unloaded { // nats cannot open its files either (its key, meta.key, lost?)
			msg, obj := err.Error(), fmt.Sprintf("bucket %q: ", strings.TrimPrefix(name, "KV_")) // the projection's
			if (strings.Contains(msg, fmt.Sprintf("stream %q: ", name)) || strings.Contains(msg, obj)) && strings.Contains(msg, "error creating store for stream") {
				err = hint.Wrap(err, c.restoreHint(name))
			}
		}
		return err
	}
	if err := c.checkReloaded(ctx, unloaded); err != nil {
		return err
	}
	spec := c.Spec
	err := c.Retry(ctx, "recovery check", func(ctx context.Context) error { return bootstrap.Verify(ctx, c.JS, spec) })
	if !errors.Is(err, bootstrap.ErrAckFloorAhead) || spec.Consumer == nil {
		return err
	}
	// The stream lost its last events (a power cut with a relaxed sync_interval): a consumer past
	// them would skip the events that reuse their sequence numbers. Declare it again from the
	// start; the projection skips what it applied (and HighWater forgets the lost sequences).
	if derr := c.JS.DeleteConsumer(ctx, spec.ConsumerStream(), spec.Consumer.Durable); derr != nil {
		return errors.Join(err, fmt.Errorf("reset consumer %q: %w", spec.Consumer.Durable, derr))
	}
	if derr := c.declareRecovering(ctx); derr != nil {
		return derr
	}
	c.Note("consumer %q was ahead of the stream (%v): the stream lost its last events; declared it again from the start of the stream, the projection skips what it already applied", spec.Consumer.Durable, err)
	c.consumerReset = true
	return bootstrap.Verify(ctx, c.JS, spec)
}

// notLoaded returns the streams of the spec that have message files on
// disk which nats did not load (their meta.inf unreadable, as after a
// power cut in a relaxed sync mode, where nats writes it without fsync).
func (c *Check) notLoaded(ctx context.Context) map[string]int64 {
	out := map[string]int64{}
	for _, name := range c.Spec.Streams() {
		if _, err := c.JS.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if size := c.Dir.MsgsSize(c.Account, name); size > 0 {
			out[name] = size
		}
	}
	return out
}

// checkReloaded runs after the declaration for the streams nats had not loaded: declaring them with
// their known configuration makes nats read their message blocks again. If it did not (the stream
// is empty), start-up fails rather than serve an empty stream over the old files.
func (c *Check) checkReloaded(ctx context.Context, unloaded map[string]int64) error {
	for name, size := range unloaded {
		s, err := c.JS.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("recovery check: stream %q: %w", name, err)
		}
		st := s.CachedInfo().State
		if st.Msgs == 0 && st.LastSeq == 0 {
			return hint.Wrap(fmt.Errorf("recovery check: stream %q has %d bytes of message blocks in %q that nats did not load, and declaring it again did not bring them back", name, size, c.Dir.Stream(c.Account, name)),
				c.restoreHint(name))
		}
		c.Note("stream %q: nats could not read its metadata (meta.inf, e.g. after a power cut with a relaxed sync_interval) and skipped it; orderstore declared it again with its configuration and nats recovered %d events (sequences %d..%d) from its blocks",
			name, st.Msgs, st.FirstSeq, st.LastSeq)
	}
	return nil
}

// restoreHint is what to do about the files of stream name that nats cannot load. The projection's
// are moved away, not restored: a new bucket is filled from the stream at start (HighWater), while
// one restored alone from a backup would lack what the processor's consumer acknowledged since.
func (c *Check) restoreHint(name string) string {
	dirs := []string{c.Dir.Stream(c.Account, name)}
	if p, h := c.Spec.Projection, c.Spec.History; p != nil && (name == "KV_"+p.Bucket || h != nil && name == h.Name) {
		if dirs[0] = c.Dir.Stream(c.Account, "KV_"+p.Bucket); h != nil {
			dirs = append(dirs, c.Dir.Stream(c.Account, h.Name))
		}
		return fmt.Sprintf("stop orderstore and move the projection's directories %q away (keeping them for inspection): the next start rebuilds the projection from the stream", dirs)
	}
	return fmt.Sprintf("stop orderstore, restore %q from a backup (or move it away to start with an empty stream, keeping the old files for inspection)", dirs[0])
}

// consumerDir is where nats keeps the processor's durable's files.
func (c *Check) consumerDir() string {
	return c.Dir.Consumer(c.Account, c.Spec.ConsumerStream(), c.Spec.Consumer.Durable)
}

// moveAside moves a consumer's directory nats could not use out of nats' tree, so that it is
// declared again from the start of the stream (the projection skips what it already applied).
func (c *Check) moveAside(why string) error {
	dir := c.consumerDir()
	durable := c.Spec.Consumer.Durable
	aside, err := c.Dir.MoveAside(dir, time.Now())
	if err != nil {
		return hint.Wrap(fmt.Errorf("consumer %q: %s, and moving its directory aside failed: %w", durable, why, err),
			fmt.Sprintf("stop orderstore and move %q away; it is declared again from the start of the stream", dir))
	}
	c.Note("consumer %q: %s; moved its directory to %q and declared it again from the start of the stream: the projection skips what it already applied",
		durable, why, aside)
	c.consumerReset = true
	return nil
}

// unloadedConsumer moves aside the processor's durable when its directory is on disk but nats did
// not load it (its meta.inf or o.dat unreadable, as a power cut leaves them in the relaxed modes):
// declared over that directory, it would keep both (docs/reliability.md, "What the damage rows
// mean"), and a state ahead of the stream would skip the new events that reuse the lost sequence
// numbers, or wait for ever on deliveries the stream no longer has (nats reconciles a consumer with
// its stream only when it loads it at start-up).
func (c *Check) unloadedConsumer(ctx context.Context) error {
	if c.Spec.Consumer == nil {
		return nil
	}
	if _, err := os.Stat(c.consumerDir()); err != nil {
		return nil // not on disk: a first start, or moved aside already
	}
	_, err := c.JS.Consumer(ctx, c.Spec.ConsumerStream(), c.Spec.Consumer.Durable)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // loaded (or nats cannot tell now: the declaration will)
	}
	if !c.natsNamedConsumer() {
		// Not loaded otherwise (a limit, a key), its files intact: the declaration says what.
		return nil
	}
	return c.moveAside("nats did not load it at start-up (its metadata, meta.inf, or its state, o.dat, unreadable, e.g. after a power cut with a relaxed sync_interval: see nats' warning)")
}

// natsNamedConsumer reports whether one of nats' start-up warnings names
// the processor's durable: its files (meta.inf) or its state (o.dat, in
// "Error adding consumer 'account > stream > durable': ...").
func (c *Check) natsNamedConsumer() bool {
	// The directory's tail: nats names it as its store_dir was given to it, which may be relative.
	dir := string(filepath.Separator) + filepath.Join(c.Account, "streams", c.Spec.ConsumerStream(), "obs", c.Spec.Consumer.Durable) + string(filepath.Separator)
	name := fmt.Sprintf("> %s > %s'", c.Spec.ConsumerStream(), c.Spec.Consumer.Durable)
	return slices.ContainsFunc(c.problems, func(p string) bool { return strings.Contains(p, dir) || strings.Contains(p, name) })
}

// declareRecovering declares the spec; a consumer whose stored state nats
// cannot read is moved aside and declared again.
func (c *Check) declareRecovering(ctx context.Context) error {
	log := c.Log.With("component", "bootstrap")
	_, err := bootstrap.Declare(ctx, c.JS, c.Spec, log)
	if err == nil || c.Spec.Consumer == nil || !strings.Contains(err.Error(), "error creating store for consumer") {
		return err
	}
	if err := c.moveAside(fmt.Sprintf("nats could not read its state (%v)", err)); err != nil {
		return err
	}
	_, err = bootstrap.Declare(ctx, c.JS, c.Spec, log)
	return err
}

// HighWater compares the stream's last sequence with the highest the projection applied: a stream
// that ends below it lost acknowledged events (a damaged block, a power cut with a relaxed
// sync_interval), and the next events will reuse those sequences. After an unclean stop with a
// relaxed sync_interval, the bucket may also have lost its last writes while the consumer's acks
// survived: a consumer whose ack floor is past what the projection holds would never deliver those
// events again. Either way the projection is rebuilt.
func (c *Check) HighWater(ctx context.Context, proj *processor.Projection) error {
	spec := c.Spec
	if proj == nil || spec.Projection == nil {
		return nil
	}
	// The projection's sequence numbers are those of the stream the consumer reads (a hub's
	// aggregate stream). A restarted cluster node may not reach the streams yet (no responders
	// until their replicas have a leader): the reads are retried like the declaration.
	cs := spec.ConsumerStream()
	var s jetstream.Stream
	var hw uint64
	if err := c.Retry(ctx, "recovery check", func(ctx context.Context) (err error) {
		if s, err = c.JS.Stream(ctx, cs); err != nil {
			return fmt.Errorf("recovery check: stream %q: %w", cs, err)
		}
		if hw, err = proj.HighWater(ctx, 256); err != nil {
			return fmt.Errorf("recovery check: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	last := s.CachedInfo().State.LastSeq
	relaxedCut := c.Unclean && c.SyncInterval > 0 // an unclean stop in a relaxed mode
	why := ""
	switch {
	case last == 0 && hw > 0 && !relaxedCut:
		// Nothing left to rebuild from: purging would destroy the only copy of the orders' state.
		// Refused at every start until an operator decides. (After an unclean stop in a relaxed
		// mode an empty stream is the documented loss, the events of the last interval: the
		// projection is rebuilt, to empty, below.)
		return hint.Wrap(fmt.Errorf("recovery check: stream %q is empty but the projection %q holds orders applied up to sequence %d: the stream's events are gone (a deleted or unreadable store?)",
			cs, spec.Projection.Bucket, hw),
			fmt.Sprintf("restore %q from a backup; or, to accept the loss and start over, remove the projection (its directory %q) and start again",
				c.Dir.Stream(c.Account, cs), c.Dir.Stream(c.Account, "KV_"+spec.Projection.Bucket)))
	case hw > last:
		why = fmt.Sprintf("stream %q ends at sequence %d but the projection had applied events up to %d: %d acknowledged events were lost from the store (see nats' recovery warnings)",
			cs, last, hw, hw-last)
	case spec.Consumer != nil && c.BuiltinProjection:
		// Read on every start, so retried like the stream (a cluster electing its leaders).
		var cons jetstream.Consumer
		var kvs jetstream.Stream
		if err := c.Retry(ctx, "recovery check", func(ctx context.Context) (err error) {
			if cons, err = c.JS.Consumer(ctx, cs, spec.Consumer.Durable); err != nil {
				return fmt.Errorf("recovery check: consumer %q: %w", spec.Consumer.Durable, err)
			}
			if kvs, err = c.JS.Stream(ctx, "KV_"+spec.Projection.Bucket); err != nil {
				return fmt.Errorf("recovery check: projection bucket: %w", err)
			}
			return nil
		}); err != nil {
			return err
		}
		floor := cons.CachedInfo().AckFloor.Stream
		// A bucket made after the consumer (projection_bucket renamed, the bucket deleted or moved
		// away) holds none of the events the consumer acknowledged before (never delivered again).
		if ki := kvs.CachedInfo(); floor > 0 && ki.State.Msgs == 0 && ki.Created.After(cons.CachedInfo().Created) {
			why = fmt.Sprintf("projection bucket %q is new (processor.projection_bucket renamed, or the bucket deleted or moved away?) while consumer %q has acknowledged events up to sequence %d",
				spec.Projection.Bucket, spec.Consumer.Durable, floor)
			break
		}
		// Valid events the processor dead-lettered (never applied), read once if asked.
		var dead map[uint64]bool
		deadLettered := func(seq uint64) (_ bool, err error) {
			if dead == nil && spec.DeadLetter != nil {
				if dead, err = processor.DeadLettered(ctx, c.JS, spec.DeadLetter.Name, cs, 20000); err != nil {
					return false, err
				}
			}
			return dead[seq], nil
		}
		// A damaged bucket file loses records silently, in any mode (nats rebuilding a stream's
		// state from its blocks truncates one at the damage, and older revisions come back): the
		// consumer has then acknowledged events past every record left. Said, not rebuilt at
		// start: a dead letter already removed looks the same.
		if hw < floor && c.CheckRecords {
			seq, missing, err := proj.Unapplied(ctx, s, hw+1, floor, 1000, time.Time{}, deadLettered)
			if err != nil {
				return fmt.Errorf("recovery check: %w", err)
			}
			if missing {
				c.Note("consumer %q has acknowledged up to sequence %d, but the projection's newest records applied events up to %d only and lack event %d, which is not among the dead letters: the bucket lost records (a damaged file, a record deleted by hand?), or the event's dead letter was removed; `orderstore projection rebuild` rebuilds the projection from the stream",
					spec.Consumer.Durable, floor, hw, seq)
			}
		}
		if !relaxedCut {
			break
		}
		// The bucket may have lost the writes of its last sync interval while the consumer's acks
		// of those events survived. Check the events acknowledged in that time (and a margin)
		// against the projection.
		notBefore := kvs.CachedInfo().State.LastTime.Add(-3*c.SyncInterval - 2*time.Second)
		seq, missing, err := proj.Unapplied(ctx, s, 1, floor, 20000, notBefore, deadLettered)
		if err != nil {
			return fmt.Errorf("recovery check: %w", err)
		}
		if missing {
			why = fmt.Sprintf("after an unclean stop with sync_interval %s, consumer %q has acknowledged up to sequence %d but the projection lacks event %d (its last writes were not synced)",
				duration.Format(c.SyncInterval), spec.Consumer.Durable, floor, seq)
		}
	}
	if why == "" {
		return nil
	}
	// Rebuild the projection: the consumer is reset first and the bucket purged second: if start-up
	// stops in between, the next start finds the same condition and does it again.
	if spec.Consumer != nil {
		if err := c.JS.DeleteConsumer(ctx, cs, spec.Consumer.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("recovery check: rebuild the projection: reset consumer %q: %w", spec.Consumer.Durable, err)
		}
		if err := c.declareRecovering(ctx); err != nil {
			return err
		}
		c.consumerReset = true
	}
	kvs, err := c.JS.Stream(ctx, "KV_"+spec.Projection.Bucket)
	if err != nil {
		return fmt.Errorf("recovery check: projection bucket: %w", err)
	}
	if err := kvs.Purge(ctx); err != nil {
		return fmt.Errorf("recovery check: rebuild the projection: purge: %w", err)
	}
	// The history index goes with it (a record counts only chunks it
	// wrote, so an old chunk is never read, but it would hold space).
	if h := spec.History; h != nil {
		if hs, err := c.JS.Stream(ctx, h.Name); err == nil {
			if err := hs.Purge(ctx); err != nil {
				return fmt.Errorf("recovery check: rebuild the projection: purge its history index: %w", err)
			}
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("recovery check: history index: %w", err)
		}
	}
	c.Note("%s; the projection is rebuilt from the %d events the stream holds, so that it is the fold of the stream again (and new events reusing lost sequence numbers are applied)",
		why, s.CachedInfo().State.Msgs)
	return nil
}
