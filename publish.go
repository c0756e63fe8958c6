package orderstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
)

// EpochHeader names the run of the node that stored the event: a new
// random value at every start. A reader that saw sequence N with one
// epoch and later sees N with another knows the first was lost in a crash
// before it was acknowledged (docs/reliability.md).
const EpochHeader = ingest.EpochHeader

// ingestPrefix is where producers' publishes on the stream's subjects
// reach the ingest service (internal/ingest).
const ingestPrefix = ingest.Prefix

// ingestNodePrefix is this node's ingest prefix: in a cluster each node's
// client accounts import the stream's subjects onto its own node's
// subjects ("_ORDERSTORE_INGEST.<node>."), so that a producer's publish is
// taken by the ingest service of the node it is connected to, and stays
// answered if another node dies; on a single node, ingestPrefix.
func (c Config) ingestNodePrefix() string {
	if !c.Cluster.Enabled() {
		return ingestPrefix
	}
	var b strings.Builder
	b.WriteString(ingestPrefix)
	for _, r := range c.Server.Name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteByte('.')
	return b.String()
}

// ingestSubjectFor is where account's publishes on subject reach this
// node's ingest service (natsconf.IngestSubject).
func (c Config) ingestSubjectFor(account, subject string) string {
	return natsconf.IngestSubject(c.ingestNodePrefix(), account, subject)
}

// msgIDScope prefixes the Nats-Msg-Id the ingest service stores (see
// ingest.Config.Scope): the node's domain, so that ids from two edges
// never collide in a hub's aggregate stream.
func (c Config) msgIDScope() string {
	if c.JetStream.Domain != "" {
		return c.JetStream.Domain + "/"
	}
	return ""
}

func (a *Appliance) ingestConfig() ingest.Config {
	ic := ingest.Config{Inbox: natsconf.InternalInbox, Answers: natsconf.ReplyPrefix, Own: StreamAccount, Subjects: a.cfg.Stream.Subjects, Prefix: a.cfg.ingestNodePrefix(), Accounts: a.cfg.natsInput().IngestAccounts(), Stream: a.cfg.Stream.Name, MaxEvent: int(a.cfg.Stream.MaxMsgSize),
		Epoch: a.epoch, Stats: &ingest.Stats{}}
	ic.Scope = a.cfg.msgIDScope()
	ic.Cluster = a.cfg.Cluster.Enabled()
	// Always set: SetValidation may turn validation on while it runs.
	ic.Validate = func(subject string, data []byte) error { return a.validator.Load().Check(subject, data) }
	ic.InvalidCode = ValidationErrCode
	ic.Pause = a.pauseIngest
	if a.commit != nil {
		ic.Stats = a.commit.Stats()
	}
	return ic
}

// pauseIngest pauses a client account's publishes, or ends the pause
// (ingest.Config.Pause): each of the stream's subjects is mapped in that
// account to natsconf.PausedPrefix and the subject, where nothing is
// imported and nobody may listen, so that nats answers "no responders"
// without passing the publish on to this node's ingest service (or, in a
// cluster, to another node's: the pause is this node's).
// orderstore's own account publishes without an import: not paused so.
func (a *Appliance) pauseIngest(account string, paused bool) error {
	if account == StreamAccount {
		return ingest.ErrNoPause
	}
	srv := a.server()
	if srv == nil {
		if !paused {
			return nil // no server, no mapping: the next one starts without it
		}
		return errors.New("nats is not running")
	}
	acc, err := srv.NATSServer().LookupAccount(account)
	if err != nil {
		return fmt.Errorf("account %s: %w", account, err)
	}
	if !paused {
		for _, s := range a.cfg.Stream.Subjects {
			acc.RemoveMapping(s)
		}
		return nil
	}
	for i, s := range a.cfg.Stream.Subjects {
		if err := acc.AddMapping(s, natsconf.PausedPrefix+s); err != nil {
			for _, done := range a.cfg.Stream.Subjects[:i] {
				acc.RemoveMapping(done)
			}
			return fmt.Errorf("account %s: mapping %s: %w", account, s, err)
		}
	}
	return nil
}

// Publish stores one event on subject (one of the stream's subjects) the
// way a producer's publish is stored: through the ingest service (with
// group commit acknowledged once durable). opts are jetstream's publish
// options (WithMsgID, WithExpectLastSequence, ...); a message id is
// scoped to orderstore's own account. It is what POST /v1/events/{type}
// calls.
func (a *Appliance) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return a.publishMsg(ctx, subject, nil, data, opts...)
}

func (a *Appliance) publishMsg(ctx context.Context, subject string, h nats.Header, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	// With the ingest prefix and the connection's reply inbox (about 70
	// bytes), a longer subject would make nats close orderstore's own
	// connection, and the appliance with it.
	if len(subject) > ingest.MaxSubjectFor(len(a.cfg.ingestNodePrefix())+len(StreamAccount)+1+100) {
		return nil, fmt.Errorf("%d bytes: %w", len(subject), ingest.ErrSubjectTooLong)
	}
	// The ingest service's subject, answered like the stream: jetstream
	// publishes there as it would on the stream's. It may hold an answer
	// up to its ack timeout, longer than jetstream's default 5 s.
	msg := &nats.Msg{Subject: a.cfg.ingestSubjectFor(StreamAccount, subject), Header: h, Data: data}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ingest.AckTimeout+5*time.Second)
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
