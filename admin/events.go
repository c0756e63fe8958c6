package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// maxIdempotencyKey bounds the Idempotency-Key header (the event's Nats-Msg-Id).
const maxIdempotencyKey = 256

// replayIDPrefix begins the ids of the replays of dead letters (processor.ReplayMsgIDPrefix).
const replayIDPrefix = "replay-"

// EventSubject is the subject an event of type typ is published on over HTTP: the first stream
// subject ending in ".>" or ".*", with typ in place of the wildcard ("orders.>" and "created" make
// "orders.created"). ok is false when no stream subject takes a type.
func EventSubject(subjects []string, typ string) (subject string, ok bool) {
	for _, s := range subjects {
		if strings.HasSuffix(s, ".>") || strings.HasSuffix(s, ".*") {
			return s[:len(s)-1] + typ, true
		}
	}
	return "", false
}

// validEventType: 1 to processor.MaxEventTypeLen letters, digits, '-'
// and '_' (one subject token; the processor's bound over NATS too).
func validEventType(t string) bool {
	return t != "" && len(t) <= processor.MaxEventTypeLen && !strings.ContainsFunc(t, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})
}

// publishEvent is POST /v1/events/{type}: the body (a JSON object with order_id) goes to the type's
// subject; Idempotency-Key becomes its Nats-Msg-Id. 201 with its stream sequence once durable, 200
// for a duplicate, 4xx for bad input, 503 when the store refuses or cannot make it durable.
func (s *Server) publishEvent(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.Publish == nil {
		return errorf(http.StatusNotImplemented, "HTTP ingest is not available here")
	}
	typ := r.PathValue("type")
	if !validEventType(typ) {
		return errorf(http.StatusBadRequest, "the event type (the path's last part) must be 1 to %d letters, digits, '-' or '_'", processor.MaxEventTypeLen)
	}
	subject, ok := EventSubject(s.cfg.Subjects, typ)
	if !ok {
		return errorf(http.StatusNotFound, "no stream subject takes an event type (stream subjects %q): publish over NATS", s.cfg.Subjects)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "the event is larger than %d bytes (stream.max_msg_size)", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "reading the body: %s", err)
	}
	// What the processor would dead-letter at once is refused here.
	if _, err := processor.EventOf(subject, body, nil, 0, time.Time{}, 0); err != nil {
		return errorf(http.StatusBadRequest, "not an order event: %s", strings.TrimPrefix(err.Error(), processor.ErrPoison.Error()+": "))
	}
	h := nats.Header{}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if len(key) > maxIdempotencyKey || !utf8.ValidString(key) || strings.ContainsAny(key, "\r\n\x00") {
			return errorf(http.StatusBadRequest, "Idempotency-Key must be at most %d bytes of text", maxIdempotencyKey)
		}
		if strings.HasPrefix(key, replayIDPrefix) {
			// Stored in orderstore's own scope, as its replays of dead letters are: the key would
			// make a later replay a duplicate, and the dead letter be removed unreplayed.
			return errorf(http.StatusBadRequest, "Idempotency-Key may not begin with %q: orderstore's replays of dead letters use such ids", replayIDPrefix)
		}
		h.Set(jetstream.MsgIDHeader, key)
	}
	ack, err := b.Publish(r.Context(), subject, h, body)
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		code := apiErr.Code
		if code < 400 || code > 599 || code == http.StatusInternalServerError {
			code = http.StatusServiceUnavailable
		} else if code == http.StatusTooManyRequests {
			// Its connection closes: a flood of producers on keep-alives would hold every one the
			// admin listener takes (admin.MaxConns), and /readyz would wait behind them.
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
		}
		writeJSON(w, code, map[string]any{"error": apiErr.Description, "err_code": apiErr.ErrorCode})
	case err != nil:
		s.log.Warn("HTTP ingest: event not acknowledged", "subject", subject, "err", err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return errorf(http.StatusServiceUnavailable, "no ack in time: the event may have been stored; send it again with the same Idempotency-Key (%s)", err)
		}
		return errorf(http.StatusServiceUnavailable, "the event was not stored: %s", err)
	case ack.Duplicate:
		writeJSON(w, http.StatusOK, map[string]any{"stream": ack.Stream, "seq": ack.Sequence, "duplicate": true})
	default:
		writeJSON(w, http.StatusCreated, map[string]any{"stream": ack.Stream, "seq": ack.Sequence})
	}
	return nil
}
