package orderstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/leaderget"
	"github.com/orderstore/orderstore/internal/rebuild"
	"github.com/orderstore/orderstore/status"
)

// A projection rebuild in a cluster: one node at a time (a claim), a shadow per node, every
// processor paused for the takeover. See docs/rebuild.md, "In a cluster".

// claimKey is the claim's key in the claim bucket, named after the
// projection bucket with claimBucketSuffix.
const (
	claimKey          = "claim"
	claimBucketSuffix = "_REBUILDING"
)

// rebuildClaim is the claim's value. Paused is set before the takeover pauses the durable and
// cleared once it is resumed: whoever finds it set with no takeover under way (a node stopped
// between the two, a rebuild that failed or was canceled) resumes the durable. Version is the
// claiming node's fold's (none from a release before it): in a rolling upgrade it may be the old.
type rebuildClaim struct {
	Node    string    `json:"node"`
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	Paused  bool      `json:"paused,omitempty"`
	Version string    `json:"version,omitempty"`
}

// readClaim reads the cluster's claim from its bucket's leader; found is false when there is none
// (nor its bucket: no rebuild ran in this cluster yet). A KV get may be answered by a replica that
// has not applied this node's last write of the claim yet, and the compare-and-set that follows
// would then fail (a release left the claim behind so, in CI).
func (a *Appliance) readClaim(ctx context.Context) (c rebuildClaim, rev uint64, found bool, err error) {
	bucket := a.cfg.Processor.ProjectionBucket + claimBucketSuffix
	data, rev, deleted, err := leaderget.LastBySubject(ctx, a.js, "KV_"+bucket, "$KV."+bucket+"."+claimKey)
	switch {
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		return c, 0, false, err
	case err != nil || rev == 0 || deleted:
		return c, 0, false, nil
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, 0, false, fmt.Errorf("the rebuild claim: %w", err)
	}
	return c, rev, true, nil
}

// setClaimPaused records in this node's claim whether the durable is paused.
func (a *Appliance) setClaimPaused(ctx context.Context, paused bool) error {
	c, rev, found, err := a.readClaim(ctx)
	if err != nil {
		return err
	}
	if !found || c.Node != a.cfg.Server.Name {
		return fmt.Errorf("the rebuild claim is not this node's (%+v)", c)
	}
	c.Paused = paused
	data, _ := json.Marshal(c)
	kv, err := a.claimBucket(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Update(ctx, claimKey, data, rev)
	return err
}

// claimBucket is the cluster's rebuild claim, created on first use.
func (a *Appliance) claimBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return a.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      a.cfg.Processor.ProjectionBucket + claimBucketSuffix,
		Description: "which node rebuilds the order projection (managed by orderstore)",
		MaxBytes:    64 << 10,
		Storage:     jetstream.FileStorage,
		Replicas:    a.cfg.Stream.Replicas,
	})
}

// claimRebuild claims rebuild id for this node; another node's claim refuses it, naming that node.
func (a *Appliance) claimRebuild(ctx context.Context, id string) error {
	kv, err := a.claimBucket(ctx)
	if err != nil {
		return fmt.Errorf("projection rebuild: the cluster's claim: %w", err)
	}
	me := a.cfg.Server.Name
	data, _ := json.Marshal(rebuildClaim{Node: me, ID: id, Started: time.Now().UTC(), Version: a.handlerVersion})
	_, err = kv.Create(ctx, claimKey, data)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	c, rev, found, gerr := a.readClaim(ctx)
	if gerr != nil || !found {
		return fmt.Errorf("projection rebuild: the cluster's claim: %w", cmp.Or(gerr, errors.New("given back while read: try again")))
	}
	if c.Node == me {
		// This node's own, left by a rebuild that ended while the claim could not be given back (no
		// rebuild runs here: Start claims one at a time): take it over for this one, resuming the
		// durable if that one left it paused.
		if c.Paused {
			a.resumeEveryProcessor()
		}
		_, err := kv.Update(ctx, claimKey, data, rev)
		return err
	}
	return fmt.Errorf("%w: on node %q (rebuild %s, started %s); follow it there, or cancel it there (orderstore projection rebuild -cancel)",
		rebuild.ErrRunning, c.Node, c.ID, c.Started.Format(time.RFC3339))
}

// releaseRebuild gives this node's claim back, resuming the durable first if the claim says paused.
func (a *Appliance) releaseRebuild(ctx context.Context, id string) {
	c, rev, found, err := a.readClaim(ctx)
	if err == nil && found && c.Node == a.cfg.Server.Name && c.ID == id {
		if c.Paused && !a.resumeEveryProcessor() {
			return // the claim stays, saying paused: the next start resumes
		}
		var kv jetstream.KeyValue
		if kv, err = a.claimBucket(ctx); err == nil {
			err = kv.Delete(ctx, claimKey, jetstream.LastRevision(rev))
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		a.log.Warn("projection rebuild: could not give back the cluster's claim; this node's next start or rebuild takes it over", "err", err)
	}
}

// reconcileRebuildClaim runs at start, after any takeover this node had left was finished: a claim
// of this node's for a rebuild that is over is given back, a pause no takeover holds is ended, and
// a pause a takeover holds (which a concurrent declare may have cleared) is put back.
func (a *Appliance) reconcileRebuildClaim(ctx context.Context) error {
	stream, durable := a.spec.ConsumerStream(), a.cfg.Processor.Durable
	// The durable first, then the claim: the claim says paused before the durable is paused, so a
	// pause seen here whose claim is not marked is no takeover's.
	cons, err := a.js.Consumer(ctx, stream, durable)
	if err != nil {
		return fmt.Errorf("projection rebuild: consumer %q: %w", durable, err)
	}
	paused := cons.CachedInfo().Paused
	c, _, found, err := a.readClaim(ctx)
	if err != nil {
		return fmt.Errorf("projection rebuild: the cluster's claim: %w", err)
	}
	if found && c.Node == a.cfg.Server.Name {
		st := a.rebuild.Status()
		switch {
		case st == nil || !st.Running() || st.ID != c.ID:
			a.log.Info("projection rebuild: giving back this node's claim of a rebuild that is over", "id", c.ID)
			a.releaseRebuild(ctx, c.ID)
			return nil
		case c.Paused && st.State != status.RebuildTakingOver:
			// Stopped between its pause and takeover: the fold goes on; its takeover pauses again.
			a.log.Info("projection rebuild: resuming the processors a takeover that did not begin paused", "id", c.ID)
			if !a.resumeEveryProcessor() {
				return errors.New("could not resume the processors' durable")
			}
			return a.setClaimPaused(ctx, false)
		}
	}
	switch {
	case paused && (!found || !c.Paused):
		a.log.Warn("the processors' durable is paused but no rebuild's takeover holds it: resuming it", "consumer", durable)
		a.resumeEveryProcessor()
	case !paused && found && c.Paused:
		if err := a.setDurablePaused(ctx, true); err != nil {
			return fmt.Errorf("projection rebuild: pausing consumer %q again for node %q's takeover: %w", durable, c.Node, err)
		}
		a.log.Warn("the processors' durable was resumed during node's takeover (a declare?): paused again", "node", c.Node)
	}
	return nil
}

// pauseEveryProcessor pauses the durable for the whole cluster (no event is delivered to any node),
// then waits a little for what the nodes hold to be settled. It returns the resume.
func (a *Appliance) pauseEveryProcessor(ctx context.Context) (func(), error) {
	stream, durable := a.spec.ConsumerStream(), a.cfg.Processor.Durable
	if err := a.setClaimPaused(ctx, true); err != nil {
		return nil, fmt.Errorf("recording the pause in the cluster's rebuild claim: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := a.clusterRetry(pctx, "pause the processors", func(c context.Context) error {
		return a.setDurablePaused(c, true)
	})
	cancel()
	if err != nil {
		// Perhaps applied (an answer lost): the claim still says paused, so its release resumes it.
		return nil, fmt.Errorf("pausing consumer %q of every node: %w", durable, err)
	}
	a.log.Info("every node's processor paused for the projection rebuild's takeover (consumer paused)", "consumer", durable)
	// Events already delivered finish on their nodes. A write of one that lands during the copy is
	// safe either way (the shadow folded it too, and the processor's compare-and-set reads a copied
	// record again), so this wait is only to let them settle first.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := a.js.Consumer(ctx, stream, durable)
		if err != nil || c.CachedInfo().NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			deadline = time.Time{}
		case <-time.After(50 * time.Millisecond):
		}
	}
	return func() {
		if !a.resumeEveryProcessor() {
			return // the claim still says paused: its release, or the next start, resumes
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.setClaimPaused(ctx, false); err != nil {
			a.log.Warn("projection rebuild: could not record the resume in the cluster's claim (its release resumes again)", "err", err)
		}
	}, nil
}

// resumeEveryProcessor ends the durable's pause, retrying while the consumer group elects a leader.
func (a *Appliance) resumeEveryProcessor() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := a.clusterRetry(ctx, "resume the processors", func(c context.Context) error {
		return a.setDurablePaused(c, false)
	})
	if err != nil {
		a.log.Error("could not resume the processors after the projection rebuild's takeover; the next start of this node (or of any node, once the claim is gone) resumes them: restart it", "err", err)
		return false
	}
	a.log.Info("every node's processor resumed after the projection rebuild's takeover")
	return true
}

// setDurablePaused pauses the processors' durable (with no end of its own) or resumes it, and
// returns once the consumer says so: in a cluster nats answers the request when its meta layer has
// taken it, before the consumer's leader applies it, so a node could still be delivered events
// after the pause was answered, or be told the durable runs while it is still paused.
func (a *Appliance) setDurablePaused(ctx context.Context, pause bool) error {
	stream, durable := a.spec.ConsumerStream(), a.cfg.Processor.Durable
	var err error
	if pause {
		_, err = a.js.PauseConsumer(ctx, stream, durable, time.Now().AddDate(100, 0, 0))
	} else {
		_, err = a.js.ResumeConsumer(ctx, stream, durable)
	}
	if err != nil {
		return err
	}
	for {
		c, err := a.js.Consumer(ctx, stream, durable)
		if err == nil && c.CachedInfo().Paused == pause {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("consumer %q: reading it back after its pause or resume: %w", durable, err)
			}
			return fmt.Errorf("consumer %q did not say paused=%v after its request was answered: %w", durable, pause, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// nodeSuffix is this node's name as a bucket name's tail; a name that had
// to be changed gets a hash of itself, so that two names never share one.
func nodeSuffix(name string) string {
	s := strings.Map(func(r rune) rune {
		if wordRune(r) {
			return r
		}
		return '_'
	}, name)
	if s != name {
		h := fnv.New32a()
		h.Write([]byte(name))
		s = fmt.Sprintf("%s_%08x", s, h.Sum32())
	}
	return s
}
