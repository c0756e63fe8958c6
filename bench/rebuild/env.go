package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bench/benchkit"
	"github.com/orderstore/orderstore/bootstrap"
)

// env is benchkit.Env with the rebuild's own steps.
type env struct{ *benchkit.Env }

// newEnv makes a fresh store directory and the config every start of the benchmark's appliance
// uses: the defaults (group commit, processor on) on a random client port, no admin listener, and
// storage limits with room for the rebuild's shadow bucket and shadow history index beside the live
// ones (Start validates it).
func newEnv() (*env, error) {
	e, err := benchkit.NewEnv(*tmp, "orderstore-bench-rebuild-", "", 0)
	if err != nil {
		return nil, err
	}
	cfg := &e.Cfg
	cfg.JetStream.MaxFileStore = int64(*maxFileStoreGiB) << 30
	// Room for the events (a few hundred bytes each on disk) many times
	// over; the stream keeps its default 8 GiB when that is enough.
	if need := int64(*events) * 4096; need > cfg.Stream.MaxBytes {
		cfg.Stream.MaxBytes = need
		cfg.JetStream.MaxFileStore = max(cfg.JetStream.MaxFileStore, need+8<<30)
	}
	level := map[bool]slog.Level{false: slog.LevelWarn, true: slog.LevelInfo}[*verbose]
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return &env{e}, nil
}

// resetProjection drops the projection (its bucket, its history index and the processor's durable
// consumer) and declares them again, empty, with the appliance stopped before and after: the next
// start's processor projects the whole stream again, as after the load.
func (e *env) resetProjection(ctx context.Context) error {
	e.Stop()
	if err := e.Start(ctx, false); err != nil {
		return err
	}
	defer e.Stop()
	js, err := e.Connect(false, "bench-rebuild-reset")
	if err != nil {
		return err
	}
	spec := e.Cfg.DeclareSpec()
	if spec.Consumer != nil {
		if err := js.DeleteConsumer(ctx, spec.ConsumerStream(), spec.Consumer.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("deleting the consumer: %w", err)
		}
	}
	if spec.Projection != nil {
		if err := js.DeleteKeyValue(ctx, spec.Projection.Bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("deleting the projection: %w", err)
		}
	}
	if spec.History != nil {
		if err := js.DeleteStream(ctx, spec.History.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("deleting the history index: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = bootstrap.Declare(sctx, js, spec, nil)
	return err
}

// ---------------------------------------------------------------- events

// retryable is a publish to send again: benchkit.Retryable, or a timeout
// (the events carry ids: one sent again is stored once).
func retryable(err error) bool {
	return benchkit.Retryable(err) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// loadStream is the load's random stream (benchkit.NewOrders) and its message ids' prefix.
const loadStream = 0x10ad

// load publishes n events of g of -size bytes each, async with up to window unacked, and returns
// once every one is acked, with how many were sent again.
func load(ctx context.Context, js jetstream.JetStream, g *benchkit.Orders, n, window int) (int, error) {
	w := benchkit.NewWindow(js, window)
	w.Retry = retryable
	seq := 0
	err := w.PublishAll(ctx, n, func() (*nats.Msg, int) {
		o, typ := g.Next()
		m := benchkit.EventMsg(benchkit.OrderID(o), benchkit.Types[typ], *size)
		// An id, so that a publish sent again after a timeout (nats' reply subject collisions leave
		// about one in 10^6 unanswered: bench/README's overload section) is stored once.
		seq++
		m.Header = nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprintf("bench-%d-%d", loadStream, seq)}}
		return m, 0
	})
	return w.Retries, err
}
