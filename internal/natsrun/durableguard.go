package natsrun

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
)

// DurableGuard answers every client request on orderstore's own consumer (the processor's durable;
// on a hub, its aggregate stream's), which the client accounts' subject mappings send here
// (natsconf: guardMappings): such a client would take events from the processor, and the projection
// would silently miss them. It gets a JetStream API error that says why and how to make a consumer
// of its own; an ack is dropped and counted.
type DurableGuard struct {
	sub      *nats.Subscription
	log      *slog.Logger
	refused  atomic.Uint64
	lastWarn atomic.Int64
	why      []byte // the API error
	next     nats.Header
}

// StartDurableGuard subscribes on nc to what the guard mappings send
// (natsconf.GuardPrefix) for consumer durable of stream.
func StartDurableGuard(nc *nats.Conn, stream, durable string, log *slog.Logger) (*DurableGuard, error) {
	desc := fmt.Sprintf("orderstore: %s is orderstore's own consumer of %s (it folds the events into the projection): "+
		"no client may bind, pull, ack, change or delete it, or the projection would miss events; "+
		"make a durable of your own, e.g. nats consumer add %s my-worker --pull --deliver all --ack explicit --defaults",
		durable, stream, stream)
	g := &DurableGuard{log: log, why: ingest.APIError(403, desc),
		next: nats.Header{"Status": {"409"}, "Description": {desc}}}
	var err error
	if g.sub, err = nc.Subscribe(strings.TrimSuffix(natsconf.GuardPrefix, ".")+".>", g.on); err != nil {
		return nil, fmt.Errorf("durable guard: %w", err)
	}
	return g, nil
}

func (g *DurableGuard) on(m *nats.Msg) {
	g.refused.Add(1)
	verb, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, natsconf.GuardPrefix), ".")
	if now := time.Now().UnixNano(); now-g.lastWarn.Load() > int64(10*time.Second) {
		g.lastWarn.Store(now)
		g.log.Warn("a client tried to use orderstore's own consumer: refused", "verb", verb, "refused_so_far", g.refused.Load())
	}
	if m.Reply == "" || verb == "ack" {
		return // an ack's reply (a "+NXT" pull) gets nothing
	}
	if verb == "next" {
		// A pull request: nats answers a refused pull with a status.
		m.RespondMsg(&nats.Msg{Header: g.next})
		return
	}
	m.Respond(g.why)
}

// Refused counts the requests and acks it refused.
func (g *DurableGuard) Refused() uint64 { return g.refused.Load() }

// Close stops answering.
func (g *DurableGuard) Close() {
	if g != nil && g.sub != nil {
		g.sub.Unsubscribe()
	}
}
