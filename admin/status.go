package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/orderstore/orderstore/processor"
)

// Status is the JSON of /v1/status and what `orderstore status` prints.
type Status struct {
	Status      string            `json:"status"` // ready, not ready, recovering
	Checks      []Check           `json:"checks"`
	Durability  map[string]string `json:"durability"`
	Build       BuildInfo         `json:"build"`
	Stream      StreamStatus      `json:"stream"`
	Consumer    *ConsumerStatus   `json:"consumer,omitempty"`
	Processor   *processor.Stats  `json:"processor,omitempty"`
	DeadLetters DeadLetterStatus  `json:"dead_letters"`
	Projection  ProjectionStatus  `json:"projection"`
	Store       StoreStatus       `json:"store"`
	Time        time.Time         `json:"time"`
	Errors      []string          `json:"errors,omitempty"`
	// Recovery is what start-up found and did about a damaged store.
	Recovery []string `json:"recovery,omitempty"`
	// Topology is the cluster, leaf links and a hub's sources; absent on
	// a lone node.
	Topology *Topology `json:"topology,omitempty"`
	// Ingest is group commit's figures; absent in the other modes.
	Ingest *IngestStats `json:"ingest,omitempty"`
	// Guard is what the ingest service and the durable guard refused.
	Guard *GuardStats `json:"guard,omitempty"`
}

// IngestStats are group commit's figures since start: syncs of the store,
// events acknowledged after them, and their distributions.
type IngestStats struct {
	Sync       string `json:"sync"` // how a round syncs: "syncfs" or "fsync of every file"
	Syncs      uint64 `json:"syncs"`
	SyncErrors uint64 `json:"sync_errors"`
	// Acked counts producers' events acknowledged after a sync; Waiting
	// those taken and not yet answered.
	Acked   uint64 `json:"acked"`
	Waiting int64  `json:"waiting"`
	// SyncP50Seconds and SyncP99Seconds estimate the sync time's
	// quantiles from the histogram's buckets (an upper bound).
	SyncP50Seconds float64   `json:"sync_p50_seconds"`
	SyncP99Seconds float64   `json:"sync_p99_seconds"`
	SyncSeconds    Histogram `json:"sync_seconds"`
	BatchEvents    Histogram `json:"batch_events"`
}

// GuardStats count what orderstore answered with an error instead of
// passing it on, since start.
type GuardStats struct {
	// OverBudget: publishes answered 429 (their account had too many in
	// flight); Unanswered: answered 503 because the stream never answered
	// them (nats dropped them: a full disk, a restart, a lost leader);
	// ForgedAnswers: answers on an ack id that were not the stream's,
	// ignored; ElectionRetries: republishes while the stream had no leader.
	OverBudget uint64 `json:"over_budget"`
	// Overloaded: publishes answered 429 at once because the ingest
	// service was behind what producers sent, from accounts with many in
	// flight; ReplyCollisions: publishes left without an answer because
	// nats gave a later publish in flight the same reply subject.
	Overloaded      uint64 `json:"overloaded"`
	ReplyCollisions uint64 `json:"reply_collisions"`
	// IngestPauses: times an account's publishes waiting for the ingest
	// service passed 16,384 (or 32 MiB) and the service paused that
	// account (nats answers its publishes meanwhile: 503 no responders).
	IngestPauses    uint64 `json:"ingest_pauses"`
	Unanswered      uint64 `json:"unanswered"`
	ForgedAnswers   uint64 `json:"forged_answers"`
	ElectionRetries uint64 `json:"election_retries"`
	// ForeignConsumerRequests: client requests on orderstore's own
	// consumer refused by the durable guard.
	ForeignConsumerRequests uint64 `json:"foreign_consumer_requests"`
}

// Histogram is a cumulative histogram: Buckets maps each upper bound to
// the observations at or below it.
type Histogram struct {
	Count   uint64             `json:"count"`
	Sum     float64            `json:"sum"`
	Buckets map[float64]uint64 `json:"-"`
}

// StreamStatus is ORDER_EVENTS' usage against its limits.
type StreamStatus struct {
	Name      string    `json:"name"`
	Messages  uint64    `json:"messages"`
	Bytes     uint64    `json:"bytes"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	FirstTime time.Time `json:"first_time,omitzero"`
	// OldestAgeSeconds is the age of the oldest stored event, to set
	// against MaxAgeSeconds.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	MaxBytes         int64   `json:"max_bytes"`
	MaxMsgs          int64   `json:"max_msgs"`
	MaxAgeSeconds    float64 `json:"max_age_seconds"`
	// BytesPercent is Bytes / MaxBytes in percent; 0 when unlimited.
	BytesPercent float64 `json:"bytes_percent"`
}

// ConsumerStatus is the processor's durable and its lag.
type ConsumerStatus struct {
	Name string `json:"name"`
	// Stream is the stream the durable reads: ORDER_EVENTS, or on a hub
	// its aggregate stream.
	Stream string `json:"stream"`
	processor.LagInfo
}

// DeadLetterStatus is the dead-letter stream's depth.
type DeadLetterStatus struct {
	Stream   string `json:"stream"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"` // processor.dead_letter_max_bytes; -1 unlimited
}

// ProjectionStatus is the projection bucket's usage against its limit.
type ProjectionStatus struct {
	Bucket   string `json:"bucket"`
	Orders   uint64 `json:"orders"`
	Bytes    uint64 `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"` // processor.projection_max_bytes; -1 unlimited
}

// StoreStatus is the store directory and its free disk.
type StoreStatus struct {
	Dir       string `json:"dir"`
	FreeBytes uint64 `json:"free_bytes"`
	// JetStreamBytes is what all streams store; JetStreamMaxBytes is
	// jetstream.max_file_store.
	JetStreamBytes    uint64 `json:"jetstream_bytes"`
	JetStreamMaxBytes int64  `json:"jetstream_max_bytes"`
}

// collectStatus gathers everything; parts that fail are named in Errors
// instead of failing the whole.
func (s *Server) collectStatus(ctx context.Context, b *Backend) Status {
	st := Status{Durability: s.durability(), Build: s.cfg.Build, Time: time.Now().UTC()}
	if b.Guard != nil {
		st.Guard = b.Guard()
	}
	if b.Ingest != nil {
		st.Ingest = b.Ingest()
	}
	st.Status, st.Checks = s.Readiness(ctx)
	st.Recovery = b.Recovery
	st.Stream = StreamStatus{Name: s.cfg.Stream, MaxBytes: s.cfg.MaxBytes, MaxMsgs: s.cfg.MaxMsgs, MaxAgeSeconds: s.cfg.MaxAge.Seconds()}
	fail := func(err error) { st.Errors = append(st.Errors, err.Error()) }
	if str, err := b.JS.Stream(ctx, s.cfg.Stream); err != nil {
		fail(err)
	} else {
		i := str.CachedInfo()
		st.Stream.Messages, st.Stream.Bytes = i.State.Msgs, i.State.Bytes
		st.Stream.FirstSeq, st.Stream.LastSeq = i.State.FirstSeq, i.State.LastSeq
		if i.State.Msgs > 0 {
			st.Stream.FirstTime = i.State.FirstTime
			st.Stream.OldestAgeSeconds = max(time.Since(i.State.FirstTime).Seconds(), 0)
		}
		if st.Stream.MaxBytes > 0 {
			st.Stream.BytesPercent = 100 * float64(i.State.Bytes) / float64(st.Stream.MaxBytes)
		}
	}
	if b.Processor != nil {
		ps := b.Processor.Stats()
		st.Processor = &ps
		if lag, err := b.Processor.Lag(ctx); err != nil {
			fail(err)
		} else {
			cs := s.cfg.ConsumerStream
			if cs == "" {
				cs = s.cfg.Stream
			}
			st.Consumer = &ConsumerStatus{Name: s.cfg.Durable, Stream: cs, LagInfo: lag}
		}
	}
	st.DeadLetters.Stream = s.cfg.DeadLetterStream
	if d, err := b.JS.Stream(ctx, s.cfg.DeadLetterStream); err != nil {
		fail(err)
	} else {
		i := d.CachedInfo()
		st.DeadLetters.Messages, st.DeadLetters.Bytes, st.DeadLetters.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
	}
	st.Projection.Bucket = s.cfg.ProjectionBucket
	if s.cfg.ProjectionBucket != "" {
		if p, err := b.JS.Stream(ctx, "KV_"+s.cfg.ProjectionBucket); err != nil {
			fail(err)
		} else {
			i := p.CachedInfo()
			st.Projection.Orders, st.Projection.Bytes, st.Projection.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
		}
	}
	if b.Topology != nil {
		st.Topology = b.Topology(ctx)
	}
	st.Store.Dir = s.cfg.StoreDir
	if ai, err := b.JS.AccountInfo(ctx); err != nil {
		fail(err)
	} else {
		st.Store.JetStreamBytes, st.Store.JetStreamMaxBytes = ai.Store, s.maxStore(ai)
	}
	if s.cfg.FreeBytes != nil {
		if n, err := s.cfg.FreeBytes(); err != nil {
			fail(err)
		} else {
			st.Store.FreeBytes = n
		}
	}
	return st
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, b *Backend) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, s.collectStatus(ctx, b))
}
