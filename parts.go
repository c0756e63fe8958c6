package orderstore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/processor"

	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/natsconf"
)

// internalConns are orderstore's own in-process connections, which nats
// counts among its connections (max_connections counts clients only): the
// internal one, the publisher's, the processor's and a hub's watcher's, one per edge.
func (c Config) internalConns() int {
	if c.Hub.Enabled() {
		return 3 + len(c.Hub.Edges)
	}
	return 3
}

// embeddedConfig is the embedded server for c: its limits, and the accounts, users, cluster, leaf
// node and TLS options internal/natsconf makes of c, with id as orderstore's own user.
func (c Config) embeddedConfig(logger *slog.Logger, id *natsconf.Identity) (embedded.Config, error) {
	ec := embedded.Config{
		StoreDir:   c.JetStream.StoreDir,
		Host:       c.Server.Host,
		Port:       c.Server.Port,
		ServerName: c.Server.Name,
		// Room for headers nats adds to a server.max_payload event on its way (ingest.Headroom).
		MaxPayload:       int32(c.Server.MaxPayload + ingest.Headroom),
		MaxMemory:        c.JetStream.MaxMemoryStore,
		MaxStore:         c.JetStream.MaxFileStore,
		SyncInterval:     c.natsSyncInterval(),
		Logger:           logger,
		Debug:            logger.Enabled(context.Background(), slog.LevelDebug),
		SystemUser:       c.Server.SystemUser,
		SystemPassword:   c.Server.SystemPassword,
		MaxConnections:   c.Server.MaxConnections + c.internalConns(),
		MaxSubscriptions: c.Server.MaxSubscriptions,
		// One second to sign in: a socket that never does holds a
		// max_connections slot that long, not nats' default 2s.
		AuthTimeout: time.Second,
		// A connection that falls behind (a reader that does not read) costs itself alone: nats
		// drops what it cannot take and answers the requests among them "no responders", rather
		// than stalling every producer and closing the connection with all it held.
		DropForSlowConsumers: true,
		EncryptionKey:        c.JetStream.EncryptionKey,
		Cipher:               c.JetStream.Cipher,
		// nats recovers every stream before it is ready: minutes on a large store, as the
		// systemd unit allows (TimeoutStartSec), where embedded's default gives up after 60s.
		ReadyTimeout: 5 * time.Minute,
		// The preflight took the store's lock (lockStore), for the appliance's whole life.
		StoreLocked: true,
	}
	err := c.natsInput().Apply(&ec, id)
	return ec, err
}

func (c Config) preflightConfig() bootstrap.PreflightConfig {
	return bootstrap.PreflightConfig{
		StoreDir:     c.JetStream.StoreDir,
		MaxFileStore: c.JetStream.MaxFileStore,
		Headroom:     c.JetStream.DiskHeadroom,
		AllowLowDisk: c.JetStream.AllowLowDisk,
	}
}

// projectionMarkerTTL is how long the marker of an expired projection
// record is kept: long enough for a watch that fell behind to see it.
const projectionMarkerTTL = time.Hour

// DeclareSpec returns what the appliance declares for c at start-up: the stream, the dead-letter
// stream, the projection bucket, its history index and, when the processor is enabled, its durable
// consumer. Pass it to [bootstrap.Declare] to declare the same objects on any NATS server.
func (c Config) DeclareSpec() bootstrap.Spec {
	st := c.Stream
	discard := jetstream.DiscardOld
	if st.Discard == "new" {
		discard = jetstream.DiscardNew
	}
	spec := bootstrap.Spec{
		Stream: jetstream.StreamConfig{
			Name:        st.Name,
			Description: "order events (managed by orderstore)",
			Subjects:    st.Subjects,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      st.MaxAge,
			MaxBytes:    st.MaxBytes,
			MaxMsgs:     st.MaxMsgs,
			MaxMsgSize:  int32(st.MaxMsgSize),
			Discard:     discard,
			Duplicates:  st.DuplicateWindow,
			Replicas:    st.Replicas,
			AllowDirect: true,
		},
	}
	p := c.Processor
	spec.DeadLetter = &jetstream.StreamConfig{
		Name:        p.DeadLetterStream,
		Description: "dead-lettered order events (managed by orderstore)",
		Subjects:    []string{deadLetterSubjectPrefix(p.DeadLetterStream) + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      p.DeadLetterMaxAge,
		MaxBytes:    p.DeadLetterMaxBytes,
		MaxMsgSize:  int32(c.Server.MaxPayload),
		Discard:     jetstream.DiscardOld,
		// A dead letter's Nats-Msg-Id names its event: an event dead-lettered again (its consumer
		// declared again, a restored backup replayed) is stored once while dead letters are kept.
		Duplicates:  cmp.Or(p.DeadLetterMaxAge, 720*time.Hour),
		Replicas:    st.Replicas,
		AllowDirect: true,
	}
	spec.Projection = &jetstream.KeyValueConfig{
		Bucket:      p.ProjectionBucket,
		Description: "order projection (managed by orderstore)",
		History:     1,
		TTL:         st.MaxAge,
		MaxBytes:    p.ProjectionMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    st.Replicas,
	}
	if st.MaxAge > 0 {
		// A record that expires leaves a marker, so that a watch (the
		// order index) forgets the order as the projection does.
		spec.Projection.LimitMarkerTTL = projectionMarkerTTL
	}
	if hmax := c.historyMaxBytes(); hmax > 0 {
		spec.History = c.historySpec(c.Processor.HistoryBucket(), hmax)
	}
	if h := c.Hub; h.Enabled() {
		agg := spec.Stream
		agg.Name, agg.Subjects = h.Stream, nil
		agg.Description = "order events of every edge, sourced (managed by orderstore)"
		// Each source's subjects are prefixed with where it came from ("edge-1.orders.created"):
		// consumers can tell and filter the edges, the event type stays the last token, and the
		// newest event of each edge tells how far its source got.
		src := func(name, domain, prefix string) *jetstream.StreamSource {
			ss := &jetstream.StreamSource{Name: name}
			if domain != "" { // delivered on subjects naming the edge: only its own leaf user's (docs/security.md)
				ss.External = &jetstream.ExternalStream{APIPrefix: "$JS." + domain + ".API", DeliverPrefix: "$JS.S." + domain}
			}
			for _, subj := range st.Subjects {
				ss.SubjectTransforms = append(ss.SubjectTransforms, jetstream.SubjectTransformConfig{Source: subj, Destination: prefix + "." + subj})
			}
			return ss
		}
		agg.Sources = []*jetstream.StreamSource{src(st.Name, "", HubLocalPrefix)}
		for _, e := range h.Edges {
			agg.Sources = append(agg.Sources, src(st.Name, e, e))
		}
		spec.Aggregate = &agg
	}
	if p.Enabled {
		spec.Consumer = &jetstream.ConsumerConfig{
			Durable:       p.Durable,
			Description:   "orderstore built-in processor",
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       p.AckWait,
			// The processor enforces max_deliver itself and dead-letters the event; the server's
			// own limit stays off, because when nats-server reaches it, it drops the event silently
			// (an advisory nobody may hear): a processor that crashed or timed out on the last
			// delivery would lose an order for good.
			MaxDeliver:    -1,
			Metadata:      map[string]string{bootstrap.MetadataMaxDeliver: strconv.Itoa(p.MaxDeliver)},
			MaxAckPending: p.MaxAckPending,
			ReplayPolicy:  jetstream.ReplayInstantPolicy,
		}
	}
	return spec
}

// historySpec is history index hb's stream, read as a KV bucket ("KV_<hb>"), hmax bytes at most.
func (c Config) historySpec(hb string, hmax int64) *jetstream.StreamConfig {
	st := c.Stream
	return &jetstream.StreamConfig{
		Name:        "KV_" + hb,
		Description: "order history index (managed by orderstore)",
		Subjects:    []string{"$KV." + hb + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		// A chunk lists events stored before it was written: once
		// max_age has passed, the stream holds none of them.
		MaxAge: st.MaxAge,
		// Bounded by its count of chunks, each at most HistoryChunkMaxBytes, not by max_bytes: nats
		// reserves a stream's max_bytes against max_file_store, and an index that had to shrink
		// (max_file_store lowered) would leave the account over its reservation, refusing every
		// stream's update.
		MaxBytes:          -1,
		MaxMsgs:           hmax / HistoryChunkMaxBytes,
		MaxMsgSize:        HistoryChunkMaxBytes,
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		// nats' default for a KV bucket (2m), at most max_age (nats refuses a longer one).
		Duplicates:  min(2*time.Minute, cmp.Or(st.MaxAge, 2*time.Minute)),
		Replicas:    st.Replicas,
		AllowDirect: true,
		AllowRollup: true,
		DenyDelete:  true,
	}
}

// HistoryChunkMaxBytes is the most one chunk of the history index takes on disk (256 sequences of
// up to 20 digits, its subject with the longest order id, nats' record overhead):
// processor.history_max_bytes allows history_max_bytes / HistoryChunkMaxBytes chunks.
const HistoryChunkMaxBytes = 6 << 10

// HubLocalPrefix prefixes the subjects of a hub's own events in its
// aggregate stream (an edge's are prefixed with the edge's domain).
const HubLocalPrefix = "hub"

// deadLetterSubjectPrefix is the subject prefix of the dead-letter stream:
// a dead letter of orders.created is stored on "<prefix>.orders.created".
func deadLetterSubjectPrefix(stream string) string { return "dlq." + stream }

// ProcessorConfig returns the built-in processor's configuration for c, as the appliance runs it,
// with h as its handler (the appliance's is the projection of [NewProjection]). Logger is c.Logger
// under component=processor.
func (c Config) ProcessorConfig(h processor.Handler) processor.Config {
	return processor.Config{
		Stream:                  c.DeclareSpec().ConsumerStream(),
		Durable:                 c.Processor.Durable,
		DeadLetterStream:        c.Processor.DeadLetterStream,
		DeadLetterSubjectPrefix: deadLetterSubjectPrefix(c.Processor.DeadLetterStream),
		MaxDeadLetterBytes:      int(c.Server.MaxPayload), // the dead-letter stream's max_msg_size
		MaxDeliver:              c.Processor.MaxDeliver,
		Backoff:                 slices.Clone(c.Processor.Backoff),
		Handler:                 h,
		Logger:                  loggerOrDiscard(c.Logger).With("component", "processor"),
	}
}

// NewProjection returns the built-in projection over c's bucket, as the appliance wires it. Atomic
// batch commits are on only when every publish is fsynced (durability "always"), where they save an
// fsync per order; with group commit or a relaxed interval, pipelined single writes are faster.
func NewProjection(ctx context.Context, js jetstream.JetStream, c Config) (*processor.Projection, error) {
	kv, err := js.KeyValue(ctx, c.Processor.ProjectionBucket)
	if err != nil {
		return nil, fmt.Errorf("projection bucket %q: %w", c.Processor.ProjectionBucket, err)
	}
	proj := processor.NewProjection(js, kv)
	proj.SetAtomicBatches(c.DurabilityMode() == DurabilityAlways)
	if c.historyMaxBytes() > 0 {
		hkv, err := js.KeyValue(ctx, c.Processor.HistoryBucket())
		if err != nil {
			return nil, fmt.Errorf("history bucket %q: %w", c.Processor.HistoryBucket(), err)
		}
		proj.SetHistory(hkv)
	}
	return proj, nil
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger { return cmp.Or(l, slog.New(slog.DiscardHandler)) }
