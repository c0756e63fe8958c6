package processor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
	// HeaderOrderID names the order of a dead letter whose payload was trimmed away (so that the
	// order's dead letters still list it).
	HeaderOrderID = "Orderstore-Order-Id"
	// HeaderTrimmed is set on a dead letter stored without (part of) the original because the copy
	// would exceed the server's max_payload: "payload 1048000 bytes", "headers 70000 bytes". Replay
	// then reads the original from its stream, while it is still there.
	HeaderTrimmed = "Orderstore-Trimmed"
	// HeaderReplayOf is set on an event republished from the dead-letter
	// stream: the original stream sequence.
	HeaderReplayOf = "Orderstore-Replay-Of"
)

// maxDeadLetterHeaders keeps a dead letter's headers under nats' 64 KiB limit on headers.
const maxDeadLetterHeaders = 60 << 10

// maxDeadLetterSubject bounds the part of a dead letter's subject taken from the original's.
const maxDeadLetterSubject = 256

// DeadLetterSubject is the subject a dead letter of an event on subject is stored on:
// "<prefix>.<subject>", or, for a subject longer than 256 bytes, "<prefix>.long.<sha256 of the
// subject>" (the original subject is in the HeaderSubject header either way), so that no event
// makes a subject nats would refuse.
func DeadLetterSubject(prefix, subject string) string {
	if len(subject) <= maxDeadLetterSubject {
		return prefix + "." + subject
	}
	sum := sha256.Sum256([]byte(subject))
	return prefix + ".long." + hex.EncodeToString(sum[:16])
}

// deadLetter copies the event to the dead-letter stream with headers naming its origin and the
// error, and adds it to dls: finishDeadLetters terminates the original once the copy is durable. If
// the copy cannot be stored the original is retried instead: nothing is dropped. A copy too large
// is trimmed (docs/processor.md, "Dead letters").
func (p *Processor) deadLetter(ctx context.Context, m delivery, ev Event, cause error, dls *[]deadLettered) {
	h := nats.Header{}
	maps.Copy(h, m.Headers())
	// Without nats' own: the original's publish preconditions, or a source's header, which nats
	// refuses on a publish.
	maps.DeleteFunc(h, func(k string, _ []string) bool { return strings.HasPrefix(k, "Nats-") })
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
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
			if id := payloadOrderID(data); ValidOrderID(id) {
				h.Set(HeaderOrderID, id)
			}
			h.Set(HeaderTrimmed, strings.TrimPrefix(h.Get(HeaderTrimmed)+", ", ", ")+fmt.Sprintf("payload %d bytes", len(data)))
			data = nil
		}
	}
	msg := &nats.Msg{Subject: DeadLetterSubject(p.cfg.DeadLetterSubjectPrefix, ev.Subject), Header: h, Data: data}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(p.cfg.DeadLetterStream)); err != nil {
		p.failed.Add(1)
		p.log.Error("dead-letter publish failed, will retry the event", "seq", ev.Sequence, "dead_letter_stream", p.cfg.DeadLetterStream, "err", err)
		p.settled("nak", ev, m.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
		return
	}
	*dls = append(*dls, deadLettered{m: m, ev: ev, cause: cause, trimmed: h.Get(HeaderTrimmed)})
}

// deadLettered is one of a batch's events copied to the dead-letter stream: the originals are
// terminated once the copies are durable (Config.Sync), with one sync for them all.
type deadLettered struct {
	m       delivery
	ev      Event
	cause   error
	trimmed string
}

// deadLetterMemory bounds the sequences firstDeadLetter remembers.
const deadLetterMemory = 100_000

// firstDeadLetter reports whether this processor counts the dead letter of the event at seq for the
// first time, and remembers it (the oldest forgotten past deadLetterMemory).
func (p *Processor) firstDeadLetter(seq uint64) bool {
	p.dlMu.Lock()
	defer p.dlMu.Unlock()
	if _, ok := p.dlSeen[seq]; ok {
		return false
	}
	p.dlSeen[seq] = struct{}{}
	p.dlOrder = append(p.dlOrder, seq)
	if len(p.dlOrder) > deadLetterMemory {
		delete(p.dlSeen, p.dlOrder[0])
		p.dlOrder = p.dlOrder[1:]
	}
	return true
}

// finishDeadLetters makes the batch's dead letters durable, then terminates their originals; if
// they cannot be made durable the originals are retried instead.
func (p *Processor) finishDeadLetters(ctx context.Context, dls []deadLettered) {
	if len(dls) == 0 {
		return
	}
	if err := p.cfg.Sync(ctx); err != nil {
		for _, d := range dls {
			p.failed.Add(1)
			p.log.Error("dead letter not made durable, will retry the event", "seq", d.ev.Sequence, "err", err)
			p.settled("nak", d.ev, d.m.NakWithDelay(p.cfg.Backoff[len(p.cfg.Backoff)-1]))
		}
		return
	}
	for _, d := range dls {
		// Counted once per event: one that comes back (its term was lost, or ack_wait passed before
		// it) is dead-lettered again, stored once (the copy's Nats-Msg-Id) and not counted again.
		poison := errors.Is(d.cause, ErrPoison)
		if p.firstDeadLetter(d.ev.Sequence) {
			p.deadLettered.Add(1)
			if poison {
				p.poison.Add(1)
			}
		}
		if p.settled("term", d.ev, d.m.TermWithReason("dead-lettered to "+p.cfg.DeadLetterStream)) {
			p.log.Warn("event dead-lettered", "seq", d.ev.Sequence, "subject", truncate(d.ev.Subject, 256), "deliveries", d.ev.Delivered,
				"poison", poison, "trimmed", d.trimmed, "err", truncate(d.cause.Error(), 1024))
		}
	}
}

// truncate cuts s to n bytes, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// DeadLetter is one event in the dead-letter stream.
type DeadLetter struct {
	Sequence         uint64      `json:"seq"`               // in the dead-letter stream
	Subject          string      `json:"subject"`           // original subject
	OriginalSequence uint64      `json:"original_seq"`      // in the event stream
	Error            string      `json:"error"`             // why it was dead-lettered
	Deliveries       uint64      `json:"deliveries"`        // deliveries before it was
	Poison           bool        `json:"poison"`            // dead-lettered at once, without retries
	Trimmed          string      `json:"trimmed,omitempty"` // what of the original it lacks (too large to copy)
	DeadLetteredAt   time.Time   `json:"dead_lettered_at"`  //
	Data             []byte      `json:"data"`              // original payload
	Header           nats.Header `json:"headers,omitempty"` // original headers and the Orderstore-* ones
}

func deadLetterFrom(m *jetstream.RawStreamMsg) DeadLetter {
	h := m.Header
	d := DeadLetter{Sequence: m.Sequence, Data: m.Data, Header: h, Subject: h.Get(HeaderSubject), Error: h.Get(HeaderError),
		Poison: h.Get(HeaderPoison) == "true", Trimmed: h.Get(HeaderTrimmed)}
	d.OriginalSequence, _ = strconv.ParseUint(h.Get(HeaderSequence), 10, 64)
	d.Deliveries, _ = strconv.ParseUint(h.Get(HeaderDeliveries), 10, 64)
	d.DeadLetteredAt, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderDeadLetterAt))
	if d.DeadLetteredAt.IsZero() {
		d.DeadLetteredAt = m.Time
	}
	return d
}

// ListDeadLetters returns up to limit dead letters from stream with a sequence at or after from (1
// for the start), oldest first, and the sequence to pass as from for the next page (0 when there is
// none). A page also ends once it holds MaxPageBytes of payloads and headers (it always holds at
// least one), so that listing never holds more than that in memory whatever the dead letters'
// sizes. With none to list it returns an empty, non-nil slice.
func ListDeadLetters(ctx context.Context, js jetstream.JetStream, stream string, from uint64, limit int) ([]DeadLetter, uint64, error) {
	s, st, err := deadLetterStream(ctx, js, stream)
	if err != nil {
		return nil, 0, err
	}
	if st.Msgs == 0 {
		return []DeadLetter{}, 0, nil
	}
	return scanDeadLetters(ctx, s, stream, max(from, st.FirstSeq), st.LastSeq, orDefault(limit, 100))
}

// MaxPageBytes bounds the payloads and headers of one page of [ListDeadLetters].
const MaxPageBytes = 8 << 20

// deadLetterStream looks the dead-letter stream up, with its state.
func deadLetterStream(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.Stream, jetstream.StreamState, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, jetstream.StreamState{}, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	return s, s.CachedInfo().State, nil // its info, fetched by the lookup
}

// LatestDeadLetters returns up to n of the most recent dead letters in stream, oldest first (n <= 0
// means 100), and no more of them than hold MaxPageBytes of payloads and headers (the newest is
// always returned). With none it returns an empty, non-nil slice. Dead letters removed by Replay
// leave gaps in the stream's sequences; those returned are still the most recent that remain.
func LatestDeadLetters(ctx context.Context, js jetstream.JetStream, stream string, n int) ([]DeadLetter, error) {
	s, st, err := deadLetterStream(ctx, js, stream)
	if err != nil {
		return nil, err
	}
	out := []DeadLetter{}
	if st.Msgs == 0 {
		return out, nil
	}
	want := int(min(uint64(orDefault(n, 100)), st.Msgs))
	// Read windows of want sequences back from the end until they hold want: no window reads more
	// than want dead letters, so what is read stays near what is returned, and a run of removed
	// ones costs one read per window (at most maxWindows of them).
	const maxWindows = 256
	to, width, full := st.LastSeq, uint64(want), false
	for w := 0; len(out) < want && !full && w < maxWindows; w++ {
		from := st.FirstSeq
		if to-st.FirstSeq >= width {
			from = to - width + 1
		}
		// A scan stops at MaxPageBytes: read the window on from there, keeping its newest.
		page := []DeadLetter{}
		for seq := from; seq != 0; {
			p, next, err := scanDeadLetters(ctx, s, stream, seq, to, 0)
			if err != nil {
				return nil, err
			}
			page, _ = newestDeadLetters(append(page, p...), want)
			seq = next
		}
		out, full = newestDeadLetters(append(page, out...), want)
		if from == st.FirstSeq {
			break
		}
		to = from - 1
	}
	return out, nil
}

// newestDeadLetters is the tail of dls that holds at most n of them and MaxPageBytes of their
// payloads and headers (the last one always); full says whether the bytes cut it.
func newestDeadLetters(dls []DeadLetter, n int) (tail []DeadLetter, full bool) {
	k, size := len(dls), 0
	for ; k > 0 && len(dls)-k < n; k-- {
		size += len(dls[k-1].Data) + headerSize(dls[k-1].Header)
		if size > MaxPageBytes && k < len(dls) {
			return dls[k:], true
		}
	}
	return dls[k:], false
}

// scanDeadLetters reads the dead letters with a sequence in [from, to],
// oldest first, up to limit (0: all) or once they hold MaxPageBytes, and
// returns them and the sequence to read on from (0 once it read up to to).
func scanDeadLetters(ctx context.Context, s jetstream.Stream, stream string, from, to uint64, limit int) ([]DeadLetter, uint64, error) {
	out := []DeadLetter{}
	size := 0
	for seq := from; seq <= to; {
		if limit > 0 && len(out) >= limit || size >= MaxPageBytes {
			return out, seq, nil
		}
		// The first message at or after seq: removed ones are skipped.
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence > to {
			break
		}
		if err != nil {
			return out, 0, fmt.Errorf("dead letters %q: seq %d: %w", stream, seq, err)
		}
		d := deadLetterFrom(m)
		out = append(out, d)
		size += len(d.Data) + headerSize(d.Header)
		seq = m.Sequence + 1
	}
	return out, 0, nil
}

// GetDeadLetter returns one dead letter.
func GetDeadLetter(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (DeadLetter, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter %d in %q: %w", seq, stream, err)
	}
	return deadLetterFrom(m), nil
}

// ReplayMsgIDPrefix begins the Nats-Msg-Id of every event Replay republishes from dead-letter
// stream dlq ("replay-<dlq>-<sequence>"): a replay done twice is stored once.
func ReplayMsgIDPrefix(dlq string) string { return "replay-" + dlq + "-" }

// replayTimeout bounds a replay's publish and removal, which its caller's context no longer cuts.
const replayTimeout = 30 * time.Second

// Replay republishes dead letter seq to its original subject, with its original headers and payload
// plus Orderstore-Replay-Of, and removes it from the dead-letter stream. It returns the event's new
// stream sequence. A replay done twice (a crash between publish and remove) is stored once
// ([ReplayMsgIDPrefix]); a duplicate that is not this replay keeps the dead letter. ctx ending (an
// HTTP client that hangs up) cuts neither the publish nor the removal, bounded by replayTimeout
// instead: a dead letter left listed after its replay, replayed again once the stream's duplicate
// window is over, would be stored twice.
func Replay(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (uint64, error) {
	d, err := GetDeadLetter(ctx, js, stream, seq)
	if err != nil {
		return 0, err
	}
	if d.Subject == "" {
		return 0, fmt.Errorf("dead letter %d in %q: no %s header", seq, stream, HeaderSubject)
	}
	if d.Header.Get(HeaderTrimmed) != "" {
		// Stored without the original's payload or headers: take them
		// from the original stream while it still holds the event.
		orig := d.Header.Get(HeaderStream)
		if orig == "" || d.OriginalSequence == 0 {
			return 0, fmt.Errorf("dead letter %d in %q was trimmed (%s) and names no original to replay", seq, stream, d.Header.Get(HeaderTrimmed))
		}
		src, err := js.Stream(ctx, orig)
		if err != nil {
			return 0, fmt.Errorf("dead letter %d in %q was trimmed (%s): original stream %q: %w", seq, stream, d.Header.Get(HeaderTrimmed), orig, err)
		}
		m, err := src.GetMsg(ctx, d.OriginalSequence)
		if err != nil {
			return 0, fmt.Errorf("dead letter %d in %q was trimmed (%s) and its original %q #%d cannot be read: %v", // not the dead letter's own ErrMsgNotFound
				seq, stream, d.Header.Get(HeaderTrimmed), orig, d.OriginalSequence, err)
		}
		d.Data = m.Data
		maps.Copy(d.Header, m.Header)
	}
	h := maps.Clone(d.Header)
	maps.DeleteFunc(h, func(k string, _ []string) bool {
		return strings.HasPrefix(k, "Orderstore-") || strings.HasPrefix(k, "Nats-")
	})
	if id := d.Header.Get(HeaderOriginalMsgID); id != "" {
		h.Set(HeaderOriginalMsgID, id)
	}
	h.Set(HeaderReplayOf, strconv.FormatUint(d.OriginalSequence, 10))
	h.Set(jetstream.MsgIDHeader, ReplayMsgIDPrefix(stream)+strconv.FormatUint(seq, 10))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayTimeout)
	defer cancel()
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: d.Subject, Header: h, Data: d.Data})
	if err != nil {
		return 0, fmt.Errorf("replay dead letter %d to %q: %w", seq, d.Subject, err)
	}
	if ack.Duplicate { // this replay, stored before a crash cut off the removal, or another event
		var m *jetstream.RawStreamMsg
		s, err := js.Stream(ctx, ack.Stream)
		if err == nil {
			m, err = s.GetMsg(ctx, ack.Sequence)
		}
		if of := h.Get(HeaderReplayOf); err == nil && (m.Header.Get(HeaderReplayOf) != of || !bytes.Equal(m.Data, d.Data)) {
			err = fmt.Errorf("its %s is %q and its payload %d bytes, the replay's %q and %d", HeaderReplayOf, m.Header.Get(HeaderReplayOf), len(m.Data), of, len(d.Data))
		}
		if err != nil {
			return 0, fmt.Errorf("replay dead letter %d: %w: %q is held by %s #%d, not this replay: %w; the dead letter is kept (replay it once the stream's duplicate_window is over)",
				seq, ErrReplayIDTaken, h.Get(jetstream.MsgIDHeader), ack.Stream, ack.Sequence, err)
		}
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ack.Sequence, fmt.Errorf("replay dead letter %d: republished as %d, but: %w", seq, ack.Sequence, err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return ack.Sequence, fmt.Errorf("replay dead letter %d: republished as %d, but removing it failed: %w", seq, ack.Sequence, err)
	}
	return ack.Sequence, nil
}

// ErrReplayIDTaken: another event holds a replay's id; the dead letter is kept.
var ErrReplayIDTaken = errors.New("its id is taken")

// payloadOrderID is the "order_id" of an event's payload, "" if none.
func payloadOrderID(data []byte) string {
	var env struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(data, &env)
	return env.OrderID
}

// DeadLettered returns the original sequences of the dead letters of stream origin's events among
// the last scan of stream (a sequence of another stream names another event).
func DeadLettered(ctx context.Context, js jetstream.JetStream, stream, origin string, scan int) (map[uint64]bool, error) {
	s, st, err := deadLetterStream(ctx, js, stream)
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < uint64(scan); seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // replayed: removed
		}
		if err != nil {
			return out, fmt.Errorf("dead letters %q: seq %d: %w", stream, seq, err)
		}
		if d := deadLetterFrom(m); d.Header.Get(HeaderStream) == origin {
			out[d.OriginalSequence] = true
		}
	}
	return out, nil
}

// OrderDeadLetters returns up to limit dead letters of one order (by the "order_id" of their
// payloads, or HeaderOrderID of a trimmed one), newest first, from the last scan sequences of
// stream (replayed ones too: there is no per-order index), until they hold MaxPageBytes.
// complete: no older one was left unread.
func OrderDeadLetters(ctx context.Context, js jetstream.JetStream, stream, orderID string, scan, limit int) (out []DeadLetter, complete bool, err error) {
	s, st, err := deadLetterStream(ctx, js, stream)
	if err != nil {
		return nil, false, err
	}
	out = []DeadLetter{}
	if st.Msgs == 0 {
		return out, true, nil
	}
	seq, size := st.LastSeq, 0
	for ; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < uint64(scan) && len(out) < limit && size < MaxPageBytes; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // replayed: removed
		}
		if err != nil {
			return out, false, fmt.Errorf("dead letters %q: seq %d: %w", stream, seq, err)
		}
		if payloadOrderID(m.Data) == orderID || m.Header.Get(HeaderOrderID) == orderID {
			out = append(out, deadLetterFrom(m))
			size += len(m.Data) + headerSize(m.Header)
		}
	}
	return out, seq < st.FirstSeq || seq == 0, nil
}
