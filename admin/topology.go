package admin

import "time"

// Topology is where this node stands beyond itself: its cluster, its leaf
// links, and (on a hub) each edge's source. Nil on a lone node without
// leaf links.
type Topology struct {
	Node string `json:"node"`
	// Domain is this node's JetStream domain ("" none).
	Domain  string         `json:"domain,omitempty"`
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// Leafnodes are this node's leaf links: an edge's remotes (up or
	// down), a hub's connected edges.
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
	// OtherNodes is how many of Routes lead to other nodes (a node may
	// list its own route).
	OtherNodes int      `json:"other_nodes"`
	Peers      []string `json:"peers,omitempty"`
	// Stream and Consumer are the replica groups of the stream and the
	// processor's consumer.
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
	// Remote is the other side's server name (or the configured URL of a
	// remote that is down).
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
	// SourcedSeq is the edge sequence of the newest event the aggregate
	// holds from it; Behind = EdgeLastSeq - SourcedSeq events, for
	// BehindSeconds (since the source last advanced while behind).
	SourcedSeq    uint64  `json:"sourced_seq"`
	Behind        uint64  `json:"behind"`
	BehindSeconds float64 `json:"behind_seconds"`
	// NATSLag and ActiveSeconds are what nats itself reports for the
	// source (a source can stall while nats reports lag 0).
	NATSLag       uint64  `json:"nats_lag"`
	ActiveSeconds float64 `json:"active_seconds"`
	// Stalled flags a source that has not advanced for a while although
	// its edge, reachable, has more events.
	Stalled bool   `json:"stalled"`
	Error   string `json:"error,omitempty"`
	// Regressed: the edge's last sequence is below the newest the
	// aggregate holds from it (it lost events the hub had copied).
	Regressed bool `json:"regressed,omitempty"`
	// LostEvents counts events the aggregate had copied from the edge
	// that the edge then lost in a crash (never acknowledged there): they
	// were moved to the dead-letter stream and the edge sourced again.
	// Regressions counts such repairs; LastRegression says what the last
	// one did.
	LostEvents     uint64 `json:"lost_events"`
	Regressions    uint64 `json:"regressions"`
	LastRegression string `json:"last_regression,omitempty"`
	// LastAdvance is when SourcedSeq last grew.
	LastAdvance time.Time `json:"last_advance,omitzero"`
}
