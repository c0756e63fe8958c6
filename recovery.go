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
)

// What start-up does about a damaged store (see docs/reliability.md):
//
//   - nats-server's own recovery warnings (a damaged or truncated block, an
//     unreadable metadata file, a consumer moved back) are kept and reported;
//   - a stream directory that nats did not load is never re-created over:
//     start-up fails, naming the directory;
//   - a consumer whose state file nats cannot read is moved aside and
//     declared again from the start of the stream (the projection skips
//     what it already applied);
//   - a stream that ends below what the projection applied lost events: the
//     projection forgets the lost sequence numbers, so that new events,
//     which reuse them, are applied instead of skipped.
//
// Every such finding is a recovery note: logged at start-up, listed in
// /v1/status and `orderstore status`, counted by orderstore_recovery_notes,
// and named by /readyz's "recovery" check (ready, with a warning).

// streamDir is where nats keeps stream name's files.
func (a *Appliance) streamDir(name string) string {
	return filepath.Join(a.report.StoreDir, "jetstream", "$G", "streams", name)
}

func (a *Appliance) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.recovery = append(a.recovery, msg)
	a.log.Warn("store recovery", "note", msg)
}

// checkLoaded fails start-up when a stream orderstore owns has files on
// disk that nats did not load (a damaged meta.inf): declaring it would
// create an empty stream over the old data.
func (a *Appliance) checkLoaded(ctx context.Context, spec bootstrap.Spec) error {
	names := []string{spec.Stream.Name}
	if spec.DeadLetter != nil {
		names = append(names, spec.DeadLetter.Name)
	}
	if spec.Projection != nil {
		names = append(names, "KV_"+spec.Projection.Bucket)
	}
	for _, name := range names {
		_, err := a.js.Stream(ctx, name)
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		dir := a.streamDir(name)
		if entries, derr := os.ReadDir(filepath.Join(dir, "msgs")); derr == nil && len(entries) > 0 {
			return withHint(fmt.Errorf("recovery check: stream %q has data in %q that nats did not load (see its log lines above: a damaged meta.inf?); orderstore does not re-create the stream over it", name, dir),
				fmt.Sprintf("restore the directory from a backup, or move it away (mv %q %q) to start with an empty stream and keep the old files for inspection", dir, dir+".damaged"))
		}
	}
	return nil
}

// declareRecovering declares spec; a consumer whose stored state nats
// cannot read is moved aside and declared again.
func (a *Appliance) declareRecovering(ctx context.Context, spec bootstrap.Spec) error {
	_, err := bootstrap.Declare(ctx, a.js, spec, a.log.With("component", "bootstrap"))
	if err == nil || spec.Consumer == nil || !strings.Contains(err.Error(), "error creating store for consumer") {
		return err
	}
	dir := filepath.Join(a.streamDir(spec.Stream.Name), "obs", spec.Consumer.Durable)
	aside := fmt.Sprintf("%s.damaged-%d", dir, time.Now().Unix())
	if rerr := os.Rename(dir, aside); rerr != nil {
		return withHint(fmt.Errorf("%w (moving its state %q aside failed: %v)", err, dir, rerr),
			fmt.Sprintf("stop orderstore and move %q away; it is re-created from the start of the stream", dir))
	}
	a.note("consumer %q: nats could not read its state (%v); moved it to %q and declared it again from the start of the stream: the projection skips what it already applied",
		spec.Consumer.Durable, err, aside)
	_, err = bootstrap.Declare(ctx, a.js, spec, a.log.With("component", "bootstrap"))
	return err
}

// checkHighWater compares the stream's last sequence with the highest the
// projection applied: a stream that ends below it lost acknowledged events
// (a damaged block), and the next events will reuse those sequences.
func (a *Appliance) checkHighWater(ctx context.Context, spec bootstrap.Spec) error {
	if a.proj == nil {
		return nil
	}
	s, err := a.js.Stream(ctx, spec.Stream.Name)
	if err != nil {
		return fmt.Errorf("recovery check: stream %q: %w", spec.Stream.Name, err)
	}
	last := s.CachedInfo().State.LastSeq
	hw, err := a.proj.HighWater(ctx, 256)
	if err != nil {
		return fmt.Errorf("recovery check: %w", err)
	}
	if hw <= last {
		return nil
	}
	n, err := a.proj.ForgetAbove(ctx, last)
	if err != nil {
		return fmt.Errorf("recovery check: reset the projection above sequence %d: %w", last, err)
	}
	a.note("stream %q ends at sequence %d but the projection had applied events up to %d: %d acknowledged events were lost from the store (see nats' recovery warnings); the projection keeps their effect, and forgot those sequence numbers in %d orders so that the new events reusing them are applied",
		spec.Stream.Name, last, hw, hw-last, n)
	return nil
}

// startupNotes turns nats-server's start-up warnings into recovery notes.
func (a *Appliance) startupNotes() {
	for _, p := range a.server().StartupProblems() {
		if strings.Contains(p, "Plaintext passwords detected") {
			continue // a remark on the config, not on the store
		}
		a.note("nats: %s", p)
	}
}
