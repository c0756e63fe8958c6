package orderstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ingestPrefix is where producers' publishes on the stream's subjects land
// in StreamAccount with durability "group-commit": every account imports
// the subject S as a service that delivers it on ingestPrefix+S, where the
// ingest service takes it. No client can publish on S in StreamAccount
// itself (only orderstore's own connections live there), so no publish
// reaches the stream but through the ingest service.
const ingestPrefix = "_ORDERSTORE_INGEST."

func ingestSubject(subject string) string { return ingestPrefix + subject }

// Bounds of the ingest service.
const (
	ingestMaxBatch      = 20000    // events acknowledged after one sync, at most
	ingestMaxBatchBytes = 64 << 20 // their acks' bytes, at most
	ingestMaxInFlight   = 100000   // events taken and not yet answered
	ingestMaxBytes      = 64 << 20 // their bytes (and what may wait to be taken)
	ingestAckTimeout    = 30 * time.Second
)

// ingest is the group-commit ingest service: it takes producers' publishes
// (with their Nats-Msg-Id and Nats-Expected-* headers) in arrival order,
// publishes them into the stream without waiting, collects the stream's
// acks, and answers each producer with its stream's own ack only once a
// sync made the event durable. An error ack (a failed precondition, a full
// store) is answered at once: nothing was stored.
type ingest struct {
	nc        *nats.Conn
	c         *committer
	log       *slog.Logger
	ackPrefix string

	reqSub, ackSub *nats.Subscription

	mu          sync.Mutex
	space       *sync.Cond
	closed      bool
	next        uint64
	pending     map[uint64]pendingPub // published, the stream's ack awaited
	stored      []ackReply            // acked by the stream, a sync awaited
	storedBytes int
	inFlight    int // len(pending)+len(stored)
	inBytes     int
	kick        chan struct{}
	stop        chan struct{}
	done        chan struct{}
	subjects    []string        // the stream's subjects: nothing else is republished
	abortCtx    context.Context // canceled when Close gives up waiting
	abort       context.CancelFunc
}

type pendingPub struct {
	reply string
	size  int
	at    time.Time
}

type ackReply struct {
	reply  string
	data   []byte
	header nats.Header // a status the stream answered with (503 no responders)
	size   int
}

// startIngest subscribes the ingest service on nc for subjects.
func startIngest(nc *nats.Conn, c *committer, subjects []string, log *slog.Logger) (*ingest, error) {
	in := &ingest{nc: nc, c: c, log: log, ackPrefix: internalInboxPrefix + ".ingest." + nuid.Next() + ".",
		pending: map[uint64]pendingPub{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		subjects: subjects}
	in.abortCtx, in.abort = context.WithCancel(context.Background())
	in.space = sync.NewCond(&in.mu)
	var err error
	if in.ackSub, err = nc.Subscribe(in.ackPrefix+"*", in.onAck); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	// One subscription: a producer's events reach the stream in the order
	// it sent them.
	if in.reqSub, err = nc.Subscribe(ingestPrefix+">", in.onPublish); err != nil {
		in.ackSub.Unsubscribe()
		return nil, fmt.Errorf("ingest: %w", err)
	}
	for _, s := range []*nats.Subscription{in.ackSub, in.reqSub} {
		if err := s.SetPendingLimits(ingestMaxInFlight, ingestMaxBytes); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	go in.commitLoop()
	go in.sweep()
	return in, nil
}

// onPublish takes one producer publish.
func (in *ingest) onPublish(m *nats.Msg) {
	subject := strings.TrimPrefix(m.Subject, ingestPrefix)
	if !matchesAny(in.subjects, subject) {
		// Only the stream's subjects are imported here; anything else
		// (a leaf peer's publish) is not ours to store.
		if m.Reply != "" {
			in.reply(m.Reply, apiError(400, 10077, "orderstore: "+truncateSubject(subject)+" is not a subject of the stream"))
		}
		return
	}
	if len(subject) > in.maxSubject() {
		// Its republish would exceed nats' protocol line (4 KiB), and nats
		// would close the ingest service's connection for it.
		if m.Reply != "" {
			in.reply(m.Reply, apiError(400, 10077, fmt.Sprintf("orderstore: a subject of %d bytes is longer than the %d the stream takes", len(subject), in.maxSubject())))
		}
		return
	}
	out := &nats.Msg{Subject: subject, Header: m.Header, Data: m.Data}
	if m.Reply == "" { // a plain publish: nobody waits for an ack
		if err := in.nc.PublishMsg(out); err != nil {
			in.log.Warn("ingest: publish without reply lost", "subject", subject, "err", err)
		}
		return
	}
	size := len(m.Data) + len(m.Subject) + len(m.Reply) + 64
	for k, v := range m.Header {
		size += len(k)
		for _, s := range v {
			size += len(s) + 4
		}
	}
	in.mu.Lock()
	for !in.closed && (in.inFlight >= ingestMaxInFlight || in.inBytes+size > ingestMaxBytes && in.inFlight > 0) {
		in.space.Wait() // back-pressure: the subscription's buffer fills, producers wait
	}
	if in.closed {
		in.mu.Unlock()
		in.reply(m.Reply, apiError(503, 10077, "orderstore is stopping: the event was not stored, publish it again"))
		return
	}
	in.next++
	id := in.next
	in.pending[id] = pendingPub{reply: m.Reply, size: size, at: time.Now()}
	in.inFlight++
	in.inBytes += size
	in.c.stats.waiting.Store(int64(in.inFlight))
	in.mu.Unlock()
	out.Reply = in.ackPrefix + strconv.FormatUint(id, 36)
	if err := in.nc.PublishMsg(out); err != nil {
		if p, ok := in.take(id); ok {
			in.reply(p.reply, apiError(503, 10077, "orderstore: the event could not be passed to its stream: "+err.Error()))
		}
	}
}

// maxControlLine is nats' limit on a protocol line ("HPUB <subject>
// <reply> <sizes>"): a client that sends a longer one is disconnected.
const maxControlLine = 4096

// maxSubject is the longest subject the service republishes: what fits a
// protocol line with its reply subject and sizes.
func (in *ingest) maxSubject() int { return maxControlLine - len(in.ackPrefix) - 13 - 40 }

// errSubjectTooLong is returned for a subject orderstore's own connection
// could not publish on without nats closing it.
var errSubjectTooLong = errors.New("subject too long to publish: it would exceed nats' 4 KiB protocol line")

// take removes a pending publish, if it is still there.
func (in *ingest) take(id uint64) (pendingPub, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	p, ok := in.pending[id]
	if !ok {
		return p, false
	}
	delete(in.pending, id)
	in.release(p.size)
	return p, true
}

// release frees one event's place; in.mu held.
func (in *ingest) release(size int) {
	in.inFlight--
	in.inBytes -= size
	in.c.stats.waiting.Store(int64(in.inFlight))
	in.space.Signal()
}

// onAck takes the stream's ack of one publish.
func (in *ingest) onAck(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, in.ackPrefix), 36, 64)
	if err != nil {
		return
	}
	// Every answer of the stream waits for the round, errors too: a
	// refused Nats-Expected-Last-Sequence may rest on an event acked in
	// the same batch, which the round has yet to make durable. The
	// answer goes back as the stream wrote it (headers included).
	in.mu.Lock()
	p, ok := in.pending[id]
	if !ok {
		in.mu.Unlock()
		return // answered by the sweeper already
	}
	delete(in.pending, id)
	in.stored = append(in.stored, ackReply{reply: p.reply, data: append([]byte(nil), m.Data...), header: m.Header, size: p.size})
	in.storedBytes += len(m.Data)
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// commitLoop acknowledges what the stream stored, one sync per batch. A
// batch is everything stored while the previous sync ran (up to the
// bounds), so it closes when that sync ends, never on a timer.
func (in *ingest) commitLoop() {
	defer close(in.done)
	for {
		select {
		case <-in.kick:
		case <-in.stop:
			return
		}
		for {
			in.mu.Lock()
			n, size := 0, 0
			for n < len(in.stored) && n < ingestMaxBatch && (size < ingestMaxBatchBytes || n == 0) {
				size += len(in.stored[n].data)
				n++
			}
			batch := append([]ackReply(nil), in.stored[:n]...)
			in.stored = append(in.stored[:0], in.stored[n:]...)
			in.storedBytes -= size
			in.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), ingestAckTimeout)
			stop := context.AfterFunc(in.abortCtx, cancel)
			err := in.c.Sync(ctx)
			stop()
			cancel()
			var fail []byte
			if err != nil {
				fail = apiError(503, 10077, "orderstore: the event may not be on disk ("+err.Error()+"): not acknowledged; publish it again with the same Nats-Msg-Id once orderstore is back")
			}
			for _, a := range batch {
				switch {
				case err != nil:
					in.reply(a.reply, fail)
				case len(a.header) > 0:
					in.nc.PublishMsg(&nats.Msg{Subject: a.reply, Header: a.header, Data: a.data})
				default:
					in.reply(a.reply, a.data)
				}
			}
			in.mu.Lock()
			for _, a := range batch {
				in.release(a.size)
			}
			in.mu.Unlock()
			if err == nil {
				acked := 0
				for _, a := range batch {
					// nats writes an error answer as {"error":{...}}.
					if len(a.header) == 0 && !bytes.HasPrefix(a.data, []byte(`{"error"`)) {
						acked++
					}
				}
				in.c.stats.mu.Lock()
				in.c.stats.batchHist.observe(float64(len(batch)))
				in.c.stats.acked += uint64(acked)
				in.c.stats.mu.Unlock()
			}
		}
	}
}

func (in *ingest) reply(subject string, data []byte) {
	if err := in.nc.Publish(subject, data); err != nil {
		in.log.Debug("ingest: reply lost (the producer will time out)", "err", err)
	}
}

// sweep answers publishes whose stream ack never came (a restart of nats
// by the store guard drops them) so that they do not hold their places.
func (in *ingest) sweep() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-t.C:
		}
		var late []pendingPub
		in.mu.Lock()
		for id, p := range in.pending {
			if time.Since(p.at) > ingestAckTimeout {
				delete(in.pending, id)
				in.release(p.size)
				late = append(late, p)
			}
		}
		in.mu.Unlock()
		for _, p := range late {
			in.reply(p.reply, apiError(503, 10077, "orderstore: the stream did not answer in time: the event may or may not be stored; publish it again with the same Nats-Msg-Id"))
		}
	}
}

// Close stops taking publishes (those already delivered to the service
// are still taken), waits (up to ctx) until those taken are answered, and
// stops; what is still unanswered then gets a 503.
func (in *ingest) Close(ctx context.Context) {
	if err := in.reqSub.Drain(); err != nil {
		in.reqSub.Unsubscribe()
	}
	for in.reqSub.IsValid() && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	for {
		in.mu.Lock()
		n := in.inFlight
		in.mu.Unlock()
		if n == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	in.mu.Lock()
	in.closed = true
	in.space.Broadcast()
	in.mu.Unlock()
	in.abort() // a sync still running is given up on: its batch gets an error
	close(in.stop)
	<-in.done
	in.ackSub.Unsubscribe()
	in.mu.Lock()
	var left []string
	for id, p := range in.pending {
		left = append(left, p.reply)
		delete(in.pending, id)
	}
	for _, a := range in.stored {
		left = append(left, a.reply)
	}
	in.stored = nil
	in.mu.Unlock()
	for _, r := range left {
		in.reply(r, apiError(503, 10077, "orderstore is stopping: the event may or may not be stored; publish it again with the same Nats-Msg-Id"))
	}
}

// matchesAny reports whether subject is matched by one of the patterns
// (NATS wildcards '*' and '>').
func matchesAny(patterns []string, subject string) bool {
	for _, p := range patterns {
		if subjectMatches(p, subject) {
			return true
		}
	}
	return false
}

func subjectMatches(pattern, subject string) bool {
	if prefix, ok := strings.CutSuffix(pattern, ".>"); ok && !strings.Contains(prefix, "*") {
		// The usual "orders.>", without allocating.
		rest, ok := strings.CutPrefix(subject, prefix+".")
		return ok && rest != "" && !strings.Contains(rest, "..") && !strings.HasPrefix(rest, ".") && !strings.HasSuffix(rest, ".")
	}
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || p != "*" && p != st[i] || st[i] == "" {
			return false
		}
	}
	return len(pt) == len(st)
}

func truncateSubject(s string) string {
	if len(s) > 256 {
		return strconv.Quote(s[:256] + "...")
	}
	return strconv.Quote(s)
}

// apiError is a JetStream API error response, as nats-server writes it.
func apiError(code, errCode int, description string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "err_code": errCode, "description": description}})
	return b
}

// Publish stores one event on subject (one of the stream's subjects) the
// way a producer's publish is stored: with durability "group-commit"
// through the ingest service, acknowledged once durable. opts are
// jetstream's publish options (WithMsgID, WithExpectLastSequence, ...).
// It is what POST /v1/events/{type} calls.
func (a *Appliance) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if a.commit == nil {
		return a.js.Publish(ctx, subject, data, opts...)
	}
	return a.publishMsg(ctx, subject, nil, data, opts...)
}

func (a *Appliance) publishMsg(ctx context.Context, subject string, h nats.Header, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	// With the ingest prefix and the connection's reply inbox (about 70
	// bytes), a longer subject would make nats close orderstore's own
	// connection, and the appliance with it.
	if len(ingestPrefix)+len(subject)+160 > maxControlLine {
		return nil, fmt.Errorf("%d bytes: %w", len(subject), errSubjectTooLong)
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: data}
	if a.commit == nil {
		return a.js.PublishMsg(ctx, msg, opts...)
	}
	// The ingest service's subject, answered like the stream: jetstream
	// publishes there as it would on the stream's. It may hold an answer
	// up to its ack timeout, longer than jetstream's default 5 s.
	msg.Subject = ingestSubject(subject)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ingestAckTimeout+5*time.Second)
		defer cancel()
	}
	return a.js.PublishMsg(ctx, msg, opts...)
}

// ingestJetStream is a JetStream whose publishes go through the ingest
// service (acknowledged once durable).
type ingestJetStream struct {
	jetstream.JetStream
	a *Appliance
}

func (j ingestJetStream) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return j.a.publishMsg(ctx, msg.Subject, msg.Header, msg.Data, opts...)
}
