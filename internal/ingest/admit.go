// Package ingest is orderstore's side of a producer's publish into the stream, which the embedded
// nats-server takes itself: the admission hook nats calls on the publisher's own goroutine
// (natsserver/patches/ 0002-admission.patch), and the figures and failure of group commit, which
// nats' file store runs (0001-group-commit.patch).
package ingest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orderstore/orderstore/internal/lograte"
	"github.com/orderstore/orderstore/natsserver/server"
)

// Headers admission reads or writes.
const (
	// EpochHeader names the run of the node that stored the event: a new random value at every
	// start. A reader that saw sequence N with one epoch and later sees N with another knows the
	// first was lost in a crash before it was acknowledged (docs/reliability.md).
	EpochHeader        = "Orderstore-Epoch"
	requestInfoHeader  = "Nats-Request-Info"  // nats' own on a service import: who published
	StreamSourceHeader = "Nats-Stream-Source" // set by nats when sourcing: never a producer's
	msgIDHeader        = "Nats-Msg-Id"
	expectLastIDHeader = "Nats-Expected-Last-Msg-Id" // compared with the last stored (scoped) id
	ownPrefix          = "Orderstore-"               // orderstore's own: kept from its own account alone
)

// dropped are the headers no publisher may store, in any spelling: nats' own (who published, a
// source), what a direct get adds (nats.go takes the first of each: it would be the event's), a
// delivery's status (a pull consumer takes an event without payload for nats' status message: "409
// Consumer Deleted" stops it), and the epoch admission stamps.
var dropped = []string{requestInfoHeader, StreamSourceHeader, "Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject",
	"Nats-Last-Sequence", "Nats-Num-Pending", "Nats-UpTo-Sequence", "Status", "Description", EpochHeader}

// Headroom is what nats' max_payload is raised by, beyond the configured
// server.max_payload: a publish made at one node of a cluster crosses the
// route to the stream's leader with nats' Nats-Request-Info added.
const Headroom = 4 << 10

// Bounds of admission's line (see Admission).
const (
	// The queue is deep at lineMsgs events (or lineBytes). What is queued is what a newcomer's
	// publish waits behind (twice: once to be stored, once for its ack), so the bound is low: 1,024
	// is what 64 producers with 16 publishes in flight fill.
	lineMsgs  = 1024
	lineBytes = 8 << 20
	// lineWait: a publish that waited this long in line, counted from when it joined, is answered
	// 429 (the stream is behind what producers send), well within a client's 5 s timeout (nats.go's
	// and natscli's default).
	lineWait = 2 * time.Second
	// linePoll is how often the head of the line looks at the queue.
	linePoll = 100 * time.Microsecond
)

// AdmitConfig is what admission needs of the appliance.
type AdmitConfig struct {
	Stream        string // the events stream's name: other streams are not touched
	StreamAccount string // orderstore's own account (HTTP ingest, dead-letter replays)
	// OwnNkey is orderstore's own user. A client of StreamAccount signed in as anyone else (the
	// anonymous loopback clients of a standalone node with no users) is scoped as OthersAccount.
	OwnNkey, OthersAccount string
	OwnInbox               string // the reply prefix of orderstore's own connections
	// MaxEvent is the stream's max_msg_size: a larger event (with the
	// headers it is stored with) is refused up front.
	MaxEvent int
	// Epoch is this run's EpochHeader value.
	Epoch string
	// Scope prefixes every scoped Nats-Msg-Id (the node's domain, or "").
	Scope string
	// Validate checks each event (its subject and payload) before anything is stored: an error
	// refuses it with code 422, err_code InvalidCode and the error's text. Called for every event;
	// it may change its mind between two (SetValidation).
	Validate    func(subject string, data []byte) error
	InvalidCode int
	Log         *slog.Logger
}

// Admission decides on every event published into the stream, on the publisher's own goroutine,
// before nats queues it for the stream: what it refuses, scopes, drops, validates and stamps is
// docs/durability.md's ("Admission, in every mode"), and so is the line it holds producers in while
// the stream's inbound queue is deep ("Overload"; nats itself would answer 429 for everyone). A
// refused event is answered at once with a JetStream API error and is not stored.
type Admission struct {
	cfg AdmitConfig

	line    chan struct{}   // capacity 1: holds a token while the head of the line waits
	stopped context.Context // ends with Stop
	stop    context.CancelFunc
	waiting atomic.Int64
	hold    atomic.Int64 // tests: the queue counts as deep, a publish waits this long (ns)

	admitted, invalid, refused, held, overloaded atomic.Uint64

	unanswered lograte.Limiter // refusals nobody is told of: logged at most once a second
}

// NewAdmission returns admission for cfg; Admit is nats' hook.
func NewAdmission(cfg AdmitConfig) *Admission {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	ad := &Admission{cfg: cfg, line: make(chan struct{}, 1)}
	ad.stopped, ad.stop = context.WithCancel(context.Background())
	return ad
}

// Counts are what admission did since start.
type Counts struct {
	Admitted   uint64 // events passed on to the stream
	Invalid    uint64 // refused by validation
	Refused    uint64 // refused for their subject, size or origin
	Held       uint64 // publishes that waited in line (the stream's queue was deep)
	Overloaded uint64 // answered 429 after lineWait in line
	Waiting    int64  // publishes in line now
}

// Counts returns the counts now.
func (ad *Admission) Counts() Counts {
	return Counts{Admitted: ad.admitted.Load(), Invalid: ad.invalid.Load(), Refused: ad.refused.Load(),
		Held: ad.held.Load(), Overloaded: ad.overloaded.Load(), Waiting: ad.waiting.Load()}
}

// refuse counts a refusal in n and answers it with orderstore's err_code for refusals (10077).
func refuse(n *atomic.Uint64, code int, format string, args ...any) ([]byte, *server.ApiError) {
	n.Add(1)
	return nil, &server.ApiError{Code: code, ErrCode: 10077, Description: "orderstore: " + fmt.Sprintf(format, args...)}
}

// Admit is nats' admission hook (embedded.Config.Admit).
func (ad *Admission) Admit(m *server.AdmitMsg) ([]byte, *server.ApiError) {
	if m.Stream != ad.cfg.Stream {
		return nil, nil // orderstore's buckets and the dead letters: its own writes
	}
	account := m.Account
	switch m.Kind {
	case "Leafnode":
		return refuse(&ad.refused, 403, "%s: a leaf node may not publish into this node's stream (a hub sources its edges' streams)", truncateSubject(m.Subject))
	case "Router":
		// Published at another node of the cluster: the service import there named the publisher's
		// account in Nats-Request-Info (nats sets it, a client cannot). Without one, it was in the
		// stream's account there: orderstore's own connection, whose ack comes on its own inbox
		// (nobody else may name it as a reply), or one of nats' own clients, refused.
		account = ""
		if v := headerValue(m.Header, requestInfoHeader); v != nil {
			var ci struct {
				Account string `json:"acc"`
			}
			if json.Unmarshal(v, &ci) == nil {
				account = ci.Account
			}
		} else if strings.HasPrefix(m.Reply, ad.cfg.OwnInbox+".") {
			account = ad.cfg.StreamAccount
		}
		if account == "" {
			return ad.refuseInternal(m)
		}
	case "Client":
		if account == ad.cfg.StreamAccount && m.Nkey != ad.cfg.OwnNkey {
			account = ad.cfg.OthersAccount
		} else if account == ad.cfg.StreamAccount && !strings.HasPrefix(m.Reply, ad.cfg.OwnInbox+".") {
			return ad.refuseInternal(m) // orderstore's own answer (a guard's) to a reply a client named
		}
		if !ad.wait(m) {
			return refuse(&ad.overloaded, 429, "the stream is behind what producers send: the event was not stored, publish it again shortly")
		}
	default: // nats' own clients ("JetStream", "System", "Account"), a gateway
		return ad.refuseInternal(m)
	}
	if hasWildcard(m.Subject) {
		return refuse(&ad.refused, 400, "%s: a subject with a wildcard token ('*' or '>') names no single event type; publish on a literal subject", truncateSubject(m.Subject))
	}
	hdr, added := ad.headers(m.Header, account)
	if stored := len(hdr) + len(m.Data); ad.cfg.MaxEvent > 0 && stored > ad.cfg.MaxEvent {
		return refuse(&ad.refused, 400, "the event takes %d bytes with its headers (orderstore adds %d of them), more than the stream's max_msg_size of %d: make it smaller, or raise stream.max_msg_size",
			stored, added, ad.cfg.MaxEvent)
	}
	if v := ad.cfg.Validate; v != nil {
		if err := v(m.Subject, m.Data); err != nil {
			ad.invalid.Add(1)
			if m.Reply == "" {
				ad.unanswered.Warn(ad.cfg.Log, "", "ingest: an event published without a reply subject failed validation and was not stored (the publisher cannot be told; publish with a request, or JetStream publish, to see the error)",
					"subject", truncateSubject(m.Subject), "err", err)
			}
			return nil, &server.ApiError{Code: 422, ErrCode: uint16(ad.cfg.InvalidCode),
				Description: "orderstore: " + truncateSubject(m.Subject) + ": " + err.Error() + " (nothing was stored)"}
		}
	}
	ad.admitted.Add(1)
	return hdr, nil
}

// wait holds a producer's publish in line while the stream's inbound queue is deep; false when it
// waited lineWait in vain. Every connection waits its turn: while anyone waits, a newcomer queues
// behind (senders blocked on a channel go in arrival order), and a connection has one publish at a
// time here (its read loop is what waits), so a flood goes at the pace of everyone else.
func (ad *Admission) wait(m *server.AdmitMsg) bool {
	deep := func() bool {
		if ad.hold.Load() > 0 {
			return true
		}
		n, b := m.Queued()
		return n >= lineMsgs || b >= lineBytes
	}
	if ad.waiting.Load() == 0 && !deep() {
		return true
	}
	ad.held.Add(1)
	ad.waiting.Add(1)
	defer ad.waiting.Add(-1)
	ctx, cancel := context.WithTimeout(ad.stopped, cmp.Or(time.Duration(ad.hold.Load()), lineWait))
	defer cancel()
	select {
	case ad.line <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-ad.line }()
	for deep() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(linePoll)
	}
	return true
}

// Stop ends the line for good: every publish in it is answered 429 at once, and a later one instead
// of waiting. A stopping appliance calls it, so that its stop does not wait for the line.
func (ad *Admission) Stop() { ad.stop() }

// Hold makes the stream's queue count as deep while wait > 0, for tests of the line: every
// producer's publish then waits in line for wait (not lineWait) and is answered 429.
func (ad *Admission) Hold(wait time.Duration) { ad.hold.Store(int64(wait)) }

// headers are the headers stored with an event published by account: the Nats-Msg-Id scoped to it,
// the dropped headers and, from any account but orderstore's own, every Orderstore-* header left
// out, the epoch stamped. hdr is NATS wire form, or nil. added is how many of the bytes are
// orderstore's: the scopes and the epoch.
func (ad *Admission) headers(hdr []byte, account string) (out []byte, added int) {
	out = make([]byte, 0, len(hdr)+len(ad.cfg.Scope)+len(account)+len(EpochHeader)+len(ad.cfg.Epoch)+32)
	out = append(out, "NATS/1.0\r\n"...)
	if _, rest, ok := bytes.Cut(hdr, []byte("\r\n")); ok {
		for line := range bytes.SplitSeq(rest, []byte("\r\n")) {
			if len(line) == 0 {
				continue
			}
			key, val, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				continue // not a header line: nats would not read it either
			}
			k := string(key)
			switch {
			case slices.ContainsFunc(dropped, func(d string) bool { return strings.EqualFold(k, d) }):
				continue
			case account != ad.cfg.StreamAccount && len(k) >= len(ownPrefix) && strings.EqualFold(k[:len(ownPrefix)], ownPrefix):
				continue // a dead letter's (Orderstore-Trimmed, -Poison, ...) or a replay's (-Replay-Of: a rebuild leaves out the event it names)
			case k == msgIDHeader, k == expectLastIDHeader:
				// nats reads these spellings alone (case-sensitive), and the
				// first of several: every one is scoped.
				if id := bytes.TrimLeft(val, " "); len(id) > 0 {
					added += len(ad.cfg.Scope) + len(account) + 1
					out = append(append(append(append(out, k...), ": "...), ad.cfg.Scope...), account...)
					out = append(append(append(out, ':'), id...), "\r\n"...)
					continue
				}
			}
			out = append(append(out, line...), "\r\n"...)
		}
	}
	if ad.cfg.Epoch != "" {
		added += len(EpochHeader) + 4 + len(ad.cfg.Epoch)
		out = append(append(append(out, EpochHeader+": "...), ad.cfg.Epoch...), "\r\n"...)
	}
	if len(out) == len("NATS/1.0\r\n") {
		return nil, 0
	}
	if len(hdr) == 0 {
		added += len("NATS/1.0\r\n\r\n") // the header block itself
	}
	return append(out, "\r\n"...), added
}

// ScopedMsgID is the Nats-Msg-Id stored for a producer's id in account,
// on a node whose scope is scope: "<scope><account>:<id>".
func ScopedMsgID(scope, account, id string) string { return scope + account + ":" + id }

// headerValue is the value of the first header key in hdr (wire form).
func headerValue(hdr []byte, key string) []byte {
	for _, line := range bytes.Split(hdr, []byte("\r\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == key {
			return bytes.TrimLeft(v, " ")
		}
	}
	return nil
}

// refuseInternal refuses what nats' own clients publish into the stream (a republish, an ack sent
// to a reply subject of the stream's), unanswered: nobody reads it, and it could come back in.
func (ad *Admission) refuseInternal(m *server.AdmitMsg) ([]byte, *server.ApiError) {
	m.Reply = ""
	ad.unanswered.Warn(ad.cfg.Log, "", "ingest: nats-server's or orderstore's own client published into the stream, refused: only producers and orderstore publish events (a stream's republish, a consumer's deliver subject or a reply subject must not be one of the stream's)",
		"kind", m.Kind, "subject", truncateSubject(m.Subject))
	return refuse(&ad.refused, 403, "%s: published by nats-server's or orderstore's own client (arrived as %s), not by a producer", truncateSubject(m.Subject), m.Kind)
}

// AwaitElection is embedded.Config.AwaitInterest for a clustered stream with subjects in account
// streamAccount: a producer's publish into it while it has no leader waits 3.5 s for one before
// nats answers it "no responders" (within a client's 5 s timeout).
func AwaitElection(streamAccount string, subjects []string) func(account, subject string) time.Duration {
	return func(account, subject string) time.Duration {
		if account == streamAccount && slices.ContainsFunc(subjects, func(p string) bool { return server.SubjectMatchesFilter(subject, p) }) {
			return 3500 * time.Millisecond
		}
		return 0
	}
}

// hasWildcard reports a '*' or '>' token.
func hasWildcard(subject string) bool {
	for i := 0; i < len(subject); i++ { // no SplitSeq: this runs on every publish
		if c := subject[i]; (c == '*' || c == '>') && (i == 0 || subject[i-1] == '.') && (i+1 == len(subject) || subject[i+1] == '.') {
			return true
		}
	}
	return false
}

// truncateSubject quotes a subject, shortened, for an error or a log line.
func truncateSubject(s string) string {
	if len(s) > 256 {
		return strconv.Quote(s[:256] + "...")
	}
	return strconv.Quote(s)
}

// APIError is a JetStream API error response with orderstore's err_code
// for refusals (10077), as nats-server writes it.
func APIError(code int, description string) []byte {
	b, _ := json.Marshal(map[string]map[string]any{"error": {"code": code, "description": description, "err_code": 10077}})
	return b
}
