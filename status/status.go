// Package status holds the JSON shapes orderstore reports: /v1/status and what `orderstore status`
// prints, its readiness checks, topology and build information, and an order's history
// (/v1/orders/{id}/events). The admin listener serves them; the CLI and other programs decode them.
// It has no behaviour of its own.
package status

import (
	"encoding/json"
	"time"

	"github.com/orderstore/orderstore/internal/orderindex"
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
	Recovery []string  `json:"recovery,omitempty"`
	Topology *Topology `json:"topology,omitempty"` // absent on a lone node
	// Ingest is group commit's figures; absent in the other modes.
	Ingest *IngestStats `json:"ingest,omitempty"`
	// Guard is what admission and the durable guard refused.
	Guard *GuardStats `json:"guard,omitempty"`
	// Validation is schema validation at ingest; absent when it checks nothing.
	Validation *ValidationStats `json:"validation,omitempty"`
	// Rebuild is the projection rebuild under way, or the last one; absent when none ran.
	Rebuild *Rebuild `json:"rebuild,omitempty"`
	// Orders counts orders by status (the order index); absent when processor.order_index is off.
	Orders *OrdersStatus `json:"orders,omitempty"`
	// ConfigReload is the outcome of the last reload of [validation] (SIGHUP, SetValidation).
	ConfigReload *ConfigReload `json:"config_reload,omitempty"`
}

// ConfigReload is the outcome of the last reload; before any, the start's.
type ConfigReload struct {
	Successful  bool      `json:"successful"`
	LastSuccess time.Time `json:"last_success"`    // the last that succeeded, or the start
	Error       string    `json:"error,omitempty"` // why the last one failed
}

// Rebuild states of [Rebuild].
const (
	RebuildFolding    = "folding"     // the shadow folds the stream; reads served by the live projection
	RebuildTakingOver = "taking over" // the live processor is paused; the shadow's orders are copied in
	RebuildDone       = "done"
	RebuildCanceled   = "canceled"
	RebuildFailed     = "failed"
)

// Rebuild is a projection rebuild: GET /v1/projection/rebuild, the "rebuild" of /v1/status, and
// what `orderstore projection rebuild` follows.
type Rebuild struct {
	ID     string `json:"id"`
	State  string `json:"state"`  // RebuildFolding, ...
	Reason string `json:"reason"` // "requested", "the handler's version changed from ... to ..."
	// FromSeq is the first stream sequence folded; Position the last folded (every event up to it
	// is in the shadow); Head the stream's last sequence when last read.
	FromSeq  uint64 `json:"from_seq"`
	Position uint64 `json:"position"`
	Head     uint64 `json:"head"`
	// Done of Total events (by sequence) folded; Rate events per second
	// over the last seconds, ETA seconds left at that rate.
	Done       uint64  `json:"done"`
	Total      uint64  `json:"total"`
	Rate       float64 `json:"rate"`
	ETASeconds float64 `json:"eta_seconds"`
	// Paced: the fold yields the CPU to producers publishing (docs/rebuild.md, "The steps", 2).
	Paced bool `json:"paced,omitempty"`
	// Skipped, as the live projection does not hold them either: Poison, events that can never be
	// applied (whether or not the live processor dead-lettered them); DeadLettered, valid events
	// that are dead letters, or originals of replayed ones.
	Poison       uint64 `json:"poison"`
	DeadLettered uint64 `json:"dead_lettered"`
	// At the takeover (docs/rebuild.md, "The steps", 4): orders rebuilt,
	// and the partial ones (unless ReplacePartial) and conflicts kept as
	// they were; Untouched, orders with no event in the folded range, kept.
	Rebuilt        uint64 `json:"rebuilt"`
	Partial        uint64 `json:"partial"`
	Conflicts      uint64 `json:"conflicts"`
	Untouched      uint64 `json:"untouched"`
	ReplacePartial bool   `json:"replace_partial,omitempty"`
	// Copied of ToCopy orders during the takeover.
	Copied    uint64     `json:"copied,omitempty"`
	ToCopy    uint64     `json:"to_copy,omitempty"`
	Version   string     `json:"version,omitempty"` // the fold's version being built
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// RebuildRequest is what a rebuild is asked (POST /v1/projection/rebuild's body; all optional).
type RebuildRequest struct {
	// FromSeq or FromTime: fold from there instead of the stream's first event; orders with earlier
	// events keep their state unless ReplacePartial.
	FromSeq        uint64    `json:"from_seq,omitempty"`
	FromTime       time.Time `json:"from_time,omitzero"`
	ReplacePartial bool      `json:"replace_partial,omitempty"`
}

// Running reports whether the rebuild is under way.
func (r *Rebuild) Running() bool {
	return r != nil && (r.State == RebuildFolding || r.State == RebuildTakingOver)
}

// ValidationStats are schema validation's settings and what it refused since start.
type ValidationStats struct {
	Schemas      map[string]string `json:"schemas"`       // event type -> schema file
	UnknownTypes string            `json:"unknown_types"` // accept or reject
	Func         bool              `json:"func"`          // an embedding program's own check is set
	// Slow maps each type whose schema the fast check does not take to the first keyword that keeps
	// it off (a JSON pointer into the schema): its events are checked by the JSON Schema library
	// alone, about 16 times the cost (docs/processor.md, "Schemas").
	Slow          map[string]string `json:"slow,omitempty"`
	RejectedTotal uint64            `json:"rejected_total"`
	// Rejected counts refusals per event type ("other" for types without a schema) and reason (the
	// schema keyword that failed, or invalid_json, unknown_type, func).
	Rejected []ValidationCount `json:"rejected,omitempty"`
}

// ValidationCount is how many events of a type were refused for a reason.
type ValidationCount struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Events uint64 `json:"events"`
}

// IngestStats are group commit's figures since start: syncs of the store,
// events acknowledged after them, and their distributions.
type IngestStats struct {
	Sync       string `json:"sync"` // how a round syncs: "fdatasync in nats-server's file store"
	Syncs      uint64 `json:"syncs"`
	SyncErrors uint64 `json:"sync_errors"`
	// Acked counts events acknowledged after a sync; Waiting, publishes now in admission's line.
	Acked   uint64 `json:"acked"`
	Waiting int64  `json:"waiting"`
	// SyncP50Seconds and SyncP99Seconds estimate the sync time's
	// quantiles from the histogram's buckets (an upper bound).
	SyncP50Seconds float64   `json:"sync_p50_seconds"`
	SyncP99Seconds float64   `json:"sync_p99_seconds"`
	SyncSeconds    Histogram `json:"sync_seconds"`
	BatchEvents    Histogram `json:"batch_events"`
	// SyncInFlightSeconds is how long the sync in flight the longest has taken so far; 0: none.
	SyncInFlightSeconds float64 `json:"sync_inflight_seconds"`
}

// GuardStats count what orderstore answered with an error instead of passing it on, since start.
type GuardStats struct {
	// Refused: events refused at admission for their subject (a wildcard token), their size with
	// headers (past max_msg_size) or their origin (a leaf node; nats-server's own clients, not
	// answered), answered 400 or 403; schema validation's refusals are counted under validation.
	Refused uint64 `json:"refused"`
	// HeldBack: publishes whose connection waited in line because the stream's inbound queue was
	// deep (a producer faster than the disk); Overloaded: those answered 429 after 2 s in line.
	HeldBack   uint64 `json:"held_back"`
	Overloaded uint64 `json:"overloaded"`
	// ForeignConsumerRequests: client requests on orderstore's consumer the durable guard refused.
	ForeignConsumerRequests uint64 `json:"foreign_consumer_requests"`
}

// Histogram is a cumulative histogram: Buckets maps each upper bound to the observations up to it.
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
	// OldestAgeSeconds is the age of the oldest stored event, to set against MaxAgeSeconds.
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
	// Stream is the stream the durable reads: ORDER_EVENTS, or on a hub its aggregate stream.
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

// MaxOrderStatuses is how many statuses [OrdersStatus] and the orderstore_orders metric name, the
// largest first; the others are summed as "other" (a status is whatever a producer wrote: the
// labels must stay bounded).
const MaxOrderStatuses = 32

// OrdersStatus is the order index: how many orders are in each status.
type OrdersStatus struct {
	// Loading: the index is still reading the projection bucket; the counts are not complete yet.
	Loading bool `json:"loading,omitempty"`
	Total   int  `json:"total"`
	// Statuses are the largest statuses (up to MaxOrderStatuses), the
	// largest first; each with its stale orders if it has a stale_after.
	Statuses []OrderCount `json:"statuses"`
	// Other counts the orders of the OtherStatuses statuses left out.
	Other         int `json:"other,omitempty"`
	OtherStatuses int `json:"other_statuses,omitempty"`
	// Stale counts, for each status in processor.stale_after, its orders
	// with no event for longer than StaleAfter says.
	Stale      map[string]int    `json:"stale,omitempty"`
	StaleAfter map[string]string `json:"stale_after,omitempty"`
	// IndexLagWrites are the projection bucket's writes the index has not read yet.
	IndexLagWrites uint64 `json:"index_lag_writes"`
}

// OrderCount is one status's orders, and its stale ones if it has a stale_after.
type OrderCount = orderindex.Count

// StoreStatus is the store directory and its free disk.
type StoreStatus struct {
	Dir       string `json:"dir"`
	FreeBytes uint64 `json:"free_bytes"`
	// JetStreamBytes is what all streams store; JetStreamMaxBytes is jetstream.max_file_store.
	JetStreamBytes    uint64 `json:"jetstream_bytes"`
	JetStreamMaxBytes int64  `json:"jetstream_max_bytes"`
	// Encrypted says whether the store is encrypted at rest, and Cipher
	// with which cipher (never the key).
	Encrypted bool   `json:"encrypted"`
	Cipher    string `json:"cipher,omitempty"`
}

// BuildInfo is exported as orderstore_build_info and in /v1/status.
type BuildInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	Date       string `json:"date"`
	GoVersion  string `json:"go_version"`
	NATSServer string `json:"nats_server_version"`
}

// Check is one readiness condition.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// Topology is where this node stands beyond itself: its cluster, its leaf links, and (on a hub)
// each edge's source. Nil on a lone node without leaf links.
type Topology struct {
	Node string `json:"node"`
	// Domain is this node's JetStream domain ("" none).
	Domain  string         `json:"domain,omitempty"`
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// Leafnodes are the node's leaf links: an edge's remotes (up or down), a hub's connected edges.
	Leafnodes []LeafStatus `json:"leafnodes,omitempty"`
	// Sources are a hub's edges, as its aggregate stream sources them.
	Sources []SourceStatus `json:"sources,omitempty"`
}

// ClusterStatus is the node's view of its NATS cluster.
type ClusterStatus struct {
	Name       string `json:"name"`
	MetaLeader string `json:"meta_leader"`
	// Routes are the configured route URLs (this node's own among them);
	// RoutesUp is how many other nodes this node has routes to.
	Routes   []string `json:"routes"`
	RoutesUp int      `json:"routes_up"`
	// OtherNodes is how many of Routes lead to other nodes (a node may list its own route).
	OtherNodes int      `json:"other_nodes"`
	Peers      []string `json:"peers,omitempty"`
	// Stream and Consumer are the replica groups of the stream and the processor's consumer.
	Stream   *ReplicaGroup `json:"stream,omitempty"`
	Consumer *ReplicaGroup `json:"consumer,omitempty"`
	// Quorum is true when the meta group, the stream and the consumer
	// each have a leader: writes and acks can be accepted.
	Quorum bool `json:"quorum"`
}

// ReplicaGroup is one Raft group: its leader and its other replicas.
type ReplicaGroup struct {
	Name     string    `json:"name"`
	Leader   string    `json:"leader"`
	Replicas []Replica `json:"replicas"`
}

// Replica is one follower of a group.
type Replica struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	// Lag is how many operations it is behind the leader;
	// ActiveSeconds how long since it was last heard from.
	Lag           uint64  `json:"lag"`
	ActiveSeconds float64 `json:"active_seconds"`
}

// LeafStatus is one leaf link.
type LeafStatus struct {
	// Remote is the other side's server name (or the configured URL of a remote that is down).
	Remote    string `json:"remote"`
	Connected bool   `json:"connected"`
	Account   string `json:"account,omitempty"`
	RTT       string `json:"rtt,omitempty"`
}

// SourceStatus is one edge's source on a hub.
type SourceStatus struct {
	Edge string `json:"edge"`
	// Reachable is whether the edge's JetStream answered through the
	// leaf link just now; EdgeLastSeq is its stream's last sequence.
	Reachable   bool   `json:"reachable"`
	EdgeLastSeq uint64 `json:"edge_last_seq"`
	// SourcedSeq is the edge sequence of the aggregate's newest event from it, or, if later,
	// the last the edge's limits removed; Behind = EdgeLastSeq - SourcedSeq events, for
	// BehindSeconds (since the source last advanced while behind).
	SourcedSeq    uint64  `json:"sourced_seq"`
	Behind        uint64  `json:"behind"`
	BehindSeconds float64 `json:"behind_seconds"`
	// NATSLag and ActiveSeconds are what nats itself reports for the
	// source (a source can stall while nats reports lag 0).
	NATSLag       uint64  `json:"nats_lag"`
	ActiveSeconds float64 `json:"active_seconds"`
	// Stalled flags a source not advanced lately although its edge, reachable, has more events.
	Stalled bool   `json:"stalled"`
	Error   string `json:"error,omitempty"`
	// Regressed: the edge's last sequence is below the newest the
	// aggregate holds from it (it lost events the hub had copied).
	Regressed bool `json:"regressed,omitempty"`
	// LostEvents, Regressions and LastRegression: the repairs after the edge's power cuts
	// (docs/topologies.md, "3. Edges and a hub": "An edge's power cut").
	LostEvents     uint64 `json:"lost_events"`
	Regressions    uint64 `json:"regressions"`
	LastRegression string `json:"last_regression,omitempty"`
	// LastAdvance is when SourcedSeq last grew.
	LastAdvance time.Time `json:"last_advance,omitzero"`
}

// OrderEvents is a page of an order's history (GET /v1/orders/{id}/events).
type OrderEvents struct {
	OrderID string `json:"order_id"`
	// Total is how many events the history index lists; Unindexed how many predate it (not listed).
	Total     int `json:"total"`
	Unindexed int `json:"unindexed,omitempty"`
	From      int `json:"from"`
	// Next is the from of the next page; absent at the end.
	Next   int          `json:"next,omitempty"`
	Events []OrderEvent `json:"events"`
}

// OrderEvent is one event of an order's history.
type OrderEvent struct {
	Position int    `json:"position"`
	Seq      uint64 `json:"seq"`
	// Retained false: the stream no longer holds it (only seq is known;
	// 0 when the index entry listing it is gone too).
	Retained bool `json:"retained"`
	// Replaced: the stream holds another event at seq (this one was lost
	// in a power cut before it was durable, and its sequence reused).
	Replaced bool                `json:"replaced,omitempty"`
	Edge     string              `json:"edge,omitempty"`
	Subject  string              `json:"subject,omitempty"`
	Type     string              `json:"type,omitempty"`
	Time     *time.Time          `json:"time,omitempty"`
	Headers  map[string][]string `json:"headers,omitempty"`
	// Data is the payload when it is JSON; DataBase64 otherwise.
	Data       json.RawMessage  `json:"data,omitempty"`
	DataBase64 string           `json:"data_base64,omitempty"`
	State      *processor.Order `json:"state,omitempty"`
}
