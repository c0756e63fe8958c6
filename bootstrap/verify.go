package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrAckFloorAhead is matched (errors.Is) by Verify's error when the consumer's ack floor, or the
// last sequence delivered to it, is ahead of the stream's last sequence.
var ErrAckFloorAhead = errors.New("consumer ahead of the stream")

// Verify is the post-recovery check run after Declare: the stream exists with the declared storage
// and subjects, and the durable consumer's ack floor and delivered sequence are not ahead of the
// stream's last sequence (nats-server#5412: after a power cut a consumer can remember acks for
// messages the stream lost, and would then silently skip the events published next).
func Verify(ctx context.Context, js jetstream.JetStream, spec Spec) error {
	obj := streamObj(spec.Stream.Name)
	s, err := js.Stream(ctx, spec.Stream.Name)
	if err != nil {
		return errorf("recovery check", obj, "", err)
	}
	info := s.CachedInfo() // the lookup's answer
	if info.Config.Storage != spec.Stream.Storage {
		return errorf("recovery check", obj, "", fmt.Errorf("storage is %s, want %s", info.Config.Storage, spec.Stream.Storage))
	}
	for _, subj := range spec.Stream.Subjects {
		if !slices.Contains(info.Config.Subjects, subj) {
			return errorf("recovery check", obj, "", fmt.Errorf("subject %q missing", subj))
		}
	}
	if spec.Consumer == nil {
		return nil
	}
	if spec.Aggregate != nil {
		obj = streamObj(spec.Aggregate.Name)
		if s, err = js.Stream(ctx, spec.Aggregate.Name); err != nil {
			return errorf("recovery check", obj, "", err)
		}
		info = s.CachedInfo()
	}
	cobj := fmt.Sprintf("consumer %q", spec.Consumer.Durable)
	c, err := s.Consumer(ctx, spec.Consumer.Durable)
	if err != nil {
		return errorf("recovery check", cobj, "", err)
	}
	ci := c.CachedInfo()
	if !consumerAhead(ci, info) {
		return nil
	}
	// The stream's state was read first: read it again, so that events
	// stored and delivered in between do not look like a consumer ahead.
	if info, err = s.Info(ctx); err != nil {
		return errorf("recovery check", obj, "", err)
	}
	if !consumerAhead(ci, info) {
		return nil
	}
	what := fmt.Sprintf("ack floor %d", ci.AckFloor.Stream)
	if ci.AckFloor.Stream <= info.State.LastSeq {
		what = fmt.Sprintf("delivered sequence %d (%d awaiting an ack)", ci.Delivered.Stream, ci.NumAckPending)
	}
	return errorf("recovery check", cobj,
		fmt.Sprintf("the stream lost events after a crash (power loss with a relaxed sync_interval?); to resume, reset the consumer: nats consumer rm %s %s, then restart (the projection skips what it already applied)", spec.ConsumerStream(), spec.Consumer.Durable),
		fmt.Errorf("%w: %s is ahead of the stream's last sequence %d", ErrAckFloorAhead, what, info.State.LastSeq))
}

// consumerAhead reports whether a consumer acked or was delivered events past the stream's last
// sequence: the stream lost them, and the consumer would skip the events that reuse their sequence
// numbers (or wait for ever for the acks of deliveries the stream no longer has).
//
// A replicated stream without a leader answers from whichever replica the request reached, maybe
// one still catching up: nothing is judged then (a reset would delete the consumer every node's
// processor shares). Its deliveries are not judged either (a node catching up may be behind them);
// its ack floor is.
func consumerAhead(ci *jetstream.ConsumerInfo, info *jetstream.StreamInfo) bool {
	last := info.State.LastSeq
	if info.Cluster != nil && info.Config.Replicas > 1 {
		return info.Cluster.Leader != "" && ci.AckFloor.Stream > last
	}
	return ci.AckFloor.Stream > last || ci.Delivered.Stream > last
}
