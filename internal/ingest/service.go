// Package ingest takes every producer's publish into the stream and
// answers it: the ingest service (admission, per-account budgets and
// pauses, scoped message ids, the epoch, unforgeable acks) and group
// commit's committer, which makes what the stream stored durable before
// the service acknowledges it.
package ingest

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// Prefix is where producers' publishes on the stream's subjects land in
// orderstore's own account: every client account imports the subject S
// as a service that delivers it on Prefix[<node>.]<account>.S, where the
// service takes it. No client can publish on S in orderstore's account
// itself (only orderstore's own connections live there), so no publish
// reaches the stream but through the ingest service.
const Prefix = "_ORDERSTORE_INGEST."

// Bounds of the ingest service.
const (
	ingestMaxBatch      = 20000    // events acknowledged after one sync, at most
	ingestMaxBatchBytes = 64 << 20 // their acks' bytes, at most
	ingestMaxInFlight   = 100000   // events taken and not yet answered, in all
	ingestMaxBytes      = 64 << 20 // their bytes
	// One account (a producer user, the anonymous clients, orderstore's
	// own HTTP ingest) may hold this many of them: one producer cannot
	// take every other's place.
	ingestMaxInFlightAccount = 16384
	ingestMaxBytesAccount    = 16 << 20
	// When the publishes the service answers took longer than
	// ingestBehind from their arrival to their answer (the stream or the
	// syncs are behind what producers send), what an account sends while
	// it has ingestFairShare or more in flight is answered 429 at once
	// (cheaply, before any other work), so that what is in flight drains
	// and every publish is answered well within a client's timeout (5 s
	// by default in nats.go and natscli). An account with fewer in flight
	// (a producer waiting for its acks) is never refused for another's
	// flood.
	ingestBehind    = 2 * time.Second
	ingestFairShare = 64
	// Little's law on what is in flight: past the events the stream
	// acknowledges in ingestFlightFor (at the rate of the last second or
	// so, never below ingestMinFlight), while answers already come more
	// than ingestFlightLate after arrival, a publish would wait longer
	// than that in flight: the same 429 for an account with its fair
	// share in flight. The 16,384 an account may have in flight are 2 to
	// 3 s of acks at a 10x overload's rate on one CPU, which with the time
	// in line before came past a 5 s client timeout.
	ingestFlightFor  = time.Second
	ingestFlightLate = 500 * time.Millisecond
	ingestMinFlight  = 4096
	// Past ingestPauseQueue publishes (or ingestPauseBytes) of one account
	// waiting to be taken, or when one of them has waited longer than
	// ingestQueueDelay, the service pauses that account (see pause): what
	// waits is answered within about ingestQueueDelay, and nats answers
	// the rest.
	ingestPauseQueue = 16384
	ingestPauseBytes = 32 << 20
	ingestQueueDelay = time.Second
	// A publish taken after it waited ingestShedWait in line (as the probe
	// measures it, or, while its account is paused, since the pause began:
	// lower bounds both) is answered 429 at once, before any work that
	// costs. Under a flood the line holds what nats delivered before
	// a pause took hold (at 10x, 100,000 publishes and more), which the
	// service would otherwise store one by one, answering the last of them
	// seconds past a client's timeout.
	ingestShedWait = time.Second
	// What nats-server has delivered to the service's connection but the
	// connection has not read waits in front of the subscriptions, where
	// their count and the probe cannot see it (up to nats' max_pending,
	// 64 MiB: at 10x overload on one CPU, 14 s of publishes). Every
	// ingestBacklogEvery the service sends a PING; its PONG waits behind
	// that backlog. One not back within ingestBacklogLimit pauses the
	// accounts that sent their share and at least ingestBacklogMin since
	// the last PING on time. The limit is short because a flood grows the
	// backlog fast: at 10x what the service takes, by 9 s a second; the
	// floor keeps a moderate producer from being paused for a stall of
	// the whole process (a slow CPU, the race detector).
	ingestBacklogEvery = 50 * time.Millisecond
	ingestBacklogLimit = 250 * time.Millisecond
	ingestBacklogMin   = 1024
	// Past ingestHeldLimit of what nats holds for a connection
	// publishes arrive on (Config.Held), its accounts are paused: a
	// quarter of nats' max_pending (64 MiB), well before the three
	// quarters past which nats drops what it would deliver there
	// (embedded.Config.DropForSlowConsumers), answering requests "no
	// responders" but counting nothing; a pause is counted and logged.
	ingestHeldLimit = 16 << 20
	// What waits to be taken (the subscription's buffer): past it nats
	// would drop publishes without a word, so the service answers
	// everything it takes at once and keeps this far from full.
	ingestMaxPendingMsgs  = 1 << 20
	ingestMaxPendingBytes = 256 << 20
	// ingestAnswerWithin: a publish the stream has not answered by then
	// is answered 503, the last resort: one the stream dropped is
	// answered as soon as it answers a later one (answers come in the
	// order of the publishes), or when the store guard or the connection
	// says it dropped them.
	ingestAnswerWithin = 15 * time.Second
	// AckTimeout bounds a sync a batch waits for.
	AckTimeout = 30 * time.Second
	// An election (no stream leader: nats answers "no responders") is
	// waited out this long, the republish retried, before a 503.
	ingestElectionWait = 3500 * time.Millisecond
	// ingestLeaderGrace is how long a publish in flight when a new
	// stream leader is elected may wait for the new leader's answer.
	ingestLeaderGrace = time.Second
	// Headroom is what nats' max_payload is raised by, beyond the
	// configured server.max_payload, so that the headers the service
	// adds (the epoch, the scoped Nats-Msg-Id) always fit the republish.
	Headroom = 4 << 10
)

// Headers the ingest service reads or writes.
const (
	// EpochHeader names the run of the node that stored the event: a new
	// random value at every start. A reader that saw sequence N with one
	// epoch and later sees N with another knows the first was lost in a
	// crash before it was acknowledged (docs/reliability.md).
	EpochHeader        = "Orderstore-Epoch"
	requestInfoHeader  = "Nats-Request-Info"  // nats' own on a service import: dropped from a producer's publish
	StreamSourceHeader = "Nats-Stream-Source" // set by nats when sourcing: never a producer's
)

// Config is what the ingest service needs of the appliance.
type Config struct {
	Subjects []string // the stream's subjects: nothing else is republished
	Prefix   string   // where the imports deliver them (ingestNodePrefix)
	// Accounts are the accounts whose publishes arrive, each on
	// Prefix+account+"."+subject (ingestSubjectFor); none: StreamAccount.
	Accounts []string
	Stream   string // the stream's name: an answer naming another is not the stream's
	// Sync makes what the stream stored durable before an ack (group
	// commit); nil: nats's own durability, acks go out as they come.
	Sync  func(ctx context.Context) error
	Stats *Stats
	// MaxEvent is the stream's max_msg_size: a larger event (with the
	// headers it is stored with) is refused up front.
	MaxEvent int
	// Epoch is this run's EpochHeader value.
	Epoch string
	// Scope prefixes every scoped Nats-Msg-Id (the node's domain, or "").
	Scope string
	// Cluster: the stream has replicas, and a new leader may not answer
	// what the old one took (see onLeaderElected).
	Cluster bool
	// Validate, if set, checks each event (its subject and payload) before
	// anything is stored: an error refuses it with code 422, err_code
	// InvalidCode and the error's text.
	Validate    func(subject string, data []byte) error
	InvalidCode int
	// Pause, if set, pauses an account's publishes (paused) or ends the
	// pause: while paused nats answers them "no responders" without
	// passing them through the account's import (see pauseMapped). It
	// returns ErrNoPause for an account it cannot pause.
	Pause func(account string, paused bool) error
	// Answers is where a client account's publishes are answered:
	// Answers+account+"."+reply, which nats delivers in that account on
	// reply (natsconf.ReplySubject); "" answers on reply itself, as for
	// publishes of the service's own account (Own).
	Answers string
	Own     string
	// Inbox is the inbox prefix of orderstore's own connections: the
	// stream's answers come on Inbox+".ingest.<random>.<ack id>" (""
	// nats' _INBOX).
	Inbox string
	// Connect, if set, opens the connection an account's publishes
	// arrive on, one per account (nil: they all arrive on the service's
	// own), which then carries all of theirs: the republish, the
	// stream's answers and the answers to their producers. nats holds what it delivers to a connection and the
	// connection has not read yet (up to max_pending, 64 MiB); a flood
	// that filled one shared connection closed it, with every account's
	// publishes waiting there, and stalled or refused the other
	// accounts' meanwhile. On a connection of its own a flood fills that
	// account's alone (with nats dropping what a connection is too far
	// behind to take, embedded.Config.DropForSlowConsumers, and
	// answering it "no responders").
	Connect func(account string) (*nats.Conn, error)
	// Held, if set, returns how many bytes nats holds for nc (a
	// connection publishes arrive on) that nc has not read yet; -1 when
	// it cannot tell. Past ingestHeldLimit the account is paused (see
	// watchBacklog) before nats would begin to drop what it delivers
	// there, which nobody counts.
	Held func(nc *nats.Conn) int
}

// Service is the ingest service. Every producer's publish on the stream's
// subjects reaches it (a stream import from each client account, in every
// durability mode and topology), in arrival order, with the producer's own
// reply subject, which it answers on through Config.Answers. For each it:
//
//   - refuses at once what the stream must not take: wildcard tokens, a
//     subject nats could not carry, an event above max_msg_size, or an
//     account over its in-flight budget (429);
//   - scopes the Nats-Msg-Id to the publisher's account, which the subject
//     names (so one producer cannot suppress another's event), and stamps
//     the epoch;
//   - pauses an account whose publishes pile up in front of it (nats
//     answers them "no responders" meanwhile), not the others;
//   - publishes it into the stream without waiting, with a reply subject
//     nobody can guess, and takes only the stream's answer for it;
//   - waits out an election (nats' "no responders") up to
//     ingestElectionWait, then answers 503;
//   - answers the producer with the stream's own answer once a sync made
//     it durable (group commit), or at once (the other modes).
//
// Every publish gets an answer: an ack, or an error saying what to do.
type Service struct {
	nc        *nats.Conn
	cfg       Config
	log       *slog.Logger
	ackPrefix string

	leaderSub *nats.Subscription
	reqSubs   []*requests // one per account
	links     []*link     // the connections they arrive on, each once
	pauses    atomic.Uint64

	mu          sync.Mutex
	closed      bool
	closing     bool                   // Close has begun: a pause does not subscribe again
	ids         *rand.ChaCha8          // unguessable ack ids
	pending     map[string]*pendingPub // published, the stream's answer awaited
	pubNo       uint64                 // of the last publish (on any link)
	stored      []ackReply             // answered by the stream, a sync awaited
	storedBytes int
	inFlight    int // len(pending)+len(stored)
	// completed counts the publishes that left flight; flightCap is what
	// may be in flight while answers are late (ingestFlightFor), from
	// the rate they leave at (flightRate, flightAt: sweep's last look).
	completed, flightLast uint64
	flightRate            float64
	flightAt              time.Time
	flightCap, minFlight  int
	inBytes               int
	accounts              map[string]*budget
	kick                  chan struct{}
	stop                  chan struct{}
	done                  chan struct{}
	abortCtx              context.Context // canceled when Close gives up waiting
	abort                 context.CancelFunc

	// latency is how long the last publishes answered took from their
	// arrival to their answer (unix nanoseconds; 0 when nothing is in
	// flight): past ingestBehind the service sheds heavy accounts.
	latency atomic.Int64
	// arrivalSkew is set back from each publish's arrival (tests: publishes
	// that arrived long ago without waiting for it).
	arrivalSkew atomic.Int64

	refused atomic.Uint64 // answered 429: over a budget
	shed    atomic.Uint64 // answered 429: the service was behind (ingestBehind)
	// unanswerable: publishes not stored because their answer's subject
	// (Answers, the account, the reply subject) would not fit nats'
	// protocol line; unanswerableLogged: when one was last logged.
	unanswerable       atomic.Uint64
	unanswerableLogged atomic.Int64
	forged             atomic.Uint64 // answers on an ack id that were not the stream's
	unanswer           atomic.Uint64 // answered 503 because the stream did not answer
	elections          atomic.Uint64 // republishes retried while the stream had no leader
	invalid            atomic.Uint64 // refused by Config.Validate

	invalidLogMu sync.Mutex
	invalidLog   time.Time // when a refused plain publish (nobody to tell) was last logged
}

// logInvalid logs a refused event that had no reply subject (nobody to
// tell), at most once a second: the publisher cannot be told, the
// operator can (and the count is in the metrics).
func (in *Service) logInvalid(subject string, err error) {
	in.invalidLogMu.Lock()
	defer in.invalidLogMu.Unlock()
	if time.Since(in.invalidLog) < time.Second {
		return
	}
	in.invalidLog = time.Now()
	in.log.Warn("ingest: an event published without a reply subject failed validation and was not stored (the publisher cannot be told; publish with a request, or JetStream publish, to see the error)",
		"subject", truncateSubject(subject), "err", err)
}

type budget struct{ n, bytes int }

// link is a connection publishes arrive on (Config.Connect: one per
// account; otherwise the service's own), which carries everything of
// theirs: the republish into the stream, the stream's answers (on
// ackPrefix) and the answers to their producers. nats answers what one
// connection publishes in the order it was published, so each link keeps
// its own order.
type link struct {
	nc        *nats.Conn
	ackPrefix string
	ackSub    *nats.Subscription
	pubMu     sync.Mutex // held from recording a publish's place in order to making it
	// order is the link's publishes awaiting an answer, in order, from
	// orderHead (stale ones skipped); in.mu held.
	order     []published
	orderHead int
}

// requests is one account's publishes: a subscription of their own, so
// that one account's flood pauses that account alone.
type requests struct {
	account string
	l       *link                             // the connection they arrive on
	prefix  string                            // Prefix+account+"."
	answers string                            // Answers+account+".", or "" (Config.Answers)
	sub     atomic.Pointer[nats.Subscription] // replaced after a pause
	paused  atomic.Bool                       // sub drains: nats answers new publishes itself
	// pausedAt is when the pause began (unix nanoseconds): what the
	// service takes during it was delivered before, and has waited at
	// least since then.
	pausedAt atomic.Int64
	pauses   atomic.Uint64
	logged   atomic.Int64  // when a pause was last logged (unix nanoseconds)
	recent   atomic.Uint64 // publishes taken since watchBacklog last looked
	// A probe of how long publishes wait to be taken, kept by the
	// subscription's callback alone: the publish that was last in line
	// when the probe began (the taken-th) has waited since then at least.
	probe struct {
		sub    *nats.Subscription // the subscription it counts on
		taken  int64              // publishes taken on sub
		target int64              // the last in line at the probe's start; 0: no probe
		since  time.Time          // the probe's start
	}
}

// waited notes one publish taken, with queued behind it, and returns how
// long the one last in line when the probe began has waited untaken (0:
// it was taken).
func (rs *requests) waited(sub *nats.Subscription, queued int, now time.Time) time.Duration {
	pr := &rs.probe
	if pr.sub != sub { // a new subscription (after a pause): a new count
		pr.sub, pr.taken, pr.target = sub, 0, 0
	}
	pr.taken++
	if pr.target != 0 && pr.taken >= pr.target {
		pr.target = 0 // taken
	}
	if pr.target == 0 {
		if queued == 0 {
			return 0
		}
		pr.target, pr.since = pr.taken+int64(queued), now
	}
	return now.Sub(pr.since)
}

// published is one publish to the stream, in the order they were made.
type published struct {
	no uint64
	id string
}

type pendingPub struct {
	l       *link   // the connection it was published on, and is answered on
	st      *stages // nil unless StagesOn
	no      uint64  // of its last publish (a retry publishes it again)
	reply   string  // where it is answered (requests.answers and the producer's reply subject)
	account string
	size    int
	at      time.Time
	msg     *nats.Msg // kept for a retry while the stream elects a leader
	retries int
	// waitRetry: its last publish was answered "no responders" (nothing
	// stored), and a retry will publish it again.
	waitRetry bool
	// suspect: it was in flight when a new stream leader was elected; if
	// the new leader has not answered it by then, it is answered 503
	// "may or may not be stored".
	suspect time.Time
}

type ackReply struct {
	p      *pendingPub
	data   []byte
	header nats.Header // a status the stream answered with (503 no responders)
}

// Answers the service sends without any detail of the publish.
var (
	answerOverloaded = APIError(429, 10077, "orderstore: overloaded: more publishes are waiting than it takes, and this account has many in flight: not stored; publish it again after a moment, with fewer in flight at once")
	answerWaited     = APIError(429, 10077, "orderstore: overloaded: the event waited too long to be taken (more publishes arrive than it stores): not stored; publish it again after a moment, with fewer in flight at once")
	answerOverAcct   = APIError(429, 10077, "orderstore: too many events in flight from this account ("+strconv.Itoa(ingestMaxInFlightAccount)+" events or "+strconv.Itoa(ingestMaxBytesAccount>>20)+" MiB at most): not stored; publish it again after a moment, with fewer in flight at once")
	answerOverAll    = APIError(429, 10077, "orderstore: too many events in flight ("+strconv.Itoa(ingestMaxInFlight)+" events or "+strconv.Itoa(ingestMaxBytes>>20)+" MiB at most, from every account): not stored; publish it again after a moment")
)

// Start subscribes the ingest service on nc.
func Start(nc *nats.Conn, cfg Config, log *slog.Logger) (*Service, error) {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if cfg.Inbox == "" {
		cfg.Inbox = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	in := &Service{nc: nc, cfg: cfg, log: log, ackPrefix: cfg.Inbox + ".ingest." + nuid.Next() + ".",
		ids: rand.NewChaCha8(seed), pending: map[string]*pendingPub{}, accounts: map[string]*budget{}, flightCap: ingestMinFlight, minFlight: ingestMinFlight,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if in.cfg.Stats == nil {
		in.cfg.Stats = &Stats{}
	}
	in.abortCtx, in.abort = context.WithCancel(context.Background())
	var err error
	fail := func(err error) (*Service, error) {
		for _, r := range in.reqSubs {
			r.sub.Load().Unsubscribe()
		}
		for _, l := range in.links {
			l.ackSub.Unsubscribe()
		}
		return nil, fmt.Errorf("ingest: %w", err)
	}
	var own *link // nc's, when an account's publishes arrive there
	// One subscription per account: a producer's events reach the stream
	// in the order it sent them. In a cluster each node's service has
	// subjects of its own (ingestNodePrefix), so it takes its own node's
	// producers.
	if in.cfg.Prefix == "" {
		in.cfg.Prefix = Prefix
	}
	for _, acct := range in.cfg.Accounts {
		rs := &requests{account: acct, prefix: in.cfg.Prefix + acct + "."}
		switch {
		case cfg.Connect != nil:
			c, err := cfg.Connect(acct)
			if err != nil {
				return fail(fmt.Errorf("a connection for account %s's publishes: %w", acct, err))
			}
			if rs.l, err = in.newLink(c); err != nil {
				return fail(err)
			}
		case own == nil:
			if own, err = in.newLink(nc); err != nil {
				return fail(err)
			}
			fallthrough
		default:
			rs.l = own
		}
		if in.cfg.Answers != "" && acct != in.cfg.Own {
			rs.answers = in.cfg.Answers + acct + "."
		}
		if err := in.subscribeRequests(rs); err != nil {
			return fail(err)
		}
		in.reqSubs = append(in.reqSubs, rs)
	}
	if cfg.Cluster {
		if in.leaderSub, err = nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+cfg.Stream, in.onLeaderElected); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	for _, c := range in.conns() {
		if err := c.Flush(); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	go in.commitLoop()
	go in.sweep()
	for _, c := range in.conns() {
		go in.watchBacklog(c)
	}
	return in, nil
}

// subscribeRequests subscribes the service to an account's publishes.
func (in *Service) subscribeRequests(rs *requests) error {
	sub, err := rs.l.nc.QueueSubscribe(rs.prefix+">", "orderstore-ingest", func(m *nats.Msg) { in.onPublish(rs, m) })
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(ingestMaxPendingMsgs, ingestMaxPendingBytes); err != nil {
		sub.Unsubscribe()
		return err
	}
	rs.sub.Store(sub)
	return nil
}

// pause stops an account's publishes reaching the service until it has
// taken those already on their way: it unsubscribes (nats answers what
// the account's producers publish meanwhile at once, "503 no responders",
// in each producer's own connection, where a flood costs the flooder),
// answers what was delivered, and subscribes again.
func (in *Service) pause(rs *requests, sub *nats.Subscription) {
	rs.pausedAt.Store(time.Now().UnixNano())
	defer func() {
		rs.pausedAt.Store(0) // before the next pause's start is stored, 0: no bound
		rs.paused.Store(false)
	}()
	in.pauses.Add(1)
	n := rs.pauses.Add(1)
	if now, last := time.Now().UnixNano(), rs.logged.Load(); now-last > int64(10*time.Second) && rs.logged.CompareAndSwap(last, now) {
		in.log.Warn("ingest: an account sends more than orderstore takes: its publishes are answered 503 no responders by nats until those on their way are taken (pauses so far)",
			"account", rs.account, "pauses", n)
	}
	if in.pauseMapped(rs, sub) {
		return
	}
	if err := sub.Drain(); err != nil {
		return
	}
	for sub.IsValid() {
		select {
		case <-in.stop:
			return
		case <-time.After(time.Millisecond):
		}
	}
	// Subscribe again, until it works or the service stops: an account
	// left without its subscription would get "no responders" for good.
	// (A closed connection stops the appliance, readiness with it.)
	var lastLog time.Time
	for {
		in.mu.Lock()
		closing := in.closing
		in.mu.Unlock()
		if closing {
			return
		}
		err := in.subscribeRequests(rs)
		if err == nil {
			return
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			in.log.Error("ingest: subscribing again after a pause failed, retrying: the account's producers get no responders meanwhile", "account", rs.account, "err", err)
		}
		select {
		case <-in.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// conns are the connections publishes arrive on (Config.Connect), each
// once.
func (in *Service) conns() []*nats.Conn {
	var cs []*nats.Conn
	for _, l := range in.links {
		cs = append(cs, l.nc)
	}
	return cs
}

// newLink subscribes to the stream's answers on nc, with an ack prefix
// of its own.
func (in *Service) newLink(nc *nats.Conn) (*link, error) {
	l := &link{nc: nc, ackPrefix: in.ackPrefix + strconv.Itoa(len(in.links)) + "."}
	var err error
	if l.ackSub, err = nc.Subscribe(l.ackPrefix+"*", func(m *nats.Msg) { in.onAck(l, m) }); err != nil {
		return nil, err
	}
	if err := l.ackSub.SetPendingLimits(ingestMaxPendingMsgs, ingestMaxPendingBytes); err != nil {
		l.ackSub.Unsubscribe()
		return nil, err
	}
	in.links = append(in.links, l)
	return l, nil
}

// watchBacklog pauses the accounts that fill nc, a connection publishes
// arrive on (see ingestBacklogLimit): a PING whose PONG is late says that
// what nats-server holds for the connection will be taken late.
func (in *Service) watchBacklog(nc *nats.Conn) {
	t := time.NewTicker(ingestBacklogEvery)
	defer t.Stop()
	var on []*requests
	for _, rs := range in.reqSubs {
		if rs.l.nc == nc {
			on = append(on, rs)
		}
	}
	counts := make([]uint64, len(on))
	for {
		select {
		case <-in.stop:
			return
		case <-t.C:
		}
		held := in.cfg.Held != nil && in.cfg.Held(nc) >= ingestHeldLimit
		if !held {
			err := nc.FlushTimeout(ingestBacklogLimit)
			if !errors.Is(err, nats.ErrTimeout) {
				// On time (or the connection is down: the appliance
				// sees to that): a new count.
				for _, rs := range on {
					rs.recent.Store(0)
				}
				continue
			}
		}
		var total uint64
		active := uint64(0)
		for i, rs := range on {
			counts[i] = rs.recent.Swap(0)
			total += counts[i]
			if counts[i] > 0 {
				active++
			}
		}
		for i, rs := range on {
			// Its share or more, and many: an account with a few
			// publishes is not paused for another's flood. What nats
			// holds for a connection of one account's alone is that
			// account's, however few the service took meanwhile.
			heavy := counts[i] >= ingestBacklogMin && counts[i]*active >= total ||
				held && (len(on) == 1 || counts[i] > 0 && counts[i]*active >= total)
			if heavy && rs.paused.CompareAndSwap(false, true) {
				go in.pause(rs, rs.sub.Load())
			}
		}
	}
}

// pauseMapped pauses an account through Config.Pause: nats maps its
// publishes away from the import, and answers them "no responders" at
// once, until the service has taken those already on their way (what
// nats delivered before the mapping: a flush's PONG comes after it, then
// the subscription's pending ones). false: Config.Pause is not set or
// cannot pause this account; the caller unsubscribes instead.
//
// Unsubscribing is not the same: in a cluster the account's publishes
// would go to another node's service instead (one queue group spans the
// nodes), and the subscription would churn. Before producers' publishes
// came by stream imports it was worse: a publish with nobody subscribed
// still went through the account's service import, which set up and
// removed a response import in the stream's account under that account's
// lock, where the service's own answers queued too; under a 10x flood on
// 2 cores every answer waited seconds (bench/README.md, "Where the late
// ones waited").
func (in *Service) pauseMapped(rs *requests, sub *nats.Subscription) bool {
	if in.cfg.Pause == nil {
		return false
	}
	if err := in.cfg.Pause(rs.account, true); err != nil {
		if !errors.Is(err, ErrNoPause) {
			in.log.Warn("ingest: pausing an account by a mapping failed; unsubscribing instead", "account", rs.account, "err", err)
		}
		return false
	}
	defer func() {
		// Until this works, nats answers the account's publishes itself:
		// retried for as long as the service runs.
		for {
			err := in.cfg.Pause(rs.account, false)
			if err == nil {
				return
			}
			in.log.Error("ingest: ending an account's pause failed, retrying: its producers get no responders meanwhile", "account", rs.account, "err", err)
			select {
			case <-in.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	for {
		err := rs.l.nc.FlushTimeout(time.Second)
		if err == nil {
			break
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return true
		}
		wait := time.Duration(0) // a timeout: the backlog is long, flush again
		if !errors.Is(err, nats.ErrTimeout) {
			wait = 10 * time.Millisecond // reconnecting: not in a hot loop
		}
		select {
		case <-in.stop:
			return true
		case <-time.After(wait):
		}
	}
	for {
		if n, _, err := sub.Pending(); err != nil || n == 0 {
			return true
		}
		select {
		case <-in.stop:
			return true
		case <-time.After(time.Millisecond):
		}
	}
}

// ErrNoPause is what Config.Pause returns for an account it cannot pause
// (the stream's own, whose publishes need no import): the service
// unsubscribes instead.
var ErrNoPause = errors.New("ingest: this account is not paused by a mapping")

// refuse answers a publish with an error (nothing was stored).
func (in *Service) refuse(rs *requests, m *nats.Msg, code int, format string, args ...any) {
	if m.Reply != "" {
		in.replyOn(rs.l, rs.answers+m.Reply, APIError(code, 10077, "orderstore: "+fmt.Sprintf(format, args...)))
	}
}

// answerable reports whether a publish's answer fits nats' protocol line
// (a longer one would make nats close the service's connection): the
// reply subject the producer chose, with the account's prefix before it.
// One that does not is neither stored nor answered, and counted.
func (in *Service) answerable(rs *requests, m *nats.Msg) bool {
	if m.Reply == "" || len(rs.answers)+len(m.Reply) <= MaxSubjectFor(0) {
		return true
	}
	n := in.unanswerable.Add(1)
	now := time.Now().UnixNano()
	if last := in.unanswerableLogged.Load(); now-last > int64(10*time.Second) && in.unanswerableLogged.CompareAndSwap(last, now) {
		in.log.Warn("ingest: a publish's reply subject is too long to answer on: not stored, and its producer gets no answer (it times out)",
			"account", rs.account, "reply_bytes", len(m.Reply), "longest", MaxSubjectFor(0)-len(rs.answers), "so_far", n)
	}
	return false
}

// onPublish takes one producer publish. It never blocks: what it cannot
// take now is answered now.
func (in *Service) onPublish(rs *requests, m *nats.Msg) {
	// Admission first, before any work that costs: under overload the
	// answer must be cheaper than what the producers send. Every publish
	// taken counts (the probe counts what is taken on the subscription),
	// and a plain one as much as a request: a flood of them is its
	// account's to pay for (paused: nats drops its plain publishes
	// meanwhile, as it drops what it cannot deliver), not another's.
	rs.recent.Add(1)
	sub := m.Sub // the one that delivered it: after a pause's unsubscribe, the old one drains beside the new
	if sub == nil {
		sub = rs.sub.Load()
	}
	queued, queuedBytes, _ := sub.Pending()
	now := time.Now()
	wait := rs.waited(sub, queued, now)
	if at := rs.pausedAt.Load(); at != 0 && rs.paused.Load() {
		// Paused: what is taken now was delivered before the pause began.
		wait = max(wait, now.Sub(time.Unix(0, at)))
	}
	if (queued > ingestPauseQueue || queuedBytes > ingestPauseBytes || wait > ingestQueueDelay) && rs.paused.CompareAndSwap(false, true) {
		go in.pause(rs, sub)
	}
	if !in.answerable(rs, m) {
		return
	}
	if wait > ingestShedWait && m.Reply != "" {
		// It waited that long in line at least, and would wait about as
		// long again in flight: answered now, cheaply (before its subject
		// is checked or its event validated), so that the line drains at
		// the rate of answers, not of stores.
		in.shed.Add(1)
		in.replyOn(rs.l, rs.answers+m.Reply, answerWaited)
		return
	}
	subject := strings.TrimPrefix(m.Subject, rs.prefix)
	if hasWildcard(subject) {
		in.refuse(rs, m, 400, "%s: a subject with a wildcard token ('*' or '>') names no single event type; publish on a literal subject", truncateSubject(subject))
		return
	}
	if !matchesAny(in.cfg.Subjects, subject) {
		// Only the stream's subjects are imported here.
		in.refuse(rs, m, 400, "%s is not a subject of the stream", truncateSubject(subject))
		return
	}
	if len(subject) > in.maxSubject() {
		// Its republish would exceed nats' protocol line (4 KiB), and nats
		// would close the ingest service's connection for it.
		in.refuse(rs, m, 400, "a subject of %d bytes is longer than the %d the stream takes", len(subject), in.maxSubject())
		return
	}
	if v := in.cfg.Validate; v != nil {
		if err := v(subject, m.Data); err != nil {
			in.invalid.Add(1)
			if m.Reply == "" {
				in.logInvalid(subject, err)
				return
			}
			in.replyOn(rs.l, rs.answers+m.Reply, APIError(422, in.cfg.InvalidCode, "orderstore: "+truncateSubject(subject)+": "+err.Error()+" (nothing was stored)"))
			return
		}
	}
	// The import the publish came through names its account.
	account := rs.account
	if m.Reply == "" { // a plain publish: nobody waits for an answer
		if out, _ := in.republish(m, subject, account); out != nil {
			if err := rs.l.nc.PublishMsg(out); err != nil {
				in.log.Warn("ingest: publish without reply lost", "subject", subject, "err", err)
			}
		}
		return
	}
	late := time.Duration(in.latency.Load())
	behind := late > ingestBehind
	size := len(m.Data) + len(m.Subject) + len(m.Reply) + headerSize(m.Header) + 64
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		in.refuse(rs, m, 503, "orderstore is stopping: the event was not stored, publish it again")
		return
	}
	b := in.accounts[account]
	if b == nil {
		b = &budget{}
		in.accounts[account] = b
	}
	if late > ingestFlightLate && in.inFlight >= in.flightCap {
		behind = true
	}
	var no []byte
	switch {
	case behind && b.n >= ingestFairShare:
		no = answerOverloaded
		in.shed.Add(1)
	case b.n >= ingestMaxInFlightAccount || b.n > 0 && b.bytes+size > ingestMaxBytesAccount:
		no = answerOverAcct
		in.refused.Add(1)
	case in.inFlight >= ingestMaxInFlight || in.inFlight > 0 && in.inBytes+size > ingestMaxBytes:
		no = answerOverAll
		in.refused.Add(1)
	}
	if no != nil {
		if b.n == 0 {
			delete(in.accounts, account)
		}
		in.mu.Unlock()
		in.replyOn(rs.l, rs.answers+m.Reply, no)
		return
	}
	p := &pendingPub{l: rs.l, reply: rs.answers + m.Reply, account: account, size: size, at: now.Add(-time.Duration(in.arrivalSkew.Load())), st: newStages(m, now)}
	in.reserve(p)
	id := in.newID()
	in.mu.Unlock()
	out, tooBig := in.republish(m, subject, account)
	if out == nil {
		in.mu.Lock()
		in.release(p)
		in.mu.Unlock()
		in.answerTo(p, tooBig)
		return
	}
	out.Reply = rs.l.ackPrefix + id
	p.msg = out
	in.mu.Lock()
	in.pending[id] = p
	if p.st != nil {
		p.st.pub = time.Now()
	}
	in.mu.Unlock()
	in.publish(id, p)
}

// publish makes p's publish into the stream, recording its place in the
// order of publishes (the stream answers in that order).
func (in *Service) publish(id string, p *pendingPub) {
	p.l.pubMu.Lock()
	in.mu.Lock()
	if cur, ok := in.pending[id]; !ok || cur != p || in.closed {
		in.mu.Unlock()
		p.l.pubMu.Unlock()
		return // answered meanwhile
	}
	in.publishedLocked(id, p)
	in.mu.Unlock()
	err := p.l.nc.PublishMsg(p.msg)
	p.l.pubMu.Unlock()
	if err != nil {
		if p, ok := in.take(id); ok {
			in.answerTo(p, APIError(503, 10077, "orderstore: the event could not be passed to its stream: "+err.Error()))
		}
	}
}

// ScopedMsgID is the Nats-Msg-Id stored for a producer's id in account:
// "<scope><account>:<id>".
func (c Config) ScopedMsgID(account, id string) string { return c.Scope + account + ":" + id }

// republish is the publish the service makes into the stream for m: the
// Nats-Msg-Id scoped to account, nats' and orderstore's own headers
// dropped, the epoch stamped. An event larger than the stream takes gets
// nil and the answer that says so.
func (in *Service) republish(m *nats.Msg, subject, account string) (*nats.Msg, []byte) {
	h := make(nats.Header, len(m.Header)+1)
	for k, v := range m.Header {
		switch {
		case strings.EqualFold(k, requestInfoHeader), strings.EqualFold(k, StreamSourceHeader), strings.EqualFold(k, EpochHeader):
			continue // nats' and orderstore's own, in any spelling
		case strings.EqualFold(k, processor.HeaderReplayOf) && account != in.cfg.Own:
			// Set by orderstore's own replay of a dead letter alone: a
			// producer's would have a rebuild leave out the event it
			// names (another producer's).
			continue
		}
		switch k {
		case nats.MsgIdHdr:
			// Scoped to the publisher's account: producer A cannot make
			// producer B's event a duplicate by using its id first.
			if len(v) > 0 && v[0] != "" {
				v = []string{in.cfg.ScopedMsgID(account, v[0])}
			}
		}
		h[k] = v
	}
	if in.cfg.Epoch != "" {
		h[EpochHeader] = []string{in.cfg.Epoch}
	}
	stored := headerSize(h) + len(m.Data)
	if in.cfg.MaxEvent > 0 && stored > in.cfg.MaxEvent {
		return nil, APIError(400, 10077, fmt.Sprintf("orderstore: the event takes %d bytes with its headers (orderstore adds %d of them), more than the stream's max_msg_size of %d: make it smaller, or raise stream.max_msg_size",
			stored, max(0, stored-len(m.Data)-headerSize(m.Header)), in.cfg.MaxEvent))
	}
	return &nats.Msg{Subject: subject, Header: h, Data: m.Data}, nil
}

// answerTo sends p's producer its answer.
func (in *Service) answerTo(p *pendingPub, data []byte) { in.replyOn(p.l, p.reply, data) }

// publishedLocked records a publish of p in order; in.mu held.
func (in *Service) publishedLocked(id string, p *pendingPub) {
	p.waitRetry = false
	in.pubNo++
	p.no = in.pubNo
	p.l.order = append(p.l.order, published{in.pubNo, id})
}

// droppedBefore takes the publishes made on l before no that are still
// waiting: the stream answered a later one, and it answers what one
// connection published in the order of the publishes, so it dropped these
// (a stream leader lost with them); in.mu held.
func (in *Service) droppedBefore(l *link, no uint64) []*pendingPub {
	var lost []*pendingPub
	for ; l.orderHead < len(l.order) && l.order[l.orderHead].no < no; l.orderHead++ {
		o := l.order[l.orderHead]
		if p, ok := in.pending[o.id]; ok && p.no == o.no {
			delete(in.pending, o.id)
			in.release(p)
			lost = append(lost, p)
		}
	}
	if l.orderHead > 1024 && l.orderHead > len(l.order)/2 { // amortized O(1) per publish
		l.order = append(l.order[:0], l.order[l.orderHead:]...)
		l.orderHead = 0
	}
	return lost
}

// newID is an ack id nobody can guess; in.mu held.
func (in *Service) newID() string {
	var b [16]byte
	in.ids.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// hasWildcard reports a '*' or '>' token.
func hasWildcard(subject string) bool {
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "*" || tok == ">" {
			return true
		}
	}
	return false
}

// headerSize is a header's size on the wire.
func headerSize(h nats.Header) int { return processor.HeaderSize(h) }

// maxControlLine is nats' limit on a protocol line ("HPUB <subject>
// <reply> <sizes>"): a client that sends a longer one is disconnected.
const maxControlLine = 4096

// maxSubject is the longest subject the service republishes: what fits a
// protocol line with its reply subject and sizes.
func (in *Service) maxSubject() int { return MaxSubjectFor(len(in.ackPrefix) + 6 + 22) }

// MaxSubjectFor is the longest subject that fits one protocol line with a
// reply subject of replyLen bytes ("HPUB <subject> <reply> <hdr> <total>").
func MaxSubjectFor(replyLen int) int { return maxControlLine - len("HPUB   ") - replyLen - 2*10 - 2 }

// ErrSubjectTooLong is returned for a subject orderstore's own connection
// could not publish on without nats closing it.
var ErrSubjectTooLong = errors.New("subject too long to publish: it would exceed nats' 4 KiB protocol line")

// take removes a pending publish, if it is still there.
func (in *Service) take(id string) (*pendingPub, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	p, ok := in.pending[id]
	if !ok {
		return p, false
	}
	delete(in.pending, id)
	in.release(p)
	return p, true
}

// reserve takes one event's place (its account's budget exists); in.mu
// held.
func (in *Service) reserve(p *pendingPub) {
	in.inFlight++
	in.inBytes += p.size
	b := in.accounts[p.account]
	b.n++
	b.bytes += p.size
	in.cfg.Stats.waiting.Store(int64(in.inFlight))
}

// answered notes how long p took from its arrival to its answer; in.mu
// held.
func (in *Service) answered(p *pendingPub) {
	in.latency.Store(int64(time.Since(p.at)))
}

// release frees one event's place, and its reply subject; in.mu held.
func (in *Service) release(p *pendingPub) {
	in.completed++
	in.inFlight--
	in.inBytes -= p.size
	if in.inFlight == 0 {
		in.latency.Store(0) // nothing in flight: nothing is behind
	}
	if b := in.accounts[p.account]; b != nil {
		b.n--
		b.bytes -= p.size
		if b.n <= 0 {
			delete(in.accounts, p.account)
		}
	}
	in.cfg.Stats.waiting.Store(int64(in.inFlight))
}

// streamAnswer reports whether m is what the stream (or nats for it)
// answers a publish with: a status (503 no responders), a JetStream API
// error, or a PubAck naming the stream with a sequence.
func (in *Service) streamAnswer(m *nats.Msg) bool {
	if m.Header.Get("Status") != "" {
		return len(m.Data) == 0
	}
	d := m.Data
	if bytes.Contains(d, []byte(`"error":{`)) {
		return true
	}
	rest, ok := bytes.CutPrefix(d, []byte(`{"stream":"`+in.cfg.Stream+`",`))
	if !ok {
		return false
	}
	_, seq, ok := bytes.Cut(rest, []byte(`"seq":`))
	if !ok {
		return false
	}
	n := 0
	for n < len(seq) && seq[n] >= '0' && seq[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(seq[:n]), 10, 64)
	return err == nil && v > 0
}

// onAck takes the stream's answer for one publish made on l.
func (in *Service) onAck(l *link, m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, l.ackPrefix)
	if !in.streamAnswer(m) {
		in.forged.Add(1)
		in.log.Warn("ingest: an answer on an ack id that is not the stream's was ignored", "subject", truncateSubject(m.Subject), "bytes", len(m.Data))
		return
	}
	in.mu.Lock()
	p, ok := in.pending[id]
	if !ok || p.l != l {
		in.mu.Unlock()
		return // answered by the sweeper already
	}
	if p.st != nil {
		p.st.ack = time.Now()
	}
	if m.Header.Get("Status") == "503" && time.Since(p.at) < ingestElectionWait {
		// No responders: the stream has no leader (an election), or nats
		// is stopping. Nothing was stored: publish again shortly.
		p.retries++
		p.waitRetry = true
		wait := min(time.Duration(p.retries)*50*time.Millisecond, 500*time.Millisecond)
		in.mu.Unlock()
		in.elections.Add(1)
		time.AfterFunc(wait, func() { in.retry(id) })
		return
	}
	delete(in.pending, id)
	var lost []*pendingPub
	if m.Header.Get("Status") == "" {
		// The stream's own answer (nats' statuses come out of order).
		lost = in.droppedBefore(l, p.no)
	}
	if len(lost) > 0 {
		defer in.answerLost(lost)
	}
	if in.cfg.Sync == nil {
		in.answered(p)
		in.release(p)
		in.mu.Unlock()
		in.answer(ackReply{p: p, data: m.Data, header: m.Header})
		in.count(1, answerAcked(m))
		return
	}
	// Every answer of the stream waits for the round, errors too: a
	// refused Nats-Expected-Last-Sequence may rest on an event acked in
	// the same batch, which the round has yet to make durable. The
	// answer goes back as the stream wrote it (headers included).
	in.stored = append(in.stored, ackReply{p: p, data: append([]byte(nil), m.Data...), header: m.Header})
	in.storedBytes += len(m.Data)
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// onLeaderElected sees a new leader of the stream: what the old one took
// and did not answer, it never will. An event with a Nats-Msg-Id is
// published again (the new leader's dedupe answers "duplicate" if the old
// one stored it), so its producer waits out the election; one waiting for
// its retry (nats answered "no responders": nothing stored) is left to
// its retry; one without an id gets ingestLeaderGrace for the new
// leader's answer (it may have been published to the new leader already),
// then 503 "may or may not be stored", before the producer's own timeout.
func (in *Service) onLeaderElected(*nats.Msg) {
	in.mu.Lock()
	var again []string
	for id, p := range in.pending {
		switch {
		case p.waitRetry:
		case p.msg.Header.Get(nats.MsgIdHdr) != "":
			again = append(again, id)
		case p.suspect.IsZero():
			p.suspect = time.Now().Add(ingestLeaderGrace)
		}
	}
	// Again in the order they were first published.
	slices.SortFunc(again, func(a, b string) int { return cmp.Compare(in.pending[a].no, in.pending[b].no) })
	ps := make([]*pendingPub, len(again))
	for i, id := range again {
		ps[i] = in.pending[id]
	}
	in.mu.Unlock()
	in.elections.Add(uint64(len(again)))
	for i, id := range again {
		in.publish(id, ps[i])
	}
}

// answerLost answers publishes the stream dropped.
func (in *Service) answerLost(lost []*pendingPub) {
	in.unanswer.Add(uint64(len(lost)))
	msg := APIError(503, 10077, "orderstore: the stream dropped the event without an answer (a stream leader lost with it?): it may or may not be stored; publish it again with the same Nats-Msg-Id")
	for _, p := range lost {
		in.answerTo(p, msg)
	}
}

// retry publishes a pending event again (the stream had no leader).
func (in *Service) retry(id string) {
	in.mu.Lock()
	p, ok := in.pending[id]
	in.mu.Unlock()
	if ok {
		in.publish(id, p)
	}
}

func answerAcked(m *nats.Msg) int {
	if len(m.Header) == 0 && !bytes.Contains(m.Data, []byte(`"error":{`)) {
		return 1
	}
	return 0
}

func (in *Service) count(batch, acked int) {
	st := in.cfg.Stats
	st.mu.Lock()
	if in.cfg.Sync != nil { // a batch per sync; none without syncs
		st.batchHist.observe(float64(batch))
	}
	st.acked += uint64(acked)
	st.mu.Unlock()
}

// answer sends the stream's answer on to the producer.
func (in *Service) answer(a ackReply) {
	if len(a.header) > 0 {
		a.p.l.nc.PublishMsg(&nats.Msg{Subject: a.p.reply, Header: a.header, Data: a.data})
		return
	}
	in.answerTo(a.p, a.data)
}

// FailPending answers every publish still waiting for the stream's answer
// with a 503: the stream will not answer them (nats stopped storing).
func (in *Service) FailPending(why string) { in.FailPendingOn(nil, why) }

// FailPendingOn answers with a 503 every publish made on nc (nil: on any
// connection) still waiting for the stream's answer: it will not come
// (nc's connection to the server was lost).
func (in *Service) FailPendingOn(nc *nats.Conn, why string) {
	in.mu.Lock()
	var left []*pendingPub
	for id, p := range in.pending {
		if nc != nil && p.l.nc != nc {
			continue
		}
		delete(in.pending, id)
		in.release(p)
		left = append(left, p)
	}
	for _, l := range in.links {
		if nc == nil || l.nc == nc {
			l.order, l.orderHead = l.order[:0], 0
		}
	}
	in.mu.Unlock()
	if len(left) == 0 {
		return
	}
	in.unanswer.Add(uint64(len(left)))
	msg := APIError(503, 10077, "orderstore: "+why+": the event may or may not be stored; publish it again with the same Nats-Msg-Id")
	for _, p := range left {
		in.answerTo(p, msg)
	}
}

// commitLoop acknowledges what the stream stored, one sync per batch. A
// batch is everything stored while the previous sync ran (up to the
// bounds), so it closes when that sync ends, never on a timer.
func (in *Service) commitLoop() {
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
			ctx, cancel := context.WithTimeout(context.Background(), AckTimeout)
			stop := context.AfterFunc(in.abortCtx, cancel)
			var sync0 time.Time
			if StagesOn {
				sync0 = time.Now()
			}
			err := in.cfg.Sync(ctx)
			stop()
			cancel()
			if StagesOn {
				sync1 := time.Now()
				for _, a := range batch {
					if a.p.st != nil {
						a.p.st.sync0, a.p.st.sync1 = sync0, sync1
					}
				}
			}
			var fail []byte
			if err != nil {
				fail = APIError(503, 10077, "orderstore: the event may not be on disk ("+err.Error()+"): not acknowledged; publish it again with the same Nats-Msg-Id once orderstore is back")
			}
			acked := 0
			for _, a := range batch {
				if err != nil {
					in.answerTo(a.p, fail)
					continue
				}
				in.answer(a)
				// nats writes an error answer with an "error" object.
				if len(a.header) == 0 && !bytes.Contains(a.data, []byte(`"error":{`)) {
					acked++
				}
			}
			if StagesOn {
				ans := time.Now()
				for _, a := range batch {
					a.p.st.done(ans)
				}
			}
			in.mu.Lock()
			in.answered(batch[0].p) // the oldest of the batch
			for _, a := range batch {
				in.release(a.p)
			}
			in.mu.Unlock()
			if err == nil {
				in.count(len(batch), acked)
			}
		}
	}
}

// replyOn answers on l's connection.
func (in *Service) replyOn(l *link, subject string, data []byte) {
	if err := l.nc.Publish(subject, data); err != nil {
		in.log.Debug("ingest: reply lost (the producer will time out)", "err", err)
	}
}

func (in *Service) reply(subject string, data []byte) {
	if err := in.nc.Publish(subject, data); err != nil {
		in.log.Debug("ingest: reply lost (the producer will time out)", "err", err)
	}
}

// sweep answers publishes whose stream answer never came (nats dropped
// them: a restart by the store guard, a stream leader lost mid-write)
// within ingestAnswerWithin, so that producers hear before they time out.
func (in *Service) sweep() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-t.C:
		}
		var late []*pendingPub
		now := time.Now()
		in.mu.Lock()
		in.updateFlightCap(now)
		for id, p := range in.pending {
			if now.Sub(p.at) > ingestAnswerWithin || !p.suspect.IsZero() && now.After(p.suspect) && !p.waitRetry {
				delete(in.pending, id)
				in.release(p)
				late = append(late, p)
			}
		}
		in.mu.Unlock()
		in.unanswer.Add(uint64(len(late)))
		for _, p := range late {
			msg := "orderstore: the stream did not answer in time: the event may or may not be stored; publish it again with the same Nats-Msg-Id"
			switch {
			case !p.suspect.IsZero():
				msg = "orderstore: the stream's leader changed while the event was in flight: it may or may not be stored; publish it again (with a Nats-Msg-Id a retry is safe)"
			case p.retries > 0:
				msg = "orderstore: the stream has no leader (an election that did not end in time): the event was not stored; publish it again"
			}
			in.answerTo(p, APIError(503, 10077, msg))
		}
	}
}

// updateFlightCap sets flightCap from the rate publishes left flight at
// since the last call (an average of the last second or so); in.mu held.
func (in *Service) updateFlightCap(now time.Time) {
	if !in.flightAt.IsZero() {
		if d := now.Sub(in.flightAt).Seconds(); d > 0 {
			in.flightRate = 0.5*in.flightRate + 0.5*float64(in.completed-in.flightLast)/d
		}
	}
	in.flightLast, in.flightAt = in.completed, now
	in.flightCap = max(in.minFlight, int(in.flightRate*ingestFlightFor.Seconds()))
}

// Close stops taking publishes (those already delivered to the service
// are still taken), waits (up to ctx) until those taken are answered, and
// stops; what is still unanswered then gets a 503.
func (in *Service) Close(ctx context.Context) {
	in.mu.Lock()
	in.closing = true
	in.mu.Unlock()
	for _, rs := range in.reqSubs {
		for rs.paused.Load() && ctx.Err() == nil { // a pause subscribes again
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
		if sub := rs.sub.Load(); sub.Drain() != nil {
			sub.Unsubscribe()
		}
	}
	for _, rs := range in.reqSubs {
		for rs.sub.Load().IsValid() && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
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
	in.mu.Unlock()
	in.abort() // a sync still running is given up on: its batch gets an error
	close(in.stop)
	<-in.done
	for _, l := range in.links {
		l.ackSub.Unsubscribe()
	}
	if in.leaderSub != nil {
		in.leaderSub.Unsubscribe()
	}
	in.mu.Lock()
	var left []string
	for id, p := range in.pending {
		left = append(left, p.reply)
		delete(in.pending, id)
	}
	for _, a := range in.stored {
		left = append(left, a.p.reply)
	}
	in.stored = nil
	in.mu.Unlock()
	for _, r := range left {
		in.reply(r, APIError(503, 10077, "orderstore is stopping: the event may or may not be stored; publish it again with the same Nats-Msg-Id"))
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

// APIError is a JetStream API error response, as nats-server writes it.
func APIError(code, errCode int, description string) []byte {
	d, _ := json.Marshal(description)
	b := make([]byte, 0, len(d)+64)
	b = strconv.AppendInt(append(b, `{"error":{"code":`...), int64(code), 10)
	b = append(append(b, `,"description":`...), d...)
	b = strconv.AppendInt(append(b, `,"err_code":`...), int64(errCode), 10)
	return append(b, "}}"...)
}

// Guard adds what the service refused or could not answer to g.
// Queued is how many publishes nats delivered to the service that it has
// not taken yet (they wait in its subscriptions).
func (in *Service) Queued() int {
	n := 0
	for _, rs := range in.reqSubs {
		if sub := rs.sub.Load(); sub != nil {
			if msgs, _, err := sub.Pending(); err == nil {
				n += msgs
			}
		}
	}
	return n
}

func (in *Service) Guard(g *status.GuardStats) {
	g.OverBudget, g.Unanswered, g.ForgedAnswers, g.ElectionRetries = in.refused.Load(), in.unanswer.Load(), in.forged.Load(), in.elections.Load()
	g.Overloaded, g.Unanswerable, g.IngestPauses = in.shed.Load(), in.unanswerable.Load(), in.pauses.Load()
}
