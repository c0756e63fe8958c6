package processor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
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
	// MaxDeliver is the delivery on which a failing event is dead-lettered
	// (processor.max_deliver). The processor enforces it: an event
	// delivered more often than this without a result (the processor
	// stopped or timed out on it) is dead-lettered without handling it
	// again. Keep the consumer's own max_deliver unlimited (-1): nats-server
	// drops an event silently when it reaches that. Default 5.
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
	// DrainTimeout bounds the shutdown drain: at the deadline the handlers'
	// context is canceled, and events fetched but not handled by then stay
	// unacked and are redelivered (one whose handler was cut short is
	// nak'ed). Default 10s.
	DrainTimeout time.Duration
	// MaxBufferedBytes bounds the events held in memory (fetched, queued and
	// being handled), whatever their sizes: when it is reached the
	// processor stops pulling until some settle. An event larger than the
	// bound is still taken, alone. Default 64 MiB.
	MaxBufferedBytes int64
	// SeenUpTo, when set, is taken as the highest stream sequence already
	// seen, for counting events removed unprocessed: a consumer declared
	// again from the start (after a damaged store) does not count what
	// the one before it processed. Zero: the consumer's delivered sequence.
	SeenUpTo uint64
	// Sync, when set, makes durable what the handler and dead-lettering
	// wrote (a group commit of the store): the processor calls it once per
	// batch, after the batch's events were handled and before any of them
	// is acked, and before a dead letter's original is terminated. An
	// error leaves the batch unacked: it is retried after the backoff.
	Sync func(context.Context) error
	// MaxDeadLetterBytes is the largest dead letter (headers and payload)
	// the dead-letter stream takes (its max_msg_size); larger ones are
	// trimmed. Zero: the connection's max payload.
	MaxDeadLetterBytes int
	// Exclusive says no other processor shares Durable (the appliance's:
	// nobody else may bind it). A jump in the sequences delivered to it
	// then means events were taken by someone else (acked behind its
	// back): the processor reads each from the stream, applies it in its
	// place and counts it (Stats.Recovered), instead of leaving it out of
	// the projection.
	Exclusive bool
	// Shared says the durable is shared by processors of the same
	// application (the nodes of a cluster each run one): with Exclusive,
	// a jump in the sequences delivered here is then expected (a sibling
	// got those events). Such events are read back only once the ack floor
	// has passed them, and applied only if the handler, an
	// [AppliedChecker], says that they were not (a sibling applies what it
	// acks); without an AppliedChecker, nothing is read back. Its limit: the
	// projection forgets which events at or below the ack floor it applied
	// (it keeps only that floor), so an event of an order written again
	// after the floor passed the event counts as applied: an outside client
	// that took it from the shared durable goes unnoticed then. The durable
	// guard, not this check, keeps outside clients off the durable.
	Shared bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// Stats are the processor's counters since it started. Its JSON is what
// an HTTP API serves as is.
type Stats struct {
	Running      bool   `json:"running"`       // Run is consuming
	Processed    uint64 `json:"processed"`     // events applied and acked
	Failed       uint64 `json:"failed"`        // handler failures that will be retried
	DeadLettered uint64 `json:"dead_lettered"` // events moved to the dead-letter stream
	Poison       uint64 `json:"poison"`        // of which poison (dead-lettered at once)
	Duplicates   uint64 `json:"duplicates"`    // events acked without effect: already applied
	// LastAppliedSeq is the highest stream sequence this processor applied.
	LastAppliedSeq uint64 `json:"last_applied_seq"`
	// AckErrors counts acks, naks and terms that could not be sent (the
	// connection closed or failed): the event stays unacked and is
	// redelivered after ack_wait, and is not counted as processed,
	// duplicate or dead-lettered. Acks are not confirmed by the server, so
	// one lost on the way is not counted.
	AckErrors uint64 `json:"ack_errors"`
	// RemovedUnprocessed counts events the stream's retention limits
	// (max_age, max_bytes, max_msgs with discard "old") removed before
	// the processor was delivered them: they never reach the handler.
	RemovedUnprocessed uint64 `json:"removed_unprocessed"`
	// Recovered counts events an Exclusive processor was not delivered
	// (another client took them from its durable) and read from the
	// stream and applied itself.
	Recovered uint64 `json:"recovered"`
	// AckFloor is the consumer's ack floor as last seen (LagInfo.AckFloor
	// serves the fresh one).
	AckFloor uint64 `json:"-"`
}

// Progress is whether the processor moves: the consumer's ack floor (every
// event at or below it is settled), the events delivered or waiting
// beyond it, and since when the floor has not moved while events were
// outstanding (zero while it moves or nothing is outstanding).
type Progress struct {
	AckFloor    uint64
	Outstanding uint64
	StuckSince  time.Time
}

// Progress reports the processor's progress as last seen (four times a second
// while Run runs).
func (p *Processor) Progress() Progress {
	pr := Progress{AckFloor: p.ackFloor.Load(), Outstanding: p.outstanding.Load()}
	if at := p.progressAt.Load(); at != 0 && pr.Outstanding > 0 {
		pr.StuckSince = time.Unix(0, at)
	}
	return pr
}

// Headers on a dead letter.
const (
	// HeaderStream names the stream the original was in.
	HeaderStream        = "Orderstore-Original-Stream"
	HeaderSubject       = "Orderstore-Original-Subject"
	HeaderSequence      = "Orderstore-Original-Sequence"
	HeaderError         = "Orderstore-Error"
	HeaderDeliveries    = "Orderstore-Delivery-Count"
	HeaderDeadLetterAt  = "Orderstore-Dead-Lettered-At"
	HeaderOriginalMsgID = "Orderstore-Original-Msg-Id"
	HeaderPoison        = "Orderstore-Poison"
	// HeaderTrimmed is set on a dead letter stored without (part of) the
	// original because the copy would exceed the server's max_payload:
	// "payload 1048000 bytes", "headers 70000 bytes". Replay then reads
	// the original from its stream, while it is still there.
	HeaderTrimmed = "Orderstore-Trimmed"
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
	requeue                    atomic.Pointer[func(jetstream.Msg) bool]
	// Exclusive: recovered events not yet settled (the consumer's ack
	// floor, moved by whoever took them, must not prune them from the
	// projection's idempotency records), and events nak'ed and not yet
	// delivered again (taken if the floor passes them).
	recMu      sync.Mutex
	recPending map[uint64]struct{}
	awaitingMu sync.Mutex
	awaiting   map[uint64]struct{}
	// Shared: the sequence ranges delivered elsewhere, to check once the
	// ack floor passes them.
	gapsMu sync.Mutex
	gaps   []seqRange

	ready     chan struct{} // closed once Run consumes
	readyOnce sync.Once
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
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 5
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = 64 << 20
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
	return &Processor{js: js, cfg: cfg, log: log, ready: make(chan struct{})}, nil
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
		AckFloor:           p.ackFloor.Load(),
		Running:            p.running.Load(),
		RemovedUnprocessed: p.removedUnseen.Load(),
		Recovered:          p.recovered.Load(),
		AckErrors:          p.ackErrors.Load(),
	}
}

// Running reports whether Run is consuming.
func (p *Processor) Running() bool { return p.running.Load() }

// Ready returns a channel that is closed once Run is consuming: the
// consumer was found and its pull subscription is up. It stays closed after
// Run returns (Running tells the current state). A Run that fails before
// it consumes never closes it, so wait on it together with Run's result:
//
//	done := make(chan error, 1)
//	go func() { done <- p.Run(ctx) }()
//	select {
//	case <-p.Ready():
//	case err := <-done:
//		return err
//	}
func (p *Processor) Ready() <-chan struct{} { return p.ready }

// Run consumes until ctx is done, then stops fetching, finishes and acks
// the events it holds (within DrainTimeout), and returns nil. It returns an
// error only if it cannot start or the consumer goes away.
//
// Run returns only once every goroutine it started has finished: no
// handler runs and no event is settled after it returns. At the drain
// deadline it cancels the handlers' context, stops consuming and waits for
// the handler calls under way to return, so a handler that ignores its
// context delays Run's return.
//
// Events are routed by order id to partitions, each applying its own
// batches in turn: an order always lands in the same partition, so its
// events are never handled concurrently, while the partitions keep several
// batches in flight at once.
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
	maxPending := info.Config.MaxAckPending
	if maxPending <= 0 {
		maxPending = 1000
	}
	partitions := p.cfg.Workers
	if _, ok := p.cfg.Handler.(BatchHandler); ok {
		partitions = 4 // each partition pipelines a whole batch
	}
	// Batches are small enough that every partition has one in flight and
	// the server still has room to deliver the next events meanwhile.
	batch := p.cfg.BatchSize
	if batch <= 0 {
		batch = maxPending / (2 * partitions)
	}
	batch = min(max(batch, 1), 10_000)
	p.ackFloor.Store(info.AckFloor.Stream)

	msgs := make(chan jetstream.Msg, maxPending)
	quit := make(chan struct{})
	var consumeErr atomic.Value
	// Memory stays bounded whatever the event sizes: an event takes its
	// size from the budget when it arrives and gives it back once settled;
	// while the budget is spent the callback waits, so the client stops
	// pulling. Each pull asks for at most a quarter of it (never less than
	// the largest message the server takes).
	budget := newByteBudget(p.cfg.MaxBufferedBytes)
	pullBytes := max(int(p.cfg.MaxBufferedBytes/4), 2*int(p.js.Conn().MaxPayload()))
	p.highestSeen.Store(max(info.Delivered.Stream, p.cfg.SeenUpTo))
	enqueue := func(m jetstream.Msg) bool {
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
	// A recovered event that fails is delivered again from here, as nats
	// redelivers the others.
	p.requeue.Store(&enqueue)
	defer p.requeue.Store(nil)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil && p.cfg.Exclusive {
			p.awaitingMu.Lock()
			delete(p.awaiting, md.Sequence.Stream)
			p.awaitingMu.Unlock()
		}
		if md, err := m.Metadata(); err == nil && md.NumDelivered == 1 {
			// Taken behind its back: in its place, before this one.
			for _, r := range p.noteDelivered(md.Sequence.Stream) {
				if !enqueue(r) {
					return
				}
			}
		}
		enqueue(m)
	},
		jetstream.PullMaxMessagesWithBytesLimit(maxPending, pullBytes),
		// Short heartbeats: a pull that stalls (nats-io/nats.go#1622) is
		// noticed and re-issued after seconds, not after the 30s default.
		jetstream.PullExpiry(10*time.Second),
		jetstream.PullHeartbeat(3*time.Second),
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
	p.readyOnce.Do(func() { close(p.ready) })
	p.log.Info("processor running", "stream", p.cfg.Stream, "consumer", p.cfg.Durable, "max_deliver", p.cfg.MaxDeliver,
		"batch", batch, "partitions", partitions)

	// Every goroutine Run starts is waited for before it returns: the
	// floor watcher (last, by this defer), the partitions and the drain.
	floorCtx, stopFloor := context.WithCancel(context.Background())
	var floorDone sync.WaitGroup
	floorDone.Go(func() { p.watchFloor(floorCtx, cons) }) // keeps the ack floor fresh: handlers prune by it
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
	// send routes it to its partition unless stop closes first. Poison
	// events have no order id: they share one partition and reach the
	// dead-letter stream in stream order.
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
	closeParts := func() {
		for _, c := range parts {
			close(c)
		}
	}
	// waitClosed waits until no consume callback of ours runs. Closed
	// follows promptly once the subscription ends (at once when the
	// connection is closed); the bound only guards against a client that
	// never reports it.
	waitClosed := func() {
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			p.log.Warn("consume did not report closed within 5s", "consumer", p.cfg.Durable)
		}
	}

	check := time.NewTicker(time.Second)
	defer check.Stop()
	var held []item // taken from msgs when ctx ended while its partition was full
loop:
	for {
		select {
		case m := <-msgs:
			if it := p.toItem(m); !send(it, ctx.Done()) {
				held = append(held, it)
				break loop
			}
		case <-ctx.Done():
			break loop
		case <-check.C:
			if err, ok := consumeErr.Load().(error); ok {
				// Nothing can be acked any more: stop the handlers too.
				cancelHandlers()
				cc.Stop()
				close(quit)
				closeParts()
				wg.Wait()
				waitClosed()
				return fmt.Errorf("processor: consumer %q: %w", p.cfg.Durable, err)
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
		defer func() {
			closeParts()
			wg.Wait()
		}()
		route := func(it item) bool {
			if !send(it, stopRouting) {
				skipped.Add(1)
				return false
			}
			return true
		}
		for _, it := range held {
			if !route(it) {
				return
			}
		}
		closed := cc.Closed() // closed after the last callback returned
		for {
			select {
			case m := <-msgs:
				if !route(p.toItem(m)) {
					return
				}
				continue
			case <-stopRouting:
				return
			case <-closed:
			}
			// Take any last ones.
			for {
				select {
				case m := <-msgs:
					if !route(p.toItem(m)) {
						return
					}
				default:
					return
				}
			}
		}
	}()
	deadline := time.NewTimer(p.cfg.DrainTimeout)
	defer deadline.Stop()
	select {
	case <-finished:
		close(quit)
	case <-deadline.C:
		// Cancel the handlers, stop consuming, then wait for every handler
		// call to return and be settled: nothing runs after Run returns.
		p.log.Warn("processor drain timed out: canceling handlers; unhandled events stay unacked and are redelivered",
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

// consumer looks the durable up, waiting out what a cluster answers while
// the consumer's group elects a leader (no reply, no responders) for up to
// a minute. A consumer that does not exist fails at once.
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

// watchFloor reads the consumer and the stream four times a second: it keeps the
// ack floor fresh (handlers prune by it), tracks progress, and counts
// events the stream's limits removed before they were delivered.
func (p *Processor) watchFloor(ctx context.Context, cons jetstream.Consumer) {
	p.progressAt.Store(time.Now().UnixNano())
	// Four times a second: the projection prunes its idempotency
	// bookkeeping and seals its history index by the floor, so a hot
	// order's record holds about what a quarter second delivers.
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

// noteDelivered sees the stream sequence of each first delivery, in
// stream order (the consume callback runs one at a time). A jump past the
// highest seen means events were not delivered to this processor: those
// below the stream's first sequence were removed by its limits before it
// saw them; the others went to another consumer on the same durable,
// which an Exclusive processor reads back from the stream and returns, to
// be applied before seq.
func (p *Processor) noteDelivered(seq uint64) []jetstream.Msg {
	prev := p.highestSeen.Load()
	if seq <= prev {
		return nil
	}
	p.highestSeen.Store(seq)
	if seq == prev+1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		p.log.Warn("cannot tell whether events were removed unprocessed", "stream", p.cfg.Stream, "err", err)
		return nil
	}
	first := s.CachedInfo().State.FirstSeq
	if last := min(seq-1, first-1); last > prev {
		n := last - prev
		p.removedUnseen.Add(n)
		p.log.Warn("events removed by the stream's limits before the processor saw them: they are not in the projection",
			"stream", p.cfg.Stream, "removed", n, "first_seq", prev+1, "last_seq", last,
			"hint", "raise stream.max_bytes, max_msgs or max_age, or keep the processor up and caught up")
	}
	if !p.cfg.Exclusive {
		return nil
	}
	if p.cfg.Shared {
		p.addGap(max(prev+1, first), seq)
		return nil
	}
	// What the stream still holds between them was taken by someone
	// else (deleted events are skipped).
	return p.readBack(ctx, max(prev+1, first), seq)
}

// seqRange is the stream sequences [from, upTo).
type seqRange struct{ from, upTo uint64 }

// maxGaps bounds the ranges a Shared processor keeps to check; past it
// the oldest are merged (a range may span events applied here too: they
// are checked like the others).
const maxGaps = 4096

// addGap notes [from, upTo) to check; the ranges stay in order.
func (p *Processor) addGap(from, upTo uint64) {
	if from >= upTo {
		return
	}
	p.gapsMu.Lock()
	defer p.gapsMu.Unlock()
	if n := len(p.gaps); n > 0 && p.gaps[n-1].upTo == from {
		p.gaps[n-1].upTo = upTo
		return
	}
	i := sort.Search(len(p.gaps), func(i int) bool { return p.gaps[i].from >= from })
	p.gaps = slices.Insert(p.gaps, i, seqRange{from, upTo})
	if len(p.gaps) > maxGaps {
		p.gaps[1].from = p.gaps[0].from
		p.gaps = p.gaps[1:]
	}
}

// checkGaps reads back what a Shared processor's siblings were delivered,
// once the ack floor has passed it, and returns the events that the
// handler has not applied: taken by someone else after all.
func (p *Processor) checkGaps(ctx context.Context, floor uint64) []jetstream.Msg {
	ac, ok := p.cfg.Handler.(AppliedChecker)
	p.gapsMu.Lock()
	var due []seqRange
	for len(p.gaps) > 0 && p.gaps[0].upTo-1 <= floor {
		due = append(due, p.gaps[0])
		p.gaps = p.gaps[1:]
	}
	p.gapsMu.Unlock()
	if !ok {
		return nil
	}
	var out []jetstream.Msg
	for i, g := range due {
		ms, next, err := p.unapplied(ctx, ac, g)
		out = append(out, ms...)
		if err != nil || next < g.upTo {
			// An error, or maxRecover reached: the rest at the next look.
			if err != nil {
				p.log.Warn("cannot check the events a sibling processor was delivered; will retry", "from_seq", next, "to_seq", g.upTo-1, "err", err)
			}
			p.gapsMu.Lock()
			p.gaps = append(append([]seqRange{{next, g.upTo}}, due[i+1:]...), p.gaps...)
			p.gapsMu.Unlock()
			return out
		}
	}
	return out
}

// unapplied reads the events of g from the stream and returns those the
// handler has not applied (poison events are skipped: they are dead
// letters, never applied), as recovered events, and the sequence to go on
// from: g.upTo once it read them all, less after maxRecover of them or an
// error.
func (p *Processor) unapplied(ctx context.Context, ac AppliedChecker, g seqRange) ([]jetstream.Msg, uint64, error) {
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return nil, g.from, err
	}
	var out []jetstream.Msg
	next := max(g.from, s.CachedInfo().State.FirstSeq)
	for next < g.upTo && len(out) < maxRecover {
		m, err := s.GetMsg(ctx, next, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			next = g.upTo // nothing more (deleted events are skipped by the subject filter)
			break
		}
		if err != nil {
			return p.recoveredMsgs(out, g.upTo), next, err
		}
		if m.Sequence >= g.upTo {
			next = g.upTo
			break
		}
		ev := Event{Subject: m.Subject, Type: eventType(m.Subject), Data: m.Data, Header: m.Header, Sequence: m.Sequence, Time: m.Time}
		var poison error
		ev.OrderID, ev.Status, poison = parse(m.Subject, m.Data)
		if poison == nil {
			applied, err := ac.Applied(ctx, ev)
			if err != nil {
				return p.recoveredMsgs(out, g.upTo), next, err
			}
			if !applied {
				out = append(out, &recoveredMsg{m: m, stream: p.cfg.Stream, consumer: p.cfg.Durable, delivered: 1, p: p})
			}
		}
		next = m.Sequence + 1
	}
	return p.recoveredMsgs(out, g.upTo), next, nil
}

// recoveredMsgs marks out as recovered (pending until settled; counted
// in Stats.Recovered once applied) and logs them.
func (p *Processor) recoveredMsgs(out []jetstream.Msg, upTo uint64) []jetstream.Msg {
	if len(out) == 0 {
		return nil
	}
	for _, m := range out {
		p.recoveredStart(m.(*recoveredMsg).m.Sequence)
	}
	p.log.Error("events were taken from the processor's durable by another client: read back from the stream to apply them",
		"stream", p.cfg.Stream, "consumer", p.cfg.Durable, "events", len(out), "first_seq", out[0].(*recoveredMsg).m.Sequence, "before_seq", upTo)
	return out
}

// safeFloor is the ack floor events are handed out with: the consumer's,
// below every recovered event not yet settled.
func (p *Processor) safeFloor() uint64 {
	f := p.ackFloor.Load()
	p.recMu.Lock()
	defer p.recMu.Unlock()
	for seq := range p.recPending {
		if seq <= f {
			f = seq - 1
		}
	}
	return f
}

func (p *Processor) recoveredStart(seq uint64) {
	p.recMu.Lock()
	if p.recPending == nil {
		p.recPending = map[uint64]struct{}{}
	}
	p.recPending[seq] = struct{}{}
	p.recMu.Unlock()
}

func (p *Processor) isRecovering(seq uint64) bool {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	_, ok := p.recPending[seq]
	return ok
}

func (p *Processor) recoveredDone(seq uint64) {
	p.recMu.Lock()
	delete(p.recPending, seq)
	p.recMu.Unlock()
}

// readBack reads the events at seqs (or, with upTo, every one in
// [from, upTo)) from the stream as recovered events.
func (p *Processor) readBack(ctx context.Context, from, upTo uint64) []jetstream.Msg {
	s, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		p.log.Error("events taken from the processor's durable could not be read back", "stream", p.cfg.Stream, "err", err)
		return nil
	}
	var out []jetstream.Msg
	for next := max(from, s.CachedInfo().State.FirstSeq); next < upTo && len(out) < maxRecover; {
		m, err := s.GetMsg(ctx, next, jetstream.WithGetMsgSubject(">"))
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				p.log.Error("events taken from the processor's durable by another client could not be read back: they are missing from the projection",
					"stream", p.cfg.Stream, "from_seq", next, "to_seq", upTo-1, "err", err)
			}
			break
		}
		if m.Sequence >= upTo {
			break
		}
		out = append(out, &recoveredMsg{m: m, stream: p.cfg.Stream, consumer: p.cfg.Durable, delivered: 1, p: p})
		next = m.Sequence + 1
	}
	return p.recoveredMsgs(out, upTo)
}

// checkTaken is the floor watcher's part of Exclusive: events nak'ed that
// the ack floor passed without being delivered here again, and the last
// events delivered elsewhere with nothing after them, are read back.
func (p *Processor) checkTaken(ctx context.Context, info *jetstream.ConsumerInfo) {
	if !p.cfg.Exclusive {
		return
	}
	enqueue := p.requeue.Load()
	if enqueue == nil {
		return
	}
	floor := info.AckFloor.Stream
	var taken []uint64
	p.awaitingMu.Lock()
	for seq := range p.awaiting {
		if seq <= floor {
			taken = append(taken, seq)
			delete(p.awaiting, seq)
		}
	}
	p.awaitingMu.Unlock()
	var out []jetstream.Msg
	for _, seq := range taken {
		if p.cfg.Shared {
			p.addGap(seq, seq+1) // delivered to a sibling again
			continue
		}
		out = append(out, p.readBack(ctx, seq, seq+1)...)
	}
	// Nothing pending or awaiting an ack, yet delivered past what this
	// processor saw: the tail went to someone else.
	if prev := p.highestSeen.Load(); info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > prev {
		p.highestSeen.Store(info.Delivered.Stream)
		if p.cfg.Shared {
			p.addGap(prev+1, info.Delivered.Stream+1)
		} else {
			out = append(out, p.readBack(ctx, prev+1, info.Delivered.Stream+1)...)
		}
	}
	if p.cfg.Shared {
		out = append(out, p.checkGaps(ctx, floor)...)
	}
	for _, m := range out {
		if !(*enqueue)(m) {
			return
		}
	}
}

// maxRecover bounds the events read back for one jump.
const maxRecover = 10000

// recoveredMsg is an event read back from the stream: settled already in
// the consumer (by whoever took it), so its acks are no-ops, while a nak
// delivers it again after the delay, with its delivery count one higher,
// as nats would (and max_deliver dead-letters it in the end).
type recoveredMsg struct {
	m                *jetstream.RawStreamMsg
	stream, consumer string
	p                *Processor
	mu               sync.Mutex
	delivered        uint64
}

func (r *recoveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: r.m.Sequence}, NumDelivered: r.delivered,
		Timestamp: r.m.Time, Stream: r.stream, Consumer: r.consumer}, nil
}

// again delivers r once more after delay.
func (r *recoveredMsg) again(delay time.Duration) error {
	time.AfterFunc(delay, func() {
		enqueue := r.p.requeue.Load()
		if enqueue == nil {
			return // Run ended: the event stays missing, as the log said
		}
		r.mu.Lock()
		r.delivered++
		r.mu.Unlock()
		(*enqueue)(r)
	})
	return nil
}
func (r *recoveredMsg) Data() []byte                       { return r.m.Data }
func (r *recoveredMsg) Headers() nats.Header               { return r.m.Header }
func (r *recoveredMsg) Subject() string                    { return r.m.Subject }
func (r *recoveredMsg) Reply() string                      { return "" }
func (r *recoveredMsg) Ack() error                         { return nil }
func (r *recoveredMsg) DoubleAck(context.Context) error    { return nil }
func (r *recoveredMsg) Nak() error                         { return r.again(0) }
func (r *recoveredMsg) NakWithDelay(d time.Duration) error { return r.again(d) }
func (r *recoveredMsg) InProgress() error                  { return nil }
func (r *recoveredMsg) Term() error                        { return nil }
func (r *recoveredMsg) TermWithReason(string) error        { return nil }

// item is one delivered event, parsed.
type item struct {
	msg    jetstream.Msg
	ev     Event
	poison error // the envelope is invalid: dead-letter it
	skip   bool  // not a JetStream message: nothing to settle
	size   int64 // taken from the byte budget
}

func (p *Processor) toItem(m jetstream.Msg) item {
	md, err := m.Metadata()
	if err != nil {
		p.log.Error("message without metadata", "subject", m.Subject(), "err", err)
		return item{msg: m, skip: true, size: msgSize(m)}
	}
	it := item{msg: m, size: msgSize(m), ev: Event{
		Subject:   m.Subject(),
		Type:      eventType(m.Subject()),
		Data:      m.Data(),
		Header:    m.Headers(),
		Sequence:  md.Sequence.Stream,
		Time:      md.Timestamp,
		Delivered: md.NumDelivered,
		AckFloor:  p.safeFloor(),
	}}
	it.ev.OrderID, it.ev.Status, it.poison = parse(m.Subject(), m.Data())
	return it
}

// partition applies the items routed to it, a batch at a time: whatever
// has arrived, up to size.
//
// Once ctx is canceled (the drain deadline) it handles nothing more: it
// empties in, counting the items in skipped, and leaves them unacked.
func (p *Processor) partition(ctx context.Context, in <-chan item, size int, skipped *atomic.Int64, budget *byteBudget) {
	for first := range in {
		if ctx.Err() != nil {
			skipped.Add(1)
			budget.release(first.size)
			continue
		}
		b := []item{first}
	fill:
		for len(b) < size {
			select {
			case it, ok := <-in:
				if !ok {
					break fill
				}
				b = append(b, it)
			default:
				break fill
			}
		}
		skipped.Add(int64(p.handleBatch(ctx, b)))
		for _, it := range b {
			budget.release(it.size)
		}
	}
}

// msgSize is what m holds in memory, about.
func msgSize(m jetstream.Msg) int64 {
	return int64(len(m.Data()) + len(m.Subject()) + headerSize(m.Headers()))
}

// byteBudget is a counting semaphore over bytes.
type byteBudget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	freed chan struct{} // closed and replaced on every release
}

func newByteBudget(max int64) *byteBudget { return &byteBudget{max: max, freed: make(chan struct{})} }

// acquire takes n bytes, waiting while they would exceed the budget (an
// n above the whole budget is taken when nothing else is held). It
// returns false if stop closes first.
func (b *byteBudget) acquire(n int64, stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-stop:
			return false
		}
	}
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// inUse is the bytes held now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// handleBatch handles one batch of one partition: poison events are
// dead-lettered, the rest grouped by order, each order's events in stream
// order. It returns how many it left unhandled because ctx was canceled.
func (p *Processor) handleBatch(ctx context.Context, batch []item) (unhandled int) {
	var dls deadLetters
	defer func() { p.finishDeadLetters(ctx, dls) }()
	groups := make(map[string][]item)
	var order []string
	for _, it := range batch {
		switch {
		case it.skip:
			continue
		case ctx.Err() != nil:
			unhandled++
			continue
		case it.poison != nil:
			p.deadLetter(ctx, it.msg, it.ev, it.poison, &dls)
			continue
		case it.ev.Delivered > uint64(p.cfg.MaxDeliver):
			p.exhausted(ctx, it, &dls)
			continue
		}
		id := it.ev.OrderID
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], it)
	}
	if bh, ok := p.cfg.Handler.(BatchHandler); ok {
		batchOrders := make([][]Event, len(order))
		for k, id := range order {
			for _, it := range groups[id] {
				batchOrders[k] = append(batchOrders[k], it.ev)
			}
		}
		if len(order) == 0 {
			return unhandled
		}
		results := safeBatch(ctx, bh, batchOrders)
		var handled []result
		for k, id := range order {
			for j, it := range groups[id] {
				handled = append(handled, result{it, results[k][j]})
			}
		}
		p.settleAll(ctx, handled, &dls)
		return unhandled
	}
	var handled []result
	for _, id := range order {
		n, rs := p.handleOrder(ctx, id, groups[id])
		unhandled += n
		handled = append(handled, rs...)
	}
	p.settleAll(ctx, handled, &dls)
	return unhandled
}

// result is a handled event and what its handler returned.
type result struct {
	it  item
	err error
}

// settleAll settles a batch's handled events; with Config.Sync, once what
// their handlers wrote is durable.
func (p *Processor) settleAll(ctx context.Context, rs []result, dls *deadLetters) {
	if p.cfg.Sync != nil {
		need := false
		for _, r := range rs {
			need = need || r.err == nil || errors.Is(r.err, ErrDuplicate)
		}
		if need {
			if err := p.cfg.Sync(ctx); err != nil {
				err = fmt.Errorf("make the batch's writes durable: %w", err)
				for i := range rs {
					if rs[i].err == nil || errors.Is(rs[i].err, ErrDuplicate) {
						rs[i].err = err
					}
				}
			}
		}
	}
	for _, r := range rs {
		p.settle(ctx, r.it, r.err, dls)
	}
}

// sync runs Config.Sync, if set.
func (p *Processor) sync(ctx context.Context) error {
	if p.cfg.Sync == nil {
		return nil
	}
	return p.cfg.Sync(ctx)
}

// exhausted settles an event delivered more than MaxDeliver times without
// a result: see deadLetterUnapplied. It is dead-lettered without handling
// it again (an event that crashes the process every time must not
// crash-loop it forever).
func (p *Processor) exhausted(ctx context.Context, it item, dls *deadLetters) {
	p.deadLetterUnapplied(ctx, it, fmt.Errorf("delivered %d times without a result (max_deliver %d): the processor stopped or exceeded ack_wait on it",
		it.ev.Delivered, p.cfg.MaxDeliver), dls)
}

// deadLetterUnapplied dead-letters an event that ran out of deliveries
// (cause says how), unless the handler applied it after all (an earlier
// delivery, here or at a sibling, cut short after its write; a write whose
// ack timed out): then it is acked. A [Withholder] records first that it
// will not apply it, so that nobody still holding an earlier delivery
// applies it after that (if that mark cannot be written, as in a full
// bucket, an [AppliedChecker] is asked instead); an [AppliedChecker] alone
// is asked (which leaves that race open); without either it is
// dead-lettered.
func (p *Processor) deadLetterUnapplied(ctx context.Context, it item, cause error, dls *deadLetters) {
	check := func(ctx context.Context, ev Event) (bool, error) { return false, nil }
	ok := false
	ac, isChecker := p.cfg.Handler.(AppliedChecker)
	if w, is := p.cfg.Handler.(Withholder); is {
		check, ok = func(ctx context.Context, ev Event) (bool, error) {
			applied, err := w.Withhold(ctx, ev)
			if err != nil && isChecker {
				// The mark cannot be written (a full projection bucket,
				// where nobody can apply the event either): asked instead.
				p.log.Warn("cannot withhold an event out of deliveries in its order's record; dead-lettered if it was not applied", "seq", ev.Sequence, "err", err)
				return ac.Applied(ctx, ev)
			}
			return applied, err
		}, true
	} else if isChecker {
		check, ok = ac.Applied, true
	}
	if ok {
		applied, err := check(ctx, it.ev)
		if err != nil {
			p.failed.Add(1)
			p.log.Warn("cannot tell whether an event out of deliveries was applied, will retry", "seq", it.ev.Sequence, "err", err)
			p.settled("nak", it.ev, it.msg.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
			return
		}
		if applied {
			if err := p.sync(ctx); err != nil {
				p.failed.Add(1)
				p.log.Warn("cannot make an applied event's effect durable, will retry", "seq", it.ev.Sequence, "err", err)
				p.settled("nak", it.ev, it.msg.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
				return
			}
			if p.settled("ack", it.ev, it.msg.Ack()) {
				p.duplicates.Add(1)
			}
			return
		}
	}
	p.deadLetter(ctx, it.msg, it.ev, cause, dls)
}

// handleOrder handles one order's events in turn; once ctx is canceled it
// leaves the rest unhandled and returns how many.
func (p *Processor) handleOrder(ctx context.Context, id string, items []item) (unhandled int, rs []result) {
	for i, it := range items {
		if ctx.Err() != nil {
			return len(items) - i, rs
		}
		rs = append(rs, result{it, safeHandle(ctx, p.cfg.Handler, it.ev)})
	}
	return 0, rs
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

func safeBatch(ctx context.Context, h BatchHandler, orders [][]Event) (res [][]error) {
	failAll := func(err error) [][]error {
		out := make([][]error, len(orders))
		for i, evs := range orders {
			out[i] = fill(make([]error, len(evs)), err)
		}
		return out
	}
	defer func() {
		if r := recover(); r != nil {
			res = failAll(fmt.Errorf("handler panic: %v", r))
		}
	}()
	res = h.HandleBatch(ctx, orders)
	if len(res) != len(orders) {
		return failAll(fmt.Errorf("handler returned %d results for %d orders", len(res), len(orders)))
	}
	for i := range res {
		if len(res[i]) != len(orders[i]) {
			return failAll(fmt.Errorf("handler returned %d results for %d events", len(res[i]), len(orders[i])))
		}
	}
	return res
}

func (p *Processor) settle(ctx context.Context, it item, err error, dls *deadLetters) {
	m, ev := it.msg, it.ev
	switch {
	case err == nil:
		if !p.settled("ack", ev, m.Ack()) {
			return
		}
		p.processed.Add(1)
		if _, ok := m.(*recoveredMsg); ok {
			p.recovered.Add(1) // read back, and applied here
		}
		for {
			cur := p.lastApplied.Load()
			if ev.Sequence <= cur || p.lastApplied.CompareAndSwap(cur, ev.Sequence) {
				break
			}
		}
	case errors.Is(err, ErrWithheld):
		// Dead-lettered elsewhere (or that dead letter failed and this
		// delivery is its retry): the dead letter again, which the
		// dead-letter stream stores once, then the ack.
		p.deadLetter(ctx, m, ev, err, dls)
	case errors.Is(err, ErrDuplicate):
		if p.settled("ack", ev, m.Ack()) {
			p.duplicates.Add(1)
		}
	case ctx.Err() != nil:
		// The drain deadline canceled the handler: not the event's fault,
		// so no failure and no dead letter; redelivered at once.
		p.log.Warn("event cut short by the drain timeout, will be redelivered", "seq", ev.Sequence, "err", err)
		p.settled("nak", ev, m.Nak())
	case errors.Is(err, ErrPoison):
		p.deadLetter(ctx, m, ev, err, dls)
	case ev.Delivered >= uint64(p.cfg.MaxDeliver):
		p.deadLetterUnapplied(ctx, it, fmt.Errorf("failed %d deliveries: %w", ev.Delivered, err), dls)
	default:
		p.failed.Add(1)
		i := min(int(ev.Delivered)-1, len(p.cfg.Backoff)-1)
		delay := p.cfg.Backoff[max(i, 0)]
		p.log.Warn("event failed, will retry", "seq", ev.Sequence, "subject", ev.Subject, "order_id", ev.OrderID,
			"delivery", ev.Delivered, "retry_in", delay.String(), "err", err)
		p.settled("nak", ev, m.NakWithDelay(delay))
	}
}

// settled reports whether an ack, nak or term (op) of ev was sent. A
// failure is logged and counted in AckErrors: the event stays unacked and
// the server redelivers it after ack_wait.
func (p *Processor) settled(op string, ev Event, err error) bool {
	if p.cfg.Exclusive && op == "nak" && !p.isRecovering(ev.Sequence) {
		// Delivered here again, or taken (checkTaken).
		p.awaitingMu.Lock()
		if p.awaiting == nil {
			p.awaiting = map[uint64]struct{}{}
		}
		p.awaiting[ev.Sequence] = struct{}{}
		p.awaitingMu.Unlock()
	}
	if err == nil {
		return true
	}
	p.ackErrors.Add(1)
	p.log.Warn(op+" failed, the event will be redelivered after ack_wait", "seq", ev.Sequence, "subject", ev.Subject, "err", err)
	return false
}

// deadLetter copies the event to the dead-letter stream with headers naming
// its origin and the error, then terminates the original so it stops
// blocking. If the copy cannot be stored the original is retried instead:
// nothing is dropped. A copy that would not fit the server's max_payload
// is stored without the original headers, then without the payload
// (HeaderTrimmed says what is missing), so that every event settles.
func (p *Processor) deadLetter(ctx context.Context, m jetstream.Msg, ev Event, cause error, dls *deadLetters) {
	h := nats.Header{}
	for k, v := range m.Headers() {
		if strings.HasPrefix(k, "Nats-Expected-") {
			continue // publish preconditions of the original, not data
		}
		h[k] = append([]string(nil), v...)
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		h.Set(HeaderOriginalMsgID, truncate(id, 256))
	}
	own := func(h nats.Header) {
		// Dedupes a re-run after a crash; the event's time keeps it unique
		// when a damaged store made the stream reuse sequence numbers.
		h.Set(jetstream.MsgIDHeader, fmt.Sprintf("dlq-%s-%d-%d", p.cfg.Stream, ev.Sequence, ev.Time.UnixNano()))
		h.Set(HeaderStream, p.cfg.Stream)
		h.Set(HeaderSubject, ev.Subject)
		h.Set(HeaderSequence, strconv.FormatUint(ev.Sequence, 10))
		h.Set(HeaderError, truncate(strings.ToValidUTF8(cause.Error(), "?"), 1024))
		h.Set(HeaderDeliveries, strconv.FormatUint(ev.Delivered, 10))
		h.Set(HeaderDeadLetterAt, time.Now().UTC().Format(time.RFC3339Nano))
		if errors.Is(cause, ErrPoison) {
			h.Set(HeaderPoison, "true")
		}
	}
	own(h)
	data := m.Data()
	// What the server accepts, with room for the protocol's framing.
	limit := int(p.js.Conn().MaxPayload()) - 512
	if p.cfg.MaxDeadLetterBytes > 0 {
		limit = min(limit, p.cfg.MaxDeadLetterBytes-512)
	}
	if headerSize(h)+len(data) > limit || headerSize(h) > maxDeadLetterHeaders {
		if n := headerSize(m.Headers()); n > 0 {
			h = nats.Header{}
			own(h)
			h.Set(HeaderTrimmed, fmt.Sprintf("headers %d bytes", n))
		}
		if headerSize(h)+len(data) > limit {
			h.Set(HeaderTrimmed, strings.TrimPrefix(h.Get(HeaderTrimmed)+", ", ", ")+fmt.Sprintf("payload %d bytes", len(data)))
			data = nil
		}
	}
	poison := errors.Is(cause, ErrPoison)
	msg := &nats.Msg{Subject: DeadLetterSubject(p.cfg.DeadLetterSubjectPrefix, ev.Subject), Header: h, Data: data}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(p.cfg.DeadLetterStream)); err != nil {
		p.failed.Add(1)
		p.log.Error("dead-letter publish failed, will retry the event", "seq", ev.Sequence, "dead_letter_stream", p.cfg.DeadLetterStream, "err", err)
		p.settled("nak", ev, m.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
		return
	}
	*dls = append(*dls, deadLettered{m: m, ev: ev, cause: cause, poison: poison, trimmed: h.Get(HeaderTrimmed)})
}

// deadLetters are a batch's events copied to the dead-letter stream whose
// originals are terminated once the copies are durable (Config.Sync), with
// one sync for them all.
type deadLetters []deadLettered

type deadLettered struct {
	m       jetstream.Msg
	ev      Event
	cause   error
	poison  bool
	trimmed string
}

// deadLetterMemory bounds the sequences firstDeadLetter remembers.
const deadLetterMemory = 100_000

// firstDeadLetter reports whether this processor counts the dead letter of
// the event at seq for the first time, and remembers it (the oldest
// forgotten past deadLetterMemory).
func (p *Processor) firstDeadLetter(seq uint64) bool {
	p.dlMu.Lock()
	defer p.dlMu.Unlock()
	if _, ok := p.dlSeen[seq]; ok {
		return false
	}
	if p.dlSeen == nil {
		p.dlSeen = map[uint64]struct{}{}
	}
	p.dlSeen[seq] = struct{}{}
	p.dlOrder = append(p.dlOrder, seq)
	if len(p.dlOrder) > deadLetterMemory {
		delete(p.dlSeen, p.dlOrder[0])
		p.dlOrder = p.dlOrder[1:]
	}
	return true
}

// finishDeadLetters makes the batch's dead letters durable, then
// terminates their originals; if they cannot be made durable the originals
// are retried instead.
func (p *Processor) finishDeadLetters(ctx context.Context, dls deadLetters) {
	if len(dls) == 0 {
		return
	}
	if err := p.sync(ctx); err != nil {
		for _, d := range dls {
			p.failed.Add(1)
			p.log.Error("dead letter not made durable, will retry the event", "seq", d.ev.Sequence, "err", err)
			p.settled("nak", d.ev, d.m.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
		}
		return
	}
	for _, d := range dls {
		// If the term is lost the event comes back and is dead-lettered
		// again: the copy is deduplicated by its Nats-Msg-Id, and counted
		// then.
		// Counted once the copy is durable, and once per event here: a
		// redelivery that raced the term (ack_wait passed meanwhile) is
		// dead-lettered again, stored once, and not counted again.
		if p.firstDeadLetter(d.ev.Sequence) {
			p.deadLettered.Add(1)
			if d.poison {
				p.poison.Add(1)
			}
		}
		if !p.settled("term", d.ev, d.m.TermWithReason("dead-lettered to "+p.cfg.DeadLetterStream)) {
			continue
		}
		p.log.Warn("event dead-lettered", "seq", d.ev.Sequence, "subject", truncate(d.ev.Subject, 256), "deliveries", d.ev.Delivered,
			"poison", d.poison, "trimmed", d.trimmed, "err", truncate(d.cause.Error(), 1024))
	}
}

// maxDeadLetterHeaders keeps a dead letter's headers under nats' 64 KiB
// limit on a message's headers.
const maxDeadLetterHeaders = 60 << 10

// maxDeadLetterSubject bounds the part of a dead letter's subject taken
// from the original's.
const maxDeadLetterSubject = 256

// DeadLetterSubject is the subject a dead letter of an event on subject is
// stored on: "<prefix>.<subject>", or, for a subject longer than 256
// bytes, "<prefix>.long.<sha256 of the subject>" (the original subject is
// in the HeaderSubject header either way), so that no event makes a
// subject nats would refuse.
func DeadLetterSubject(prefix, subject string) string {
	if len(subject) <= maxDeadLetterSubject {
		return prefix + "." + subject
	}
	sum := sha256.Sum256([]byte(subject))
	return prefix + ".long." + hex.EncodeToString(sum[:16])
}

// HeaderSize is h's size on the wire (what a stream's max_msg_size
// counts beside the payload).
func HeaderSize(h nats.Header) int { return headerSize(h) }

// headerSize is h's size on the wire.
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
