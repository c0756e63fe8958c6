package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is one processor.
type Config struct {
	// Stream and Durable name the stream and its durable pull consumer,
	// which must exist (bootstrap.Declare creates them).
	Stream  string
	Durable string
	// DeadLetterStream is where poison and exhausted events go; its subjects
	// must include DeadLetterSubjectPrefix + ".>". A dead letter of
	// orders.created is published on "<prefix>.orders.created".
	DeadLetterStream        string
	DeadLetterSubjectPrefix string
	// MaxDeliver is the consumer's max_deliver: the delivery on which a
	// failing event is dead-lettered. 0 reads it from the consumer.
	MaxDeliver int
	// Backoff lists the delays before the 1st, 2nd, ... retry of a failed
	// event; the last one repeats. Empty means 1s.
	Backoff []time.Duration
	// Handler applies events. Required.
	Handler Handler
	// Workers is how many orders are handled at once. Default 32.
	Workers int
	// BatchSize caps the events taken in one round. Default: the consumer's
	// max_ack_pending.
	BatchSize int
	// DrainTimeout bounds the shutdown drain: events fetched but not handled
	// by then stay unacked and are redelivered. Default 10s.
	DrainTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Stats are the processor's counters since it started.
type Stats struct {
	Processed    uint64 // events applied and acked
	Failed       uint64 // handler failures that will be retried
	DeadLettered uint64 // events moved to the dead-letter stream
	Poison       uint64 // of which poison (dead-lettered at once)
	Duplicates   uint64 // events acked without effect: already applied
	// LastAppliedSeq is the highest stream sequence this processor applied.
	LastAppliedSeq uint64
	// AckFloor is the consumer's ack floor as last seen.
	AckFloor uint64
	Running  bool
}

// Headers on a dead letter.
const (
	HeaderSubject       = "Orderstore-Original-Subject"
	HeaderSequence      = "Orderstore-Original-Sequence"
	HeaderError         = "Orderstore-Error"
	HeaderDeliveries    = "Orderstore-Delivery-Count"
	HeaderDeadLetterAt  = "Orderstore-Dead-Lettered-At"
	HeaderOriginalMsgID = "Orderstore-Original-Msg-Id"
	HeaderPoison        = "Orderstore-Poison"
	// HeaderReplayOf is set on an event republished from the dead-letter
	// stream: the original stream sequence.
	HeaderReplayOf = "Orderstore-Replay-Of"
)

// Processor runs a Handler over a durable consumer: at-least-once delivery,
// per-order serial handling, retries with backoff, dead letters, and a
// graceful drain on shutdown.
type Processor struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger

	processed, failed, deadLettered, poison, duplicates atomic.Uint64
	lastApplied, ackFloor                               atomic.Uint64
	running                                             atomic.Bool
}

// New checks cfg and returns a processor; Run starts it.
func New(js jetstream.JetStream, cfg Config) (*Processor, error) {
	var errs []error
	if cfg.Stream == "" {
		errs = append(errs, errors.New("Stream is required"))
	}
	if cfg.Durable == "" {
		errs = append(errs, errors.New("Durable is required"))
	}
	if cfg.DeadLetterStream == "" || cfg.DeadLetterSubjectPrefix == "" {
		errs = append(errs, errors.New("DeadLetterStream and DeadLetterSubjectPrefix are required"))
	}
	if cfg.Handler == nil {
		errs = append(errs, errors.New("Handler is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{time.Second}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Processor{js: js, cfg: cfg, log: log}, nil
}

// Stats returns the counters.
func (p *Processor) Stats() Stats {
	return Stats{
		Processed:      p.processed.Load(),
		Failed:         p.failed.Load(),
		DeadLettered:   p.deadLettered.Load(),
		Poison:         p.poison.Load(),
		Duplicates:     p.duplicates.Load(),
		LastAppliedSeq: p.lastApplied.Load(),
		AckFloor:       p.ackFloor.Load(),
		Running:        p.running.Load(),
	}
}

// Running reports whether Run is consuming.
func (p *Processor) Running() bool { return p.running.Load() }

// Run consumes until ctx is done, then stops fetching, finishes and acks
// the events it holds (within DrainTimeout), and returns nil. It returns an
// error only if it cannot start or the consumer goes away.
func (p *Processor) Run(ctx context.Context) error {
	cons, err := p.js.Consumer(ctx, p.cfg.Stream, p.cfg.Durable)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("processor: consumer %q on stream %q: %w", p.cfg.Durable, p.cfg.Stream, err)
	}
	info := cons.CachedInfo()
	if p.cfg.MaxDeliver <= 0 {
		p.cfg.MaxDeliver = info.Config.MaxDeliver
	}
	batch := p.cfg.BatchSize
	if batch <= 0 {
		batch = info.Config.MaxAckPending
	}
	if batch <= 0 || batch > 10_000 {
		batch = 1000
	}
	p.ackFloor.Store(info.AckFloor.Stream)

	msgs := make(chan jetstream.Msg, batch)
	quit := make(chan struct{})
	var consumeErr atomic.Value
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-quit:
		}
	},
		jetstream.PullMaxMessages(batch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				consumeErr.Store(err)
			}
			p.log.Warn("consume", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("processor: consume %q: %w", p.cfg.Durable, err)
	}
	p.running.Store(true)
	defer p.running.Store(false)
	p.log.Info("processor running", "stream", p.cfg.Stream, "consumer", p.cfg.Durable, "max_deliver", p.cfg.MaxDeliver, "batch", batch, "workers", p.cfg.Workers)

	// Keep the ack floor fresh: handlers use it to prune idempotency records.
	floorCtx, stopFloor := context.WithCancel(context.Background())
	defer stopFloor()
	go p.watchFloor(floorCtx, cons)

	// Handlers run on a context that outlives ctx by the drain: in-flight
	// work finishes instead of failing half-way.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	check := time.NewTicker(time.Second)
	defer check.Stop()
loop:
	for {
		var b []jetstream.Msg
		select {
		case m := <-msgs:
			b = append(b, m)
		case <-ctx.Done():
			break loop
		case <-check.C:
			if err, ok := consumeErr.Load().(error); ok {
				cc.Stop()
				close(quit)
				return fmt.Errorf("processor: consumer %q: %w", p.cfg.Durable, err)
			}
			continue
		}
	fill:
		for len(b) < batch {
			select {
			case m := <-msgs:
				b = append(b, m)
			default:
				break fill
			}
		}
		p.handleBatch(hctx, b)
	}

	// Drain: stop pulling, handle what was already delivered to us.
	p.log.Info("processor draining")
	cc.Drain()
	deadline := time.NewTimer(p.cfg.DrainTimeout)
	defer deadline.Stop()
	left := 0
	for {
		var b []jetstream.Msg
	collect:
		for len(b) < batch {
			select {
			case m := <-msgs:
				b = append(b, m)
			default:
				break collect
			}
		}
		if len(b) > 0 {
			p.handleBatch(hctx, b)
			continue
		}
		select {
		case <-cc.Closed():
			// Closed after the last callback returned: take any last one.
			select {
			case m := <-msgs:
				p.handleBatch(hctx, []jetstream.Msg{m})
				continue
			default:
			}
			close(quit)
			p.log.Info("processor stopped", "processed", p.processed.Load())
			return nil
		case m := <-msgs:
			p.handleBatch(hctx, []jetstream.Msg{m})
		case <-deadline.C:
			cancelHandlers()
			close(quit)
			cc.Stop()
			left = len(msgs)
			p.log.Warn("processor drain timed out: unhandled events stay unacked and are redelivered", "left", left)
			return nil
		}
	}
}

func (p *Processor) watchFloor(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(time.Second)
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
		if err == nil {
			p.ackFloor.Store(info.AckFloor.Stream)
		}
	}
}

// item is one message of a batch.
type item struct {
	msg jetstream.Msg
	ev  Event
}

// handleBatch handles one batch: poison events are dead-lettered, the rest
// grouped by order and handled with Workers orders at a time, each order's
// events serially in stream order.
func (p *Processor) handleBatch(ctx context.Context, batch []jetstream.Msg) {
	floor := p.ackFloor.Load()
	groups := make(map[string][]item)
	var order []string
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			// Not a JetStream message: nothing to ack.
			p.log.Error("message without metadata", "subject", m.Subject(), "err", err)
			continue
		}
		ev := Event{
			Subject:   m.Subject(),
			Type:      eventType(m.Subject()),
			Data:      m.Data(),
			Header:    m.Headers(),
			Sequence:  md.Sequence.Stream,
			Time:      md.Timestamp,
			Delivered: md.NumDelivered,
			AckFloor:  floor,
		}
		id, status, err := parse(m.Subject(), m.Data())
		if err != nil {
			p.deadLetter(ctx, m, ev, err)
			continue
		}
		ev.OrderID, ev.Status = id, status
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], item{m, ev})
	}

	work := make(chan string)
	var wg sync.WaitGroup
	for range min(p.cfg.Workers, len(order)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				p.handleOrder(ctx, id, groups[id])
			}
		}()
	}
	for _, id := range order {
		work <- id
	}
	close(work)
	wg.Wait()
}

func (p *Processor) handleOrder(ctx context.Context, id string, items []item) {
	if bh, ok := p.cfg.Handler.(BatchHandler); ok {
		evs := make([]Event, len(items))
		for i, it := range items {
			evs[i] = it.ev
		}
		errs := safeBatch(ctx, bh, id, evs)
		for i, it := range items {
			p.settle(ctx, it, errs[i])
		}
		return
	}
	for _, it := range items {
		p.settle(ctx, it, safeHandle(ctx, p.cfg.Handler, it.ev))
	}
}

// safeHandle turns a handler panic into an error: one bad event must not
// take the appliance down.
func safeHandle(ctx context.Context, h Handler, ev Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h.Handle(ctx, ev)
}

func safeBatch(ctx context.Context, h BatchHandler, id string, evs []Event) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			errs = fill(make([]error, len(evs)), fmt.Errorf("handler panic: %v", r))
		}
	}()
	errs = h.HandleOrder(ctx, id, evs)
	if len(errs) != len(evs) {
		errs = fill(make([]error, len(evs)), fmt.Errorf("handler returned %d results for %d events", len(errs), len(evs)))
	}
	return errs
}

func (p *Processor) settle(ctx context.Context, it item, err error) {
	m, ev := it.msg, it.ev
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			p.log.Warn("ack", "seq", ev.Sequence, "err", aerr)
			return
		}
		p.processed.Add(1)
		for {
			cur := p.lastApplied.Load()
			if ev.Sequence <= cur || p.lastApplied.CompareAndSwap(cur, ev.Sequence) {
				break
			}
		}
	case errors.Is(err, ErrDuplicate):
		m.Ack()
		p.duplicates.Add(1)
	case errors.Is(err, ErrPoison):
		p.deadLetter(ctx, m, ev, err)
	case p.cfg.MaxDeliver > 0 && ev.Delivered >= uint64(p.cfg.MaxDeliver):
		p.deadLetter(ctx, m, ev, fmt.Errorf("failed %d deliveries: %w", ev.Delivered, err))
	default:
		p.failed.Add(1)
		i := min(int(ev.Delivered)-1, len(p.cfg.Backoff)-1)
		delay := p.cfg.Backoff[max(i, 0)]
		p.log.Warn("event failed, will retry", "seq", ev.Sequence, "subject", ev.Subject, "order_id", ev.OrderID,
			"delivery", ev.Delivered, "retry_in", delay.String(), "err", err)
		m.NakWithDelay(delay)
	}
}

// deadLetter copies the event to the dead-letter stream with headers naming
// its origin and the error, then terminates the original so it stops
// blocking. If the copy cannot be stored the original is retried instead:
// nothing is dropped.
func (p *Processor) deadLetter(ctx context.Context, m jetstream.Msg, ev Event, cause error) {
	h := nats.Header{}
	for k, v := range m.Headers() {
		if strings.HasPrefix(k, "Nats-Expected-") {
			continue // publish preconditions of the original, not data
		}
		h[k] = append([]string(nil), v...)
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		h.Set(HeaderOriginalMsgID, id)
	}
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("dlq-%s-%d", p.cfg.Stream, ev.Sequence)) // dedupes a re-run after a crash
	h.Set(HeaderSubject, ev.Subject)
	h.Set(HeaderSequence, strconv.FormatUint(ev.Sequence, 10))
	h.Set(HeaderError, truncate(cause.Error(), 1024))
	h.Set(HeaderDeliveries, strconv.FormatUint(ev.Delivered, 10))
	h.Set(HeaderDeadLetterAt, time.Now().UTC().Format(time.RFC3339Nano))
	poison := errors.Is(cause, ErrPoison)
	if poison {
		h.Set(HeaderPoison, "true")
	}
	msg := &nats.Msg{Subject: p.cfg.DeadLetterSubjectPrefix + "." + ev.Subject, Header: h, Data: m.Data()}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(p.cfg.DeadLetterStream)); err != nil {
		p.failed.Add(1)
		p.log.Error("dead-letter publish failed, will retry the event", "seq", ev.Sequence, "dead_letter_stream", p.cfg.DeadLetterStream, "err", err)
		m.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1])
		return
	}
	if err := m.TermWithReason("dead-lettered to " + p.cfg.DeadLetterStream); err != nil {
		p.log.Warn("term", "seq", ev.Sequence, "err", err)
	}
	p.deadLettered.Add(1)
	if poison {
		p.poison.Add(1)
	}
	p.log.Warn("event dead-lettered", "seq", ev.Sequence, "subject", ev.Subject, "deliveries", ev.Delivered, "poison", poison, "err", cause)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
