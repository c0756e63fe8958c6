package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/processor"
)

// When the connection closes under the processor, the ack or nak of an
// event cannot be sent: each failure is logged at Warn with the event's
// sequence and the error, counted in AckErrors, and not counted as
// processed or duplicate (the event is redelivered).
func TestSettleFailuresAreLoggedAndCounted(t *testing.T) {
	tests := []struct {
		name   string
		result error // the handler's, once the connection is closed
		want   func(processor.Stats) error
	}{
		{"ack of an applied event", nil, func(st processor.Stats) error {
			if st.Processed != 0 || st.LastAppliedSeq != 0 {
				return errors.New("an event whose ack failed counted as processed")
			}
			return nil
		}},
		{"ack of a duplicate", fmt.Errorf("order o-1: %w", processor.ErrDuplicate), func(st processor.Stats) error {
			if st.Duplicates != 0 {
				return errors.New("an event whose ack failed counted as duplicate")
			}
			return nil
		}},
		{"nak of a failure", errors.New("downstream refused"), func(st processor.Stats) error {
			if st.Failed != 1 { // the handler did fail: the event is retried after ack_wait
				return errors.New("want the handler failure counted once")
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.publish(t, []*nats.Msg{event("orders.created", "o-1", "", "")})
			entered, release := make(chan struct{}), make(chan struct{})
			h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
				close(entered) // once: the connection is gone before any redelivery
				<-release
				return tt.result
			})
			logs := &testkit.LockedBuffer{}
			pc := e.processorConfig(h)
			pc.Logger = slog.New(slog.NewTextHandler(logs, nil))
			js := embeddedtest.JetStream(t, e.srv)
			p, err := processor.New(js, pc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			select {
			case <-entered:
			case err := <-done:
				t.Fatalf("Run: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("handler not called within 10s")
			}
			js.Conn().Close()
			close(release)

			warned := func() bool {
				for line := range strings.Lines(logs.String()) {
					if strings.Contains(line, "level=WARN") && strings.Contains(line, " seq=1 ") && strings.Contains(line, "connection closed") {
						return true
					}
				}
				return false
			}
			embeddedtest.WaitFor(t, 10*time.Second, func() error {
				if st := p.Stats(); st.AckErrors != 1 || !warned() {
					return fmt.Errorf("AckErrors = %d, want 1; Warn line with seq=1 and the error: %t; stats %+v", st.AckErrors, warned(), st)
				}
				return nil
			})
			if err := tt.want(p.Stats()); err != nil {
				t.Errorf("stats %+v: %v", p.Stats(), err)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10s")
			}
		})
	}
}

// A handler's own timeout (its call to another service ran out of time) is the event's failure,
// counted against max_deliver: the event is dead-lettered. Only orderstore's own store calls
// that get no answer are the store's, retried without counting.
func TestHandlerTimeoutCountsAgainstMaxDeliver(t *testing.T) {
	e := newEnv(t)
	h := processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		return fmt.Errorf("payment service: %w", context.DeadlineExceeded)
	})
	p, _ := e.start(t, h)
	e.publish(t, []*nats.Msg{event("orders.created", "o-1", "", "")})
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		dls, _, err := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 10)
		if err != nil || len(dls) != 1 {
			return fmt.Errorf("dead letters %+v (%v), want the event; stats %+v", dls, err, p.Stats())
		}
		if d := dls[0]; d.Deliveries != uint64(e.cfg.Processor.MaxDeliver) || !strings.Contains(d.Error, "payment service") {
			return fmt.Errorf("dead letter %+v, want delivery %d with the handler's error", d, e.cfg.Processor.MaxDeliver)
		}
		return nil
	})
}
