package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
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
	// MaxDeliver is the delivery on which a failing event is dead-lettered (processor.max_deliver),
	// enforced by the processor, also on an event with no result (docs/processor.md, "Retries and
	// max_deliver"). Keep the consumer's own max_deliver -1: nats-server drops an event silently
	// when it reaches that. Default 5.
	MaxDeliver int
	// Backoff lists the delays before the 1st, 2nd, ... retry of a failed
	// event; the last one repeats. Empty means 1s.
	Backoff []time.Duration
	// Handler applies events. Required.
	Handler Handler
	// Workers is how many orders are handled at once. Default 32.
	Workers int
	// BatchSize caps the events taken in one round. Default: the consumer's max_ack_pending.
	BatchSize int
	// DrainTimeout bounds the shutdown drain: at the deadline the handlers' context is canceled,
	// and events fetched but not handled by then stay unacked and are redelivered (one whose
	// handler was cut short is nak'ed). Default 10s.
	DrainTimeout time.Duration
	// MaxBufferedBytes bounds the events held in memory (fetched, queued and being handled),
	// whatever their sizes: when it is reached the processor stops pulling until some settle. An
	// event larger than the bound is still taken, alone. Default 64 MiB.
	MaxBufferedBytes int64
	// SeenUpTo, when set, is taken as the highest stream sequence already seen, for counting events
	// removed unprocessed: a consumer declared again from the start (after a damaged store) does
	// not count what the one before it processed. Zero: the consumer's delivered sequence.
	SeenUpTo uint64
	// Sync, when set, makes durable what the handler and dead-lettering wrote (a group commit of
	// the store): the processor calls it once per batch, after the batch's events were handled and
	// before any of them is acked, and before a dead letter's original is terminated. An error
	// leaves the batch unacked: it is retried after the backoff.
	Sync func(context.Context) error
	// MaxDeadLetterBytes is the largest dead letter (headers and payload) the dead-letter stream
	// takes (its max_msg_size); larger ones are trimmed. Zero: the connection's max payload.
	MaxDeadLetterBytes int
	// Exclusive says no other processor shares Durable (the appliance's: nobody else may bind it).
	// A jump in the sequences delivered to it then means events were taken by someone else (acked
	// behind its back): the processor reads each from the stream, applies it in its place and
	// counts it (Stats.Recovered), instead of leaving it out of the projection.
	Exclusive bool
	// Shared says the durable is shared by processors of the same application (the nodes of a
	// cluster each run one): with Exclusive, the events a sibling was delivered are read back once
	// the ack floor has passed them, and applied only if the handler, an [AppliedChecker], says
	// they were not (docs/processor.md, "In a cluster"); without one, nothing is read back. Its
	// limit: such an event of an order written since the floor passed it counts as applied (the
	// projection keeps only the floor), so an outside client that took it goes unnoticed; the
	// durable guard keeps them off.
	Shared bool
	// SettledThrough: every event up to this stream sequence was settled (applied or dead-lettered)
	// before the store was restored from a backup; the processor acks them unhandled, so that none
	// is dead-lettered again, nor applied beside the replay the projection holds
	// (docs/operations.md, "Restore").
	SettledThrough uint64
	// Logger; nil discards.
	Logger *slog.Logger
}

// Stats are the processor's counters since it started. Its JSON is what an HTTP API serves as is.
type Stats struct {
	Running      bool   `json:"running"`       // Run is consuming
	Processed    uint64 `json:"processed"`     // events applied and acked
	Failed       uint64 `json:"failed"`        // handler failures that will be retried
	DeadLettered uint64 `json:"dead_lettered"` // events moved to the dead-letter stream
	Poison       uint64 `json:"poison"`        // of which poison (dead-lettered at once)
	Duplicates   uint64 `json:"duplicates"`    // events acked without effect: already applied, or settled before a restore
	// LastAppliedSeq is the highest stream sequence this processor applied.
	LastAppliedSeq uint64 `json:"last_applied_seq"`
	// AckErrors counts acks, naks and terms that could not be sent (the connection closed or
	// failed): the event stays unacked and is redelivered after ack_wait, and is not counted as
	// processed, duplicate or dead-lettered. Acks are not confirmed by the server, so one lost on
	// the way is not counted.
	AckErrors uint64 `json:"ack_errors"`
	// RemovedUnprocessed counts events the stream's retention limits (max_age, max_bytes, max_msgs
	// with discard "old") removed before the processor got them: they never reach the handler.
	RemovedUnprocessed uint64 `json:"removed_unprocessed"`
	// Recovered counts events an Exclusive processor was not delivered (another client took them
	// from its durable) and read from the stream and applied itself.
	Recovered uint64 `json:"recovered"`
}

// Processor runs a Handler over a durable consumer, as the package doc says.
type Processor struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger

	processed, failed, deadLettered, poison, duplicates atomic.Uint64

	dlMu                             sync.Mutex
	dlSeen                           map[uint64]struct{} // dead letters counted (firstDeadLetter)
	dlOrder                          []uint64
	ackErrors, lastApplied, ackFloor atomic.Uint64
	running                          atomic.Bool

	// Progress, kept by watchFloor: when the ack floor last moved (or
	// nothing was outstanding), and how many events are outstanding.
	progressAt  atomic.Int64 // unix nanoseconds
	outstanding atomic.Uint64
	// Events the stream's limits removed before they were delivered, and
	// the highest stream sequence first delivered.
	removedUnseen, highestSeen atomic.Uint64
	recovered                  atomic.Uint64
	requeue                    atomic.Pointer[func(delivery) bool] // Run's enqueue, while it runs
	retries                    retries                             // recovered events nak'ed
	// Exclusive: the recovered events, which the floor handed out stays below (safeFloor: the
	// consumer's ack floor, moved by whoever took them, must not prune them from the projection's
	// idempotency records) until they are settled, and events nak'ed and not yet delivered again
	// (taken if the floor passes them).
	recMu      sync.Mutex // guards recPending, awaiting and storeFails
	recPending map[uint64]struct{}
	awaiting   map[uint64]struct{}
	storeFails map[uint64]uint64 // deliveries of an unsettled event that failed for a store that cannot write
	// Shared: the sequence ranges delivered elsewhere, to check once the ack floor passes them.
	gapsMu sync.Mutex
	gaps   []seqRange

	ready     chan struct{} // closed once Run consumes
	readyOnce sync.Once
	cut       context.Context // canceled by CutDrain
	cutDrain  context.CancelFunc
}

// New checks cfg and returns a processor; Run starts it.
func New(js jetstream.JetStream, cfg Config) (*Processor, error) {
	var errs []error
	required := func(missing bool, msg string) {
		if missing {
			errs = append(errs, errors.New(msg))
		}
	}
	required(cfg.Stream == "", "Stream is required")
	required(cfg.Durable == "", "Durable is required")
	required(cfg.DeadLetterStream == "" || cfg.DeadLetterSubjectPrefix == "", "DeadLetterStream and DeadLetterSubjectPrefix are required")
	required(cfg.Handler == nil, "Handler is required")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	cfg.Workers = orDefault(cfg.Workers, 32)
	cfg.MaxDeliver = orDefault(cfg.MaxDeliver, 5)
	cfg.MaxBufferedBytes = orDefault(cfg.MaxBufferedBytes, 64<<20)
	cfg.DrainTimeout = orDefault(cfg.DrainTimeout, 10*time.Second)
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{time.Second}
	}
	if cfg.Sync == nil {
		cfg.Sync = func(context.Context) error { return nil }
	}
	cut, cutDrain := context.WithCancel(context.Background())
	return &Processor{
		js: js, cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), ready: make(chan struct{}), cut: cut, cutDrain: cutDrain,
		dlSeen: map[uint64]struct{}{}, recPending: map[uint64]struct{}{}, awaiting: map[uint64]struct{}{}, storeFails: map[uint64]uint64{},
		retries: retries{pending: map[*retry]struct{}{}},
	}, nil
}

// orDefault is v if it is positive, else d.
func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Stats returns the counters.
func (p *Processor) Stats() Stats {
	return Stats{
		Processed:          p.processed.Load(),
		Failed:             p.failed.Load(),
		DeadLettered:       p.deadLettered.Load(),
		Poison:             p.poison.Load(),
		Duplicates:         p.duplicates.Load(),
		LastAppliedSeq:     p.lastApplied.Load(),
		Running:            p.running.Load(),
		RemovedUnprocessed: p.removedUnseen.Load(),
		Recovered:          p.recovered.Load(),
		AckErrors:          p.ackErrors.Load(),
	}
}

// Ready returns a channel that is closed once Run is consuming: the consumer was found and its pull
// subscription is up. It stays closed after Run returns (Stats().Running tells the current state).
// A Run that fails before it consumes never closes it, so wait on it together with Run's result:
//
//	done := make(chan error, 1)
//	go func() { done <- p.Run(ctx) }()
//	select {
//	case <-p.Ready():
//	case err := <-done:
//		return err
//	}
func (p *Processor) Ready() <-chan struct{} { return p.ready }

// Run consumes until ctx is done, then stops fetching, finishes and acks what it holds (within
// DrainTimeout), and returns nil. It fails only if it cannot start or the consumer goes away.
//
// Run returns only once every goroutine it started has finished: no handler runs and no event is
// settled after it returns. At the drain deadline (or CutDrain) it cancels the handlers' context,
// stops consuming and waits for the handler calls under way to return, so a handler that ignores
// its context delays Run's return.
//
// Events are routed by order id to partitions, each applying its own batches in turn: an order
// always lands in the same partition, so its events are never handled concurrently, while the
// partitions keep several batches in flight at once.
func (p *Processor) Run(ctx context.Context) error {
	cons, err := p.consumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("processor: consumer %q on stream %q: %w", p.cfg.Durable, p.cfg.Stream, err)
	}
	info := cons.CachedInfo()
	if md := info.Config.MaxDeliver; md > 0 && md <= p.cfg.MaxDeliver {
		p.log.Warn("the consumer's own max_deliver drops events silently when reached; set it to -1 (orderstore declares it so)",
			"consumer", p.cfg.Durable, "consumer_max_deliver", md)
	}
	maxPending := min(orDefault(info.Config.MaxAckPending, 1000), nats.DefaultSubPendingMsgsLimit)
	partitions := p.cfg.Workers
	if _, ok := p.cfg.Handler.(BatchHandler); ok {
		partitions = 4 // each partition pipelines a whole batch
	}
	// Batches are small enough that every partition has one in flight and
	// the server still has room to deliver the next events meanwhile.
	batch := min(max(orDefault(p.cfg.BatchSize, maxPending/(2*partitions)), 1), 10_000)
	p.ackFloor.Store(info.AckFloor.Stream)

	msgs := make(chan delivery, maxPending)
	quit := make(chan struct{})
	var consumeErr atomic.Pointer[error]
	// Memory stays bounded whatever the event sizes: an event takes its size from the budget when
	// it arrives and gives it back once settled; while the budget is spent the callback waits, so
	// the client stops pulling. Each pull asks for at most a quarter of it, and no more than
	// nats.go's subscription holds meanwhile (it drops what arrives past 64 MiB or 500,000
	// messages, a delivery of each event lost; the margin is for status messages and heartbeats),
	// never less than the largest message the server takes. One pull is open at a time
	// (PullThresholdMessages(1)): by default the client asks again once half a pull's messages
	// arrived, and every pull then open may bring as much.
	budget := &byteBudget{max: p.cfg.MaxBufferedBytes, freed: make(chan struct{})}
	maxPayload := int(p.js.Conn().MaxPayload())
	pullBytes := min(max(int(p.cfg.MaxBufferedBytes/4), 2*maxPayload), nats.DefaultSubPendingBytesLimit-64<<10)
	pullBytes = max(pullBytes, maxPayload+4<<10) // one whole message, its subject and reply included
	p.highestSeen.Store(max(info.Delivered.Stream, p.cfg.SeenUpTo))
	enqueue := func(m delivery) bool {
		n := msgSize(m)
		if !budget.acquire(n, quit) {
			return false
		}
		select {
		case msgs <- m:
			return true
		case <-quit:
			budget.release(n)
			return false
		}
	}
	// A recovered event that fails is delivered again from here, as nats redelivers the others.
	p.requeue.Store(&enqueue)
	defer func() {
		p.requeue.Store(nil)
		p.retries.stop() // quit is closed by then: a retry firing returns at once
	}()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err == nil && p.cfg.Exclusive {
			p.recMu.Lock()
			delete(p.awaiting, md.Sequence.Stream)
			p.recMu.Unlock()
		}
		if err == nil && md.NumDelivered == 1 {
			// Events skipped before this one were taken by another
			// client: those read back are applied first, in their place.
			p.noteDelivered(md.Sequence.Stream, enqueue)
		}
		enqueue(m)
	},
		jetstream.PullMaxMessagesWithBytesLimit(maxPending, pullBytes), jetstream.PullThresholdMessages(1),
		// Short heartbeats: a pull that stalls (nats-io/nats.go#1622) is
		// noticed and re-issued after seconds, not after the 30s default.
		jetstream.PullExpiry(10*time.Second),
		jetstream.PullHeartbeat(3*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				consumeErr.Store(&err)
			}
			p.log.Warn("consume", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("processor: consume %q: %w", p.cfg.Durable, err)
	}
	p.retries.start()
	p.running.Store(true)
	defer p.running.Store(false)
	p.readyOnce.Do(func() { close(p.ready) })
	p.log.Info("processor running", "stream", p.cfg.Stream, "consumer", p.cfg.Durable, "max_deliver", p.cfg.MaxDeliver,
		"batch", batch, "partitions", partitions)

	// Every goroutine Run starts is waited for before it returns: the partitions and the drain,
	// then the floor watcher (by this defer), then the retries' timers (by the one above).
	floorCtx, stopFloor := context.WithCancel(context.Background())
	var floorDone sync.WaitGroup
	floorDone.Go(func() { p.watchFloor(floorCtx, cons, func(err error) { consumeErr.Store(&err) }) }) // keeps the ack floor fresh: handlers prune by it
	defer func() {
		stopFloor()
		floorDone.Wait()
	}()

	// Handlers run on a context that outlives ctx by the drain: in-flight
	// work finishes instead of failing half-way.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	var skipped atomic.Int64 // left unhandled at the drain deadline
	parts := make([]chan item, partitions)
	var wg sync.WaitGroup
	for i := range parts {
		parts[i] = make(chan item, batch)
		wg.Go(func() { p.partition(hctx, parts[i], batch, &skipped, budget) })
	}
	// send routes it to its partition unless stop closes first. Poison events have no order id:
	// they share one partition and reach the dead-letter stream in stream order.
	send := func(it item, stop <-chan struct{}) bool {
		h := fnv.New32a()
		h.Write([]byte(it.ev.OrderID))
		select {
		case parts[h.Sum32()%uint32(partitions)] <- it:
			return true
		case <-stop:
			return false
		}
	}
	// stopParts closes the partitions' inputs and waits for them to return.
	stopParts := func() {
		for _, c := range parts {
			close(c)
		}
		wg.Wait()
	}
	// waitClosed waits until no consume callback of ours runs. Closed follows promptly once the
	// subscription ends (at once when the connection is closed); the bound only guards against a
	// client that never reports it.
	waitClosed := func() {
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			p.log.Warn("consume did not report closed within 5s", "consumer", p.cfg.Durable)
		}
	}

	check := time.NewTicker(time.Second)
	defer check.Stop()
	var held *item // taken from msgs when ctx ended while its partition was full
loop:
	for {
		select {
		case m := <-msgs:
			if it := p.toItem(m); !send(it, ctx.Done()) {
				held = &it
				break loop
			}
		case <-ctx.Done():
			break loop
		case <-check.C:
			if err := consumeErr.Load(); err != nil {
				// Nothing can be acked any more: stop the handlers too.
				cancelHandlers()
				cc.Stop()
				close(quit)
				stopParts()
				waitClosed()
				return fmt.Errorf("processor: consumer %q: %w", p.cfg.Durable, *err)
			}
		}
	}

	// Drain: stop pulling, hand out what was already delivered to us.
	p.log.Info("processor draining")
	cc.Drain()
	stopRouting := make(chan struct{}) // closed at the drain deadline
	finished := make(chan struct{})    // closed once every partition returned
	go func() {
		defer close(finished)
		defer stopParts()
		route := func(it item) bool {
			if !send(it, stopRouting) {
				skipped.Add(1)
				return false
			}
			return true
		}
		if held != nil && !route(*held) {
			return
		}
		closed := cc.Closed() // closed after the last callback returned
		for {
			select {
			case m := <-msgs:
				if !route(p.toItem(m)) {
					return
				}
			case <-stopRouting:
				return
			case <-closed:
				// Take any last ones (nobody else receives from msgs now).
				for len(msgs) > 0 && route(p.toItem(<-msgs)) {
				}
				return
			}
		}
	}()
	deadline, cancel := context.WithTimeout(p.cut, p.cfg.DrainTimeout)
	defer cancel()
	select {
	case <-finished:
		close(quit)
	case <-deadline.Done():
		// Cancel the handlers, stop consuming, then wait for every handler
		// call to return and be settled: nothing runs after Run returns.
		p.log.Warn("processor drain timed out or cut short: canceling handlers; unhandled events stay unacked and are redelivered",
			"drain_timeout", p.cfg.DrainTimeout.String())
		cancelHandlers()
		close(stopRouting)
		close(quit) // releases a callback blocked on a full msgs
		cc.Stop()
		<-finished
	}
	waitClosed()
	p.log.Info("processor stopped", "processed", p.processed.Load(), "unhandled", len(msgs)+int(skipped.Load()))
	return nil
}

// CutDrain cuts the drain of Run short, at once and in every later Run, as DrainTimeout does: for a
// stop whose own bound ended (the appliance's Close), so that Run returns once the handler calls
// under way return (given their canceled context) instead of draining on.
func (p *Processor) CutDrain() { p.cutDrain() }

// consumer looks the durable up, waiting out what a cluster answers while the consumer's group
// elects a leader (no reply, no responders) for up to a minute. A missing consumer fails at once.
func (p *Processor) consumer(ctx context.Context) (jetstream.Consumer, error) {
	deadline := time.Now().Add(time.Minute)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := p.js.Consumer(cctx, p.cfg.Stream, p.cfg.Durable)
		cancel()
		transient := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout)
		if err == nil || !transient || ctx.Err() != nil || time.Now().After(deadline) {
			return cons, err
		}
		p.log.Info("consumer not reachable yet, retrying", "consumer", p.cfg.Durable, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
