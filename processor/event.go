package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// Event is one order event as a Handler sees it.
type Event struct {
	// Subject is the subject it was published on, e.g. "orders.created".
	Subject string
	// Type is the subject's last token: "created", "shipped", ...
	Type string
	// OrderID is the event's non-empty "order_id", a valid KV key.
	OrderID string
	// Status is the event's optional "status" field; empty when absent.
	Status string
	// Data is the raw JSON payload; Header the message headers.
	Data   []byte
	Header nats.Header
	// Sequence is the event's stream sequence: unique and increasing, the key for idempotency.
	Sequence uint64
	// Time is when the stream stored it.
	Time time.Time
	// Delivered counts deliveries of this event, 1 on the first.
	Delivered uint64
	// AckFloor is the consumer's ack floor when the event was handed out:
	// every event at or below it was acked or dead-lettered and will not be
	// delivered again, so idempotency records below it can be dropped.
	AckFloor uint64
}

// Handler applies events. It must be idempotent on Event.Sequence: an event is delivered at least
// once, and again after a crash between Handle and the ack. Within one processor, events of one
// order are never handled concurrently and first deliveries come in stream order; events of
// different orders are handled concurrently. A retried event can arrive after later events of its
// order, and with several processors on one durable, events of one order can be handled at the same
// time: a handler that needs stream order must check Sequence (the built-in projection keeps, per
// order, which sequences it applied, and folds them in sequence order whatever the arrival order).
//
// Return nil to ack; an error to retry after the configured backoff (after max_deliver deliveries
// the event is dead-lettered); an error wrapping ErrPoison (see [Poison]) to dead-letter at once.
type Handler interface {
	Handle(ctx context.Context, ev Event) error
}

// BatchHandler is an optional interface: a Handler that applies a whole batch at once (the
// projection pipelines its KV writes). orders holds one slice per order, each in stream order; no
// order appears twice. The result has the same shape: one error per event.
type BatchHandler interface {
	Handler
	HandleBatch(ctx context.Context, orders [][]Event) [][]error
}

// AppliedChecker is an optional interface: a Handler that can tell whether it already applied an
// event. The processor asks before dead-lettering an event whose deliveries ran out without a
// result (the processor was killed or timed out on it after applying it, before the ack): such an
// event is acked, not dead-lettered, so it is never both applied and a dead letter.
type AppliedChecker interface {
	Applied(ctx context.Context, ev Event) (bool, error)
}

// Withholder is an optional interface: a Handler that can record, in the state the event would
// change, that it will not apply an event. The processor calls it before it dead-letters an event
// whose deliveries ran out without a result. Withhold reports whether the event was applied already
// (then it is acked, not dead-lettered). Otherwise it records the event as withheld, so that a
// later Handle of it returns ErrWithheld: an earlier delivery still held elsewhere is dead-lettered
// too, never applied (docs/processor.md, "Retries and max_deliver"). A Handler without it is asked
// [AppliedChecker.Applied] instead, which leaves that race open.
type Withholder interface {
	Withhold(ctx context.Context, ev Event) (applied bool, err error)
}

// ErrWithheld is returned (wrapped) by a Handler for an event it withheld (see [Withholder]): the
// processor dead-letters it (again: the dead-letter stream stores it once) instead of applying it.
var ErrWithheld = errors.New("withheld: dead-lettered when its deliveries ran out")

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, ev Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, ev Event) error { return f(ctx, ev) }

// ErrPoison marks an event that can never succeed: it is dead-lettered at once, without retries.
var ErrPoison = errors.New("poison event")

// Poison wraps err so that errors.Is(err, ErrPoison) holds.
func Poison(err error) error { return fmt.Errorf("%w: %w", ErrPoison, err) }

var kvKeyRe = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

// Bounds on what an event may carry into subjects, keys and the projection: an order id becomes a
// KV key, and so part of a subject on the wire (nats refuses a protocol line over 4 KiB and closes
// the connection that sent it); the status and the event type are stored in every projected order.
const (
	MaxOrderIDLen   = 256 // bytes of "order_id"
	MaxStatusLen    = 256 // bytes of "status"
	MaxEventTypeLen = 256 // bytes of the subject's last token
)

// ValidOrderID reports whether id can be a KV key (the projection's key): 1 to MaxOrderIDLen bytes
// of letters, digits, '-', '_', '=', '/' and '.', not starting or ending with '.' and without "..".
func ValidOrderID(id string) bool {
	return id != "" && len(id) <= MaxOrderIDLen && kvKeyRe.MatchString(id) &&
		!strings.HasPrefix(id, ".") && !strings.HasSuffix(id, ".") && !strings.Contains(id, "..")
}

// parse decodes every order event's envelope. A failure is poison: retrying cannot fix the bytes.
func parse(subject string, data []byte) (orderID, status string, err error) {
	var env struct {
		OrderID string `json:"order_id"` // null is absent
		Status  string `json:"status"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return "", "", Poison(errors.New(jsonProblem(data, err)))
	}
	switch t := eventType(subject); {
	case env.OrderID == "":
		err = errors.New("no order_id")
	case len(env.OrderID) > MaxOrderIDLen:
		err = fmt.Errorf("order_id is %d bytes, more than %d", len(env.OrderID), MaxOrderIDLen)
	case !ValidOrderID(env.OrderID):
		err = fmt.Errorf("order_id %q cannot be a key (letters, digits, '-', '_', '=', '/', '.')", env.OrderID)
	case len(env.Status) > MaxStatusLen:
		err = fmt.Errorf("status is %d bytes, more than %d", len(env.Status), MaxStatusLen)
	case !utf8.ValidString(env.Status):
		err = errors.New("status is not valid UTF-8")
	case len(t) > MaxEventTypeLen:
		err = fmt.Errorf("event type (the subject's last token) is %d bytes, more than %d", len(t), MaxEventTypeLen)
	default:
		return env.OrderID, env.Status, nil
	}
	return "", "", Poison(err)
}

// jsonProblem says why data is not an order event's JSON object, in terms of the payload (its byte
// offset, line and column for a syntax error), not of Go's types.
func jsonProblem(data []byte, err error) string {
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return "the payload is empty, want a JSON object with an order_id"
	case errors.As(err, &ute) && ute.Field != "":
		return fmt.Sprintf("field %q is a JSON %s, want a string", ute.Field, ute.Value)
	case errors.As(err, &ute):
		return fmt.Sprintf("the payload is a JSON %s, want an object with an order_id", ute.Value)
	case errors.As(err, &se):
		before := data[:min(max(se.Offset-1, 0), int64(len(data)))]
		line := bytes.Count(before, []byte("\n")) + 1
		col := len(before) - bytes.LastIndexByte(before, '\n')
		return fmt.Sprintf("not JSON: %s at byte %d (line %d, column %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset, line, col)
	}
	return "not JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

func eventType(subject string) string { return subject[strings.LastIndexByte(subject, '.')+1:] }

// EventOf returns the Event of a stream message as the processor hands it to a Handler on its first
// delivery, with floor as its AckFloor. An envelope that can never be applied is an error wrapping
// ErrPoison. A rebuild folds the stream through it, by the same rules as the processor.
func EventOf(subject string, data []byte, header nats.Header, seq uint64, t time.Time, floor uint64) (Event, error) {
	id, status, err := parse(subject, data)
	return Event{Subject: subject, Type: eventType(subject), OrderID: id, Status: status, Data: data, Header: header, Sequence: seq, Time: t, Delivered: 1, AckFloor: floor}, err
}

// Versioned is an optional interface: a Handler that names the version of its fold. The appliance
// records the version its projection was built with; when a start finds another, it rebuilds the
// projection in the background (a [Rebuilder] handler, or the built-in projection) and serves the
// old one until the new one takes over. Change the version whenever the fold would give another
// state for the same events.
type Versioned interface {
	Version() string
}

// Rebuilder is an optional interface: a Handler whose projection can be rebuilt beside the live
// one. A rebuild folds the stream, from its start, into Shadow's handler while the live processor
// goes on; once the shadow has caught up, the live processor is paused, the shadow folds the last
// events, Takeover makes its state the live one, and the live processor resumes (events it applies
// again after Takeover must be duplicates to the handler: it is idempotent on Event.Sequence).
type Rebuilder interface {
	// Shadow returns the handler that folds into the shadow projection: an empty one when fresh is
	// set, else the one a rebuild interrupted by a restart had begun (its events are redelivered
	// from the last recorded position: the handler must be idempotent). The rebuild records its
	// position every few seconds, after the events up to it were handled: make the shadow's writes
	// durable before Handle returns, or a power cut may lose events folded before that position.
	Shadow(ctx context.Context, fresh bool) (Handler, error)
	// Takeover makes the shadow the live projection and drops the
	// shadow. It is called with the live processor paused, and again at
	// the next start if a crash interrupted it: it must be idempotent.
	Takeover(ctx context.Context) error
	// Discard drops the shadow of a canceled or failed rebuild, and of one that ended (after its
	// end is recorded); it is also called at start-up when no rebuild is under way, for a shadow a
	// crash left: it must be idempotent and cheap when there is none.
	Discard(ctx context.Context) error
}

// headerSize is h's size on the wire (what a stream's max_msg_size counts beside the payload).
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
