package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LagInfo is how far a consumer is behind its stream.
type LagInfo struct {
	Pending       uint64    `json:"pending"`     // not yet delivered
	AckPending    int       `json:"ack_pending"` // delivered, not yet acked
	Redelivered   int       `json:"redelivered"` // delivered more than once, not yet acked
	AckFloor      uint64    `json:"ack_floor"`   // every event at or below is done
	LastSeq       uint64    `json:"stream_last_seq"`
	SecondsBehind float64   `json:"seconds_behind"` // age of the oldest unprocessed event; 0 when caught up
	OldestAt      time.Time `json:"oldest_unprocessed_at,omitzero"`
}

// Lag reads the consumer's state and the age of its oldest unprocessed event.
func Lag(ctx context.Context, js jetstream.JetStream, stream, durable string) (LagInfo, error) {
	c, err := js.Consumer(ctx, stream, durable) // its info, fetched by the lookup
	if err != nil {
		return LagInfo{}, fmt.Errorf("consumer %q: %w", durable, err)
	}
	ci := c.CachedInfo()
	l := LagInfo{
		Pending:     ci.NumPending,
		AckPending:  ci.NumAckPending,
		Redelivered: ci.NumRedelivered,
		AckFloor:    ci.AckFloor.Stream,
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return l, fmt.Errorf("stream %q: %w", stream, err)
	}
	l.LastSeq = s.CachedInfo().State.LastSeq
	if ci.NumPending == 0 && ci.NumAckPending == 0 {
		return l, nil
	}
	m, err := s.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(">"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("stream %q: oldest unprocessed: %w", stream, err)
	}
	l.OldestAt = m.Time
	l.SecondsBehind = max(time.Since(m.Time).Seconds(), 0)
	return l, nil
}

// Progress is whether the processor moves: the consumer's ack floor (every event at or below it is
// settled), the events delivered or waiting beyond it, and since when the floor has not moved while
// events were outstanding (zero while it moves or nothing is outstanding).
type Progress struct {
	AckFloor    uint64
	Outstanding uint64
	StuckSince  time.Time
}

// Progress reports the processor's progress as last seen (four times a second while Run runs).
func (p *Processor) Progress() Progress {
	pr := Progress{AckFloor: p.ackFloor.Load(), Outstanding: p.outstanding.Load()}
	if at := p.progressAt.Load(); at != 0 && pr.Outstanding > 0 {
		pr.StuckSince = time.Unix(0, at)
	}
	return pr
}

// watchFloor reads the consumer's info four times a second until ctx is done: it keeps the ack
// floor fresh (handlers prune by it), tracks Progress, and lets checkTaken read back what others
// took. A consumer gone is told to gone (the consume's own report can miss it, a pull between).
func (p *Processor) watchFloor(ctx context.Context, cons jetstream.Consumer, gone func(error)) {
	p.progressAt.Store(time.Now().UnixNano())
	// Four times a second: the projection prunes its idempotency bookkeeping and seals its history
	// index by the floor, so a hot order's record holds about what a quarter second delivers.
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			gone(err)
		}
		if err != nil {
			continue
		}
		floor := info.AckFloor.Stream
		p.checkTaken(ctx, info)
		outstanding := info.NumPending + uint64(info.NumAckPending)
		if floor != p.ackFloor.Swap(floor) || outstanding == 0 {
			p.progressAt.Store(time.Now().UnixNano())
		}
		p.outstanding.Store(outstanding)
	}
}
