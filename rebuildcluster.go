package orderstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/rebuild"
)

// A projection rebuild in a cluster. Every node's processor writes the
// projection, so one node rebuilds at a time and its takeover pauses them
// all:
//
//   - the claim: a key in a small replicated bucket names the node and the
//     rebuild; a second node asking for a rebuild is refused (409) naming
//     the first, until its rebuild ends;
//   - each node folds into a shadow bucket of its own name, so that a node
//     starting up never drops another's shadow;
//   - the takeover pauses the processor's durable itself (nats' consumer
//     pause, replicated by the consumer's Raft group), so that no node is
//     delivered an event until the rebuilt orders are copied in, then
//     resumes it. The pause has no end of its own: if the rebuilding node
//     stops during the takeover, the others wait for it, and its next
//     start finishes the takeover and resumes them (a pause that lapsed
//     half-way would let them apply events the copy then overwrites).

// claimKey is the claim's key in the claim bucket.
const claimKey = "claim"

// rebuildClaim is the claim's value.
type rebuildClaim struct {
	Node    string    `json:"node"`
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
}

// claimBucket is the cluster's rebuild claim, created on first use.
func (a *Appliance) claimBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return a.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      a.cfg.Processor.ProjectionBucket + "_REBUILDING",
		Description: "which node rebuilds the order projection (managed by orderstore)",
		MaxBytes:    64 << 10,
		Storage:     jetstream.FileStorage,
		Replicas:    a.cfg.Stream.Replicas,
	})
}

// claimRebuild claims the rebuild id for this node; a claim another node
// holds refuses it, naming that node.
func (a *Appliance) claimRebuild(ctx context.Context, id string) error {
	kv, err := a.claimBucket(ctx)
	if err != nil {
		return fmt.Errorf("projection rebuild: the cluster's claim: %w", err)
	}
	me := a.cfg.Server.Name
	data, _ := json.Marshal(rebuildClaim{Node: me, ID: id, Started: time.Now().UTC()})
	_, err = kv.Create(ctx, claimKey, data)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	e, gerr := kv.Get(ctx, claimKey)
	if gerr != nil {
		return fmt.Errorf("projection rebuild: the cluster's claim: %w", gerr)
	}
	var c rebuildClaim
	json.Unmarshal(e.Value(), &c)
	if c.Node == me {
		// This node's own, left by a rebuild that ended while the claim
		// could not be given back: take it over for this one.
		_, err := kv.Update(ctx, claimKey, data, e.Revision())
		return err
	}
	return fmt.Errorf("%w: on node %q (rebuild %s, started %s); follow it there, or cancel it there (orderstore projection rebuild -cancel)",
		rebuild.ErrRunning, c.Node, c.ID, c.Started.Format(time.RFC3339))
}

// releaseRebuild gives this node's claim back.
func (a *Appliance) releaseRebuild(ctx context.Context, id string) {
	kv, err := a.claimBucket(ctx)
	if err == nil {
		var e jetstream.KeyValueEntry
		if e, err = kv.Get(ctx, claimKey); err == nil {
			var c rebuildClaim
			json.Unmarshal(e.Value(), &c)
			if c.Node != a.cfg.Server.Name || c.ID != id {
				return // not ours
			}
			err = kv.Delete(ctx, claimKey, jetstream.LastRevision(e.Revision()))
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		a.log.Warn("projection rebuild: could not give back the cluster's claim; this node's next rebuild takes it over", "err", err)
	}
}

// pauseEveryProcessor pauses the durable for the whole cluster (no event
// is delivered to any node), then waits a little for what the nodes hold
// to be settled. It returns the resume.
func (a *Appliance) pauseEveryProcessor(ctx context.Context) (func(), error) {
	stream, durable := a.spec.ConsumerStream(), a.cfg.Processor.Durable
	forever := time.Now().AddDate(100, 0, 0)
	if _, err := a.js.PauseConsumer(ctx, stream, durable, forever); err != nil {
		return nil, fmt.Errorf("pausing consumer %q of every node: %w", durable, err)
	}
	a.log.Info("every node's processor paused for the projection rebuild's takeover (consumer paused)", "consumer", durable)
	// Events already delivered finish on their nodes. A write of one
	// that lands during the copy is safe either way (the shadow folded it
	// too, and the processor's compare-and-set reads a copied record
	// again), so this wait is only to let them settle first.
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
	return func() { a.resumeEveryProcessor() }, nil
}

// resumeEveryProcessor ends the durable's pause, retrying while the
// consumer's group elects a leader.
func (a *Appliance) resumeEveryProcessor() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := a.clusterRetry(ctx, "resume the processors", func(c context.Context) error {
		_, err := a.js.ResumeConsumer(c, a.spec.ConsumerStream(), a.cfg.Processor.Durable)
		return err
	})
	if err != nil {
		a.log.Error("could not resume the processors after the projection rebuild's takeover; resume them with: nats consumer resume "+a.spec.ConsumerStream()+" "+a.cfg.Processor.Durable, "err", err)
		return
	}
	a.log.Info("every node's processor resumed after the projection rebuild's takeover")
}

// nodeSuffix is this node's name as a bucket name's tail.
func nodeSuffix(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
}
