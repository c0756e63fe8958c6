package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Window keeps up to a fixed number of async publishes in flight: Publish first waits for the ack
// of the publish sent that many before, Drain for every one still in flight.
type Window struct {
	js   jetstream.JetStream
	ring []inflight
	sent int
	// Retry says which publish errors to send again, after a pause of
	// 20 ms, as a producer would (at most 100 times); nil: none.
	Retry func(error) bool
	// OnAck, if set, sees each ack with its Publish's tag; an error it returns is the publish's.
	OnAck   func(tag int, ack *jetstream.PubAck) error
	Retries int // publishes sent again
}

type inflight struct {
	f   jetstream.PubAckFuture
	tag int
}

// NewWindow is a Window of n publishes in flight on js.
func NewWindow(js jetstream.JetStream, n int) *Window {
	return &Window{js: js, ring: make([]inflight, n)}
}

// Publish publishes msg, once the publish n before it is acked.
func (w *Window) Publish(ctx context.Context, msg *nats.Msg, tag int) error {
	slot := &w.ring[w.sent%len(w.ring)]
	if slot.f != nil {
		if err := w.wait(ctx, *slot); err != nil {
			return err
		}
	}
	f, err := w.js.PublishMsgAsync(msg)
	if err != nil {
		return fmt.Errorf("publish %d: %w", w.sent, err)
	}
	*slot = inflight{f, tag}
	w.sent++
	return nil
}

// PublishAll publishes the n messages next returns (each with its tag),
// logging its progress every 10 s, and waits for every ack.
func (w *Window) PublishAll(ctx context.Context, n int, next func() (*nats.Msg, int)) error {
	lastLog := time.Now()
	for i := range n {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				Logf("   published %s of %s (%d sent again)", Num(i), Num(n), w.Retries)
			}
		}
		msg, tag := next()
		if err := w.Publish(ctx, msg, tag); err != nil {
			return err
		}
	}
	return w.Drain(ctx)
}

// Drain waits for every publish in flight, the oldest first.
func (w *Window) Drain(ctx context.Context) error {
	for k := range w.ring {
		slot := &w.ring[(w.sent+k)%len(w.ring)]
		if slot.f != nil {
			if err := w.wait(ctx, *slot); err != nil {
				return err
			}
			slot.f = nil
		}
	}
	return nil
}

func (w *Window) wait(ctx context.Context, p inflight) error {
	for attempt := 0; ; attempt++ {
		select {
		case ack := <-p.f.Ok():
			if w.OnAck != nil {
				return w.OnAck(p.tag, ack)
			}
			return nil
		case err := <-p.f.Err():
			if w.Retry == nil || !w.Retry(err) || attempt >= 100 {
				return fmt.Errorf("publish: %w", err)
			}
			w.Retries++
			if err := Sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
			if p.f, err = w.js.PublishMsgAsync(p.f.Msg()); err != nil {
				return fmt.Errorf("publish again: %w", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
