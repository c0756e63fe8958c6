package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
)

// env is one store directory and the appliance running on it (if any).
// The appliance can be stopped and started again on the same store.
type env struct {
	dir   string
	cfg   orderstore.Config
	app   *orderstore.Appliance
	conns []*nats.Conn
}

// newEnv makes a fresh store directory and the config every start of
// the benchmark's appliance uses: the defaults (group commit, processor
// on) on a random client port, no admin listener, and storage limits
// with room for the rebuild's shadow bucket and shadow history index
// beside the live ones.
func newEnv(o options) (*env, error) {
	dir, err := os.MkdirTemp(o.tmp, "orderstore-bench-rebuild-")
	if err != nil {
		return nil, err
	}
	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir = dir
	cfg.Server.Port = -1
	cfg.Admin.Listen = ""
	cfg.JetStream.MaxFileStore = o.maxFileStore
	// Room for the events (a few hundred bytes each on disk) many times
	// over; the stream keeps its default 8 GiB when that is enough.
	if need := int64(o.events) * 4096; need > cfg.Stream.MaxBytes {
		cfg.Stream.MaxBytes = need
		cfg.JetStream.MaxFileStore = max(cfg.JetStream.MaxFileStore, need+8<<30)
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := cfg.Validate(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &env{dir: dir, cfg: cfg}, nil
}

// start starts the appliance on the store, with or without its processor.
// Without it, the appliance does not declare the processor's consumer:
// the whole spec is declared, as the appliance would.
func (e *env) start(ctx context.Context, processorOn bool) error {
	cfg := e.cfg
	cfg.Processor.Enabled = processorOn
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	app, err := orderstore.Start(sctx, cfg)
	if err != nil {
		return err
	}
	e.app = app
	if !processorOn {
		js, err := e.connect(false, "bench-rebuild-declare")
		if err != nil {
			return err
		}
		if _, err := bootstrap.Declare(sctx, js, e.cfg.DeclareSpec(), nil); err != nil {
			return err
		}
	}
	return nil
}

// connect opens a connection: in-process as the appliance's own, or over
// TCP as an external producer.
func (e *env) connect(tcp bool, name string, jsopts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	var nc *nats.Conn
	var err error
	if tcp {
		nc, err = nats.Connect(e.app.ClientURL(), nats.Name(name))
	} else {
		nc, err = nats.Connect("", nats.InProcessServer(e.app), nats.Name(name))
	}
	if err != nil {
		return nil, err
	}
	e.conns = append(e.conns, nc)
	return jetstream.New(nc, jsopts...)
}

// stop closes the connections and stops the appliance; the store stays.
func (e *env) stop() {
	for _, nc := range e.conns {
		nc.Close()
	}
	e.conns = nil
	if e.app != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := e.app.Close(cctx); err != nil {
			logf("warning: closing the appliance: %v", err)
		}
		cancel()
		e.app = nil
	}
}

// close stops the appliance and removes the store.
func (e *env) close() {
	e.stop()
	if err := os.RemoveAll(e.dir); err != nil {
		logf("warning: removing %s: %v", e.dir, err)
	}
}

// resetProjection drops the projection (its bucket, its history index and
// the processor's durable consumer) and declares them again, empty, with
// the appliance stopped before and after: the next start's processor
// projects the whole stream again, as after the load.
func (e *env) resetProjection(ctx context.Context) error {
	e.stop()
	if err := e.start(ctx, false); err != nil {
		return err
	}
	defer e.stop()
	js, err := e.connect(false, "bench-rebuild-reset")
	if err != nil {
		return err
	}
	spec := e.cfg.DeclareSpec()
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

// caughtUp waits until the appliance's processor has nothing pending or
// unacked and has processed at least want events since start.
func (e *env) caughtUp(ctx context.Context, want uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := e.app.Lag(lctx)
		cancel()
		st := e.app.Stats()
		if err == nil && l.Pending == 0 && l.AckPending == 0 && st.Processed+st.Duplicates+st.DeadLettered >= want {
			if st.DeadLettered > 0 {
				return fmt.Errorf("processor: %d events dead-lettered", st.DeadLettered)
			}
			return nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			logf("   processed %s, pending %s, ack pending %d", num(int(st.Processed)), num(int(l.Pending)), l.AckPending)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not caught up after %s: pending %d, ack pending %d, processed %d (%v)", timeout, l.Pending, l.AckPending, st.Processed, err)
		}
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
}

// ---------------------------------------------------------------- events

var types = []string{"created", "paid", "shipped", "delivered", "cancelled"}

// generator picks each event's order uniformly at random among orders
// (a fixed seed): an order's first four events are created, paid,
// shipped, delivered; later ones paid, shipped, delivered (30% each) or
// cancelled (10%).
type generator struct {
	r       *rand.Rand
	count   []int32
	size    int
	id, seq uint64 // message ids: "bench-<id>-<seq>"
}

func newGenerator(seed, stream uint64, orders, size int) *generator {
	return &generator{r: rand.New(rand.NewPCG(seed, stream)), count: make([]int32, orders), size: size, id: stream}
}

func (g *generator) next() *nats.Msg {
	o := g.r.IntN(len(g.count))
	c := g.count[o]
	g.count[o]++
	typ := types[min(c, 3)]
	if c >= 4 {
		switch x := g.r.IntN(10); {
		case x < 3:
			typ = types[1]
		case x < 6:
			typ = types[2]
		case x < 9:
			typ = types[3]
		default:
			typ = types[4]
		}
	}
	m := eventMsg(orderID(o), typ, g.size)
	// An id, so that a publish sent again after a timeout (nats' reply
	// subject collisions leave about one in 10^6 unanswered: bench/README's
	// overload section) is stored once.
	g.seq++
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bench-%d-%d", g.id, g.seq))
	return m
}

// distinct is how many orders got at least one event.
func (g *generator) distinct() int {
	n := 0
	for _, c := range g.count {
		if c > 0 {
			n++
		}
	}
	return n
}

func orderID(o int) string { return fmt.Sprintf("order-%06d", o) }

// eventMsg is an event of about size bytes: its order, its status, and
// a "note" that pads it (the projection keeps none of it).
func eventMsg(id, typ string, size int) *nats.Msg {
	head := `{"order_id":"` + id + `","status":"` + typ + `","note":"`
	pad := max(size-len(head)-2, 0)
	data := make([]byte, 0, len(head)+pad+2)
	data = append(data, head...)
	data = append(data, strings.Repeat("x", pad)...)
	data = append(data, `"}`...)
	return &nats.Msg{Subject: "orders." + typ, Data: data}
}

// retryable is a publish the appliance asks to send again: a 429 (its
// ingest service sheds load) or no responders (publishes paused).
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		(errors.As(err, &apiErr) && apiErr.Code == 429)
}

// load publishes n events of g, async with up to window unacked, and
// returns once every one is acked, with how many were sent again.
func load(ctx context.Context, js jetstream.JetStream, g *generator, n, window int) (int, error) {
	ring := make([]jetstream.PubAckFuture, window)
	retries := 0
	wait := func(f jetstream.PubAckFuture) error {
		for attempt := 0; ; attempt++ {
			select {
			case <-f.Ok():
				return nil
			case err := <-f.Err():
				if !retryable(err) || attempt >= 100 {
					return fmt.Errorf("publish: %w", err)
				}
				retries++
				if err := sleep(ctx, 20*time.Millisecond); err != nil {
					return err
				}
				if f, err = js.PublishMsgAsync(f.Msg()); err != nil {
					return fmt.Errorf("publish again: %w", err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	lastLog := time.Now()
	for i := range n {
		if i%1024 == 0 {
			if ctx.Err() != nil {
				return retries, ctx.Err()
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				logf("   published %s of %s", num(i), num(n))
			}
		}
		slot := i % window
		if ring[slot] != nil {
			if err := wait(ring[slot]); err != nil {
				return retries, err
			}
		}
		f, err := js.PublishMsgAsync(g.next())
		if err != nil {
			return retries, fmt.Errorf("publish %d: %w", i, err)
		}
		ring[slot] = f
	}
	for _, f := range ring {
		if f != nil {
			if err := wait(f); err != nil {
				return retries, err
			}
		}
	}
	return retries, nil
}
