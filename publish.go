package orderstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/natsserver/server"
)

// EpochHeader names the run of the node that stored the event: a new random value at every start. A
// reader that saw sequence N with one epoch and later sees N with another knows the first was lost
// in a crash before it was acknowledged (docs/reliability.md).
const EpochHeader = ingest.EpochHeader

// msgIDScope prefixes every Nats-Msg-Id admission stores (ingest.AdmitConfig.Scope): the node's
// domain, so that ids from two edges never collide in a hub's aggregate stream.
func (c Config) msgIDScope() string {
	if c.JetStream.Domain != "" {
		return c.JetStream.Domain + "/"
	}
	return ""
}

// newAdmission is this appliance's nats admission hook: every event published into the stream (by
// any producer or orderstore itself) is checked, scoped and stamped on its publisher's goroutine.
func (a *Appliance) newAdmission() *ingest.Admission {
	return ingest.NewAdmission(ingest.AdmitConfig{
		Stream: a.cfg.Stream.Name, StreamAccount: StreamAccount, MaxEvent: int(a.cfg.Stream.MaxMsgSize),
		OwnNkey: a.id.PublicKey(), OthersAccount: AnonymousAccount, OwnInbox: natsconf.InternalInbox,
		Epoch: a.epoch, Scope: a.cfg.msgIDScope(),
		// Always set: SetValidation may turn validation on while it runs.
		Validate:    func(subject string, data []byte) error { return a.validator.Load().Check(subject, data) },
		InvalidCode: ValidationErrCode,
		Log:         a.log.With("component", "ingest"),
	})
}

// Publish stores one event on subject (one of the stream's subjects) the way a producer's publish
// is stored: admitted (validated, its id scoped to orderstore's own account, the epoch stamped)
// and, with group commit, acknowledged once durable. opts are jetstream's publish options
// (WithMsgID, WithExpectLastSequence, ...). It is what POST /v1/events/{type} calls. Any other
// subject is refused before anything is sent (a *jetstream.APIError, 400, err_code 10077).
func (a *Appliance) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return a.publishMsg(ctx, subject, nil, data, opts...)
}

// publishMsg publishes with the rights of orderstore's own connection, which may write its
// buckets, the dead letters and the JetStream API: only a literal subject of the stream passes,
// and one short enough for that connection (with its reply inbox, a longer one would exceed
// nats' 4 KiB protocol line, and nats would close the connection). It publishes on the
// publisher's connection: under overload its wait in admission's line holds that connection
// alone, not the one readiness, queries and the admin API read on.
func (a *Appliance) publishMsg(ctx context.Context, subject string, h nats.Header, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	why := ""
	switch st := a.cfg.Stream; {
	case len(subject) > maxPublishSubject:
		why = fmt.Sprintf("it is too long: %d bytes, more than the %d orderstore publishes on", len(subject), maxPublishSubject)
	case !server.IsValidPublishSubject(subject):
		why = "it has a wildcard token ('*' or '>') or an empty one: publish on a literal subject"
	case !slices.ContainsFunc(st.Subjects, func(f string) bool { return server.SubjectMatchesFilter(subject, f) }):
		why = fmt.Sprintf("it is none of stream %s's subjects %q, and orderstore publishes only events", st.Name, st.Subjects)
	default:
		select {
		case a.pubSlots <- struct{}{}:
			defer func() { <-a.pubSlots }()
			return a.pubjs.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: data}, opts...)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(publishSlotWait):
			return nil, &jetstream.APIError{Code: 429, ErrorCode: 10077, Description: fmt.Sprintf("orderstore: the stream is behind what "+
				"producers send (%d of orderstore's own publishes wait in line): the event was not stored, publish it again shortly", publishSlots)}
		}
	}
	return nil, &jetstream.APIError{Code: 400, ErrorCode: 10077, Description: fmt.Sprintf("orderstore: subject %.200q refused: %s", subject, why)}
}

// At most publishSlots publishes of publishMsg are in flight; another waits publishSlotWait for a
// slot, then is answered 429. Those in flight wait in admission's line one after another
// (lineWait each, holding the connection's lock: nats.go's write into the in-process pipe waits
// for the server's read loop), so that an HTTP flood cannot hold every admin connection.
const publishSlots, publishSlotWait = 16, 5 * time.Second

// maxPublishSubject is the longest subject orderstore's own connection
// publishes on: nats' protocol line (4 KiB) with the reply inbox and sizes.
const maxPublishSubject = 3900

// guardedJetStream publishes a dead letter's replay through publishMsg: its subject is whatever
// wrote the dead letter chose (an admin, or the anonymous default, may write there), so one that
// is none of the stream's, or too long, is refused. A hub's dead letters are of its aggregate,
// whose subjects name their source ("edge-1.orders.created"), which no stream takes: they go into
// the hub's own stream without it (a subject that is still none of its stream's is refused).
type guardedJetStream struct {
	jetstream.JetStream
	a *Appliance
}

func (j guardedJetStream) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	subject := msg.Subject
	if src, rest, ok := strings.Cut(subject, "."); ok && j.a.cfg.Hub.Enabled() && (src == HubLocalPrefix || slices.Contains(j.a.cfg.Hub.Edges, src)) {
		subject = rest
	}
	return j.a.publishMsg(ctx, subject, msg.Header, msg.Data, opts...)
}
