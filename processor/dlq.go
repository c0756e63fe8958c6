package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
	d := DeadLetter{Sequence: m.Sequence, Data: m.Data, Header: m.Header}
	d.Subject = m.Header.Get(HeaderSubject)
	d.OriginalSequence, _ = strconv.ParseUint(m.Header.Get(HeaderSequence), 10, 64)
	d.Error = m.Header.Get(HeaderError)
	d.Deliveries, _ = strconv.ParseUint(m.Header.Get(HeaderDeliveries), 10, 64)
	d.Poison = m.Header.Get(HeaderPoison) == "true"
	d.Trimmed = m.Header.Get(HeaderTrimmed)
	d.DeadLetteredAt, _ = time.Parse(time.RFC3339Nano, m.Header.Get(HeaderDeadLetterAt))
	if d.DeadLetteredAt.IsZero() {
		d.DeadLetteredAt = m.Time
	}
	return d
}

// ListDeadLetters returns up to limit dead letters from stream with a
// sequence at or after from (1 for the start), oldest first, and the
// sequence to pass as from for the next page (0 when there is none). A
// page also ends once it holds MaxPageBytes of payloads and headers (it
// always holds at least one), so that listing never holds more than that
// in memory whatever the dead letters' sizes. With none to list it returns
// an empty, non-nil slice.
func ListDeadLetters(ctx context.Context, js jetstream.JetStream, stream string, from uint64, limit int) ([]DeadLetter, uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, 0, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	if from < info.State.FirstSeq {
		from = info.State.FirstSeq
	}
	if limit <= 0 {
		limit = 100
	}
	if info.State.Msgs == 0 {
		return []DeadLetter{}, 0, nil
	}
	out, seq, err := scanDeadLetters(ctx, s, stream, from, info.State.LastSeq, limit)
	if err != nil {
		return out, 0, err
	}
	next := uint64(0)
	if seq <= info.State.LastSeq && (len(out) == limit || pageBytes(out) >= MaxPageBytes) {
		next = seq
	}
	return out, next, nil
}

// MaxPageBytes bounds the payloads and headers of one page of
// [ListDeadLetters].
const MaxPageBytes = 8 << 20

func pageBytes(l []DeadLetter) int {
	n := 0
	for _, d := range l {
		n += len(d.Data) + headerSize(d.Header)
	}
	return n
}

// LatestDeadLetters returns up to n of the most recent dead letters in
// stream, oldest first (n <= 0 means 100). With none it returns an empty,
// non-nil slice. Dead letters removed by Replay leave gaps in the stream's
// sequences; the n returned are still the n most recent that remain.
func LatestDeadLetters(ctx context.Context, js jetstream.JetStream, stream string, n int) ([]DeadLetter, error) {
	if n <= 0 {
		n = 100
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	st := info.State
	out := []DeadLetter{}
	if st.Msgs == 0 {
		return out, nil
	}
	want := int(min(uint64(n), st.Msgs))
	// Read windows of want sequences back from the end until they hold
	// want: no window reads more than want dead letters, so what is read
	// stays near what is returned, and a run of removed ones costs one
	// read per window (at most maxWindows of them).
	const maxWindows = 256
	to, width := st.LastSeq, uint64(want)
	for w := 0; len(out) < want && w < maxWindows; w++ {
		from := st.FirstSeq
		if to-st.FirstSeq >= width {
			from = to - width + 1
		}
		page, _, err := scanDeadLetters(ctx, s, stream, from, to, 0)
		if err != nil {
			return nil, err
		}
		out = append(page, out...)
		if from == st.FirstSeq {
			break
		}
		to = from - 1
	}
	return out[max(len(out)-want, 0):], nil
}

// scanDeadLetters reads the dead letters with a sequence in [from, to],
// oldest first, up to limit (0: all), and returns them and the sequence
// after the last one read.
func scanDeadLetters(ctx context.Context, s jetstream.Stream, stream string, from, to uint64, limit int) ([]DeadLetter, uint64, error) {
	out := []DeadLetter{}
	seq, size := from, 0
	for (limit <= 0 || len(out) < limit) && seq <= to && size < MaxPageBytes {
		// The first message at or after seq: removed ones are skipped.
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, seq, fmt.Errorf("dead letters %q: seq %d: %w", stream, seq, err)
		}
		if m.Sequence > to {
			break
		}
		d := deadLetterFrom(m)
		out = append(out, d)
		size += len(d.Data) + headerSize(d.Header)
		seq = m.Sequence + 1
	}
	return out, seq, nil
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

// ReplayMsgIDPrefix begins the Nats-Msg-Id of every event Replay
// republishes from dead-letter stream dlq ("replay-<dlq>-<sequence>"):
// a replay done twice is stored once.
func ReplayMsgIDPrefix(dlq string) string { return "replay-" + dlq + "-" }

// Replay republishes dead letter seq to its original subject, with its
// original headers and payload plus Orderstore-Replay-Of, and removes it
// from the dead-letter stream. It returns the event's new stream sequence.
// Replaying the same dead letter twice (a crash between publish and
// remove) stores it once: the republish carries a Nats-Msg-Id derived from
// the dead letter.
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
			return 0, fmt.Errorf("dead letter %d in %q was trimmed (%s) and its original %q #%d cannot be read: %w",
				seq, stream, d.Header.Get(HeaderTrimmed), orig, d.OriginalSequence, err)
		}
		d.Data = m.Data
		for k, v := range m.Header {
			d.Header[k] = v
		}
	}
	h := nats.Header{}
	for k, v := range d.Header {
		if strings.HasPrefix(k, "Orderstore-") || strings.HasPrefix(k, "Nats-") {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	if id := d.Header.Get(HeaderOriginalMsgID); id != "" {
		h.Set(HeaderOriginalMsgID, id)
	}
	h.Set(HeaderReplayOf, strconv.FormatUint(d.OriginalSequence, 10))
	h.Set(jetstream.MsgIDHeader, ReplayMsgIDPrefix(stream)+strconv.FormatUint(seq, 10))
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: d.Subject, Header: h, Data: d.Data})
	if err != nil {
		return 0, fmt.Errorf("replay dead letter %d to %q: %w", seq, d.Subject, err)
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
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return LagInfo{}, fmt.Errorf("consumer %q: %w", durable, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return LagInfo{}, fmt.Errorf("consumer %q: %w", durable, err)
	}
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
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return l, nil
		}
		return l, fmt.Errorf("stream %q: oldest unprocessed: %w", stream, err)
	}
	l.OldestAt = m.Time
	l.SecondsBehind = max(time.Since(m.Time).Seconds(), 0)
	return l, nil
}

// OrderDeadLetters returns up to limit dead letters of one order (by the
// "order_id" of their payloads), newest first, from the most recent scan
// dead letters in stream (the dead-letter stream has no per-order index:
// the scan bounds the cost). complete is false when older dead letters
// were left unread.
func OrderDeadLetters(ctx context.Context, js jetstream.JetStream, stream, orderID string, scan, limit int) (out []DeadLetter, complete bool, err error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, false, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("dead letters %q: %w", stream, err)
	}
	st := info.State
	out = []DeadLetter{}
	if st.Msgs == 0 {
		return out, true, nil
	}
	seq, read := st.LastSeq, 0
	for ; seq >= st.FirstSeq && seq > 0 && read < scan && len(out) < limit; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // replayed: removed
		}
		if err != nil {
			return out, false, fmt.Errorf("dead letters %q: seq %d: %w", stream, seq, err)
		}
		read++
		var env struct {
			OrderID string `json:"order_id"`
		}
		if json.Unmarshal(m.Data, &env) == nil && env.OrderID == orderID {
			out = append(out, deadLetterFrom(m))
		}
	}
	return out, seq < st.FirstSeq || seq == 0, nil
}
