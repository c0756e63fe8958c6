package orderstore

import (
	"log/slog"
	"time"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// Config is the whole appliance, in plain Go. Its tables mirror the TOML file's ([server],
// [jetstream], [stream], [processor], [admin]): the file's jetstream.store_dir is
// Config.JetStream.StoreDir. Start from [DefaultConfig] and change what you need; [Config.Validate]
// reports every problem at once.
type Config struct {
	Server    ServerConfig
	JetStream JetStreamConfig
	Stream    StreamConfig
	Processor ProcessorConfig
	Admin     AdminConfig
	Cluster   ClusterConfig
	LeafNode  LeafNodeConfig
	Hub       HubConfig
	// Validation checks every event at ingest against JSON Schemas ([validation]). Default: none.
	Validation ValidationConfig

	// Logger receives every component's log lines (component=nats, bootstrap, processor, admin).
	// Nil discards them. When it is enabled for slog.LevelDebug, nats-server's debug log is on too.
	Logger *slog.Logger

	// Build is the version reported by /metrics, /v1/status and the
	// dashboard. Zero fields read "unknown".
	Build status.BuildInfo

	rebuildPace   time.Duration // tests: a projection rebuild's pause after each step
	syncHungAfter time.Duration // tests: readiness' bound on a sync in flight, instead of 30 s
}

// ServerConfig is the NATS client listener ([server]).
type ServerConfig struct {
	// Name is the server name `nats server info` shows. Default "orderstore".
	Name string
	// Host is the client listener address. Default "127.0.0.1". A non-loopback host needs Users.
	Host string
	// Port is the client port. Default 4222; -1 picks a random free port
	// (read it back with [Appliance.ClientURL]); 0 means 4222.
	Port int
	// MaxPayload is the largest message a client may publish, in bytes. Default 1 MiB, max 64 MiB.
	MaxPayload int64
	// SystemUser and SystemPassword, both set, define a system-account user so `nats server info`
	// works: it may publish system requests ($SYS.REQ.>) only. Default none. The password may be a
	// bcrypt hash.
	SystemUser, SystemPassword string
	// Users are the client users, each in an account of its own (see [User]). Empty means anonymous
	// clients, which is allowed on a loopback Host only; with users, a client without credentials
	// is always refused.
	Users []User
	// TLS secures the client port. Zero: plaintext.
	TLS TLSConfig
	// AllowPlaintext silences the warning a non-loopback Host without TLS
	// logs at every start (for labs).
	AllowPlaintext bool
	// MaxConnections caps client connections; past it new clients are refused, so a flood cannot
	// exhaust the process's file descriptors. Default 4096 (the systemd unit allows 65536).
	MaxConnections int
	// MaxSubscriptions caps one connection's subscriptions. Default 10000; 0 is unlimited.
	MaxSubscriptions int
}

// ClusterConfig joins a NATS cluster ([cluster]): JetStream clustering with Raft over the routes,
// so Stream.Replicas may be 3. Every node runs the processor against the one durable consumer.
type ClusterConfig = natsconf.ClusterConfig

// LeafNodeConfig connects edges to a hub over NATS leaf nodes ([leafnode]).
type LeafNodeConfig = natsconf.LeafNodeConfig

// LeafRemote is one hub an edge connects to.
type LeafRemote = natsconf.LeafRemote

// LeafUser is one edge's own credential at a hub.
type LeafUser = natsconf.LeafUser

// HubConfig makes this node a hub ([hub]): it declares Stream, which sources each edge's stream
// across its JetStream domain, and the local stream too. The processor and projection run over it.
type HubConfig struct {
	// Stream is the aggregate stream's name, e.g. "ORDER_EVENTS_ALL". "" (the default) is no hub.
	Stream string `toml:"stream"`
	// Edges are the edges' JetStream domains (their jetstream.domain).
	Edges []string `toml:"edges"`
}

// Enabled reports whether the node is a hub.
func (h HubConfig) Enabled() bool { return h.Stream != "" }

// TLSConfig names the certificate files of a listener ([server.tls], [admin.tls]).
type TLSConfig = natsconf.TLSConfig

// Roles of a [User].
const (
	// RoleProducer may publish to the stream's subjects and get its own publish acks, nothing else.
	RoleProducer = natsconf.RoleProducer
	// RoleReader may read stream and consumer info, events (ordered consumers, its own durables)
	// and the projection; it cannot publish, purge, delete or touch the processor's consumer.
	RoleReader = natsconf.RoleReader
	// RoleAdmin may do everything to orderstore's streams, consumers and
	// buckets, publish events, and run `nats server info/report`.
	RoleAdmin = natsconf.RoleAdmin
)

// User is one NATS client user ([[server.users]]). Each user lands in an account of its own, which
// reaches the stream's account only through the services its role imports: no user can receive
// another user's replies, and the stream's account holds orderstore's own connections only.
type User = natsconf.User

// JetStreamConfig is the storage engine ([jetstream]).
type JetStreamConfig struct {
	// StoreDir is where streams live; created if missing, locked while the
	// appliance runs. Default "./orderstore-data".
	StoreDir string
	// MaxFileStore is all the disk JetStream may use, in bytes. Default 10 GiB. Must be positive.
	MaxFileStore int64
	// MaxMemoryStore is the memory for memory-backed streams, in bytes.
	// Default 256 MiB. Must be positive.
	MaxMemoryStore int64
	// Durability says what a publish ack means ([jetstream] durability):
	//
	//   - DurabilityGroupCommit ("group-commit"): orderstore acks each event once one sync of the
	//     store made it durable; a sync covers every event stored while the one before ran. An
	//     acknowledged event survives power loss, at far more events per second than "always".
	//   - DurabilityAlways ("always"): nats fsyncs before every ack.
	//   - DurabilityInterval ("interval"): nats fsyncs every SyncInterval; a process crash loses
	//     nothing, a power cut can lose up to SyncInterval of acknowledged events.
	//
	// "" chooses: "interval" when SyncInterval is set, else "group-commit" on a single node and
	// "always" in a cluster (where the stream leader's quorum, on other hosts, acks an event).
	Durability string
	// SyncInterval is how often nats fsyncs stream files in Durability "interval"; 0 otherwise.
	SyncInterval time.Duration
	// Domain is this node's JetStream domain: an edge's name, which a hub
	// lists in Hub.Edges. "" is none. Letters, digits, '-' and '_'.
	Domain string
	// DiskHeadroom is the free disk wanted beyond what MaxFileStore can
	// still grow into, in bytes. Default 1 GiB.
	DiskHeadroom int64
	// AllowLowDisk turns a failed free-disk check into a warning.
	AllowLowDisk bool
	// EncryptionKey, when set, encrypts everything the store holds: the stream, the dead letters,
	// the projection, the history index and the consumer's state (nats-server's store encryption),
	// and the backups orderstore writes. At least 32 bytes; `orderstore key generate` makes one.
	// The store keeps a check of it (store_dir/encryption.json), so that a wrong or missing key is
	// refused before anything starts.
	EncryptionKey string
	// Cipher is CipherChaCha ("", the default) or CipherAES. A store keeps the cipher and key it
	// was made with: another takes a backup and a restore (docs/security.md).
	Cipher string
}

// The ciphers of JetStreamConfig.Cipher.
const (
	CipherChaCha = embedded.CipherChaCha
	CipherAES    = embedded.CipherAES
)

// MinEncryptionKeyLen is the shortest EncryptionKey taken, in bytes.
const MinEncryptionKeyLen = 32

// StreamConfig is the ORDER_EVENTS stream and its retention limits ([stream]).
type StreamConfig struct {
	// Name default "ORDER_EVENTS"; Subjects default ["orders.>"].
	Name     string
	Subjects []string
	// MaxAge is how long events are kept; 0 keeps them forever. Default 168h.
	MaxAge time.Duration
	// MaxBytes caps the stream, in bytes; -1 is unlimited (up to MaxFileStore). Default 8 GiB.
	MaxBytes int64
	// MaxMsgs caps the event count; -1 (the default) is unlimited.
	MaxMsgs int64
	// MaxMsgSize is the largest event, in bytes. Default 1 MiB; at most Server.MaxPayload.
	MaxMsgSize int64
	// Discard is what happens at a limit: "old" (default) drops the oldest
	// events, "new" refuses new ones.
	Discard string
	// DuplicateWindow is how long a Nats-Msg-Id is remembered for dedupe. Default 2m.
	DuplicateWindow time.Duration
	// Replicas is 1 on a single host, 3 (or 5) in a cluster: the stream, the dead-letter stream,
	// the projection bucket and the processor's consumer are replicated alike.
	Replicas int
}

// ProcessorConfig is the built-in durable processor and what it owns ([processor]).
type ProcessorConfig struct {
	// Enabled runs the processor. Default true. The dead-letter stream and
	// the projection bucket are declared either way.
	Enabled bool
	// Durable is the consumer's name. Default "order-processor".
	Durable string
	// AckWait is how long a delivered event may stay unacked before it is redelivered. Default 30s.
	AckWait time.Duration
	// MaxDeliver is the delivery on which a failing event is dead-lettered. Default 5.
	MaxDeliver int
	// Backoff lists the delays before the 1st, 2nd, ... retry; fewer
	// entries than MaxDeliver. Default [1s 5s 30s].
	Backoff []time.Duration
	// MaxAckPending caps events delivered and not yet acked: at most 500,000. Default 8000.
	MaxAckPending int
	// DeadLetterStream holds poison and exhausted events. Default "ORDER_EVENTS_DLQ".
	DeadLetterStream string
	// DeadLetterMaxAge is how long a dead letter is kept; 0 forever. Default 720h.
	DeadLetterMaxAge time.Duration
	// DeadLetterMaxBytes caps the dead-letter stream, in bytes (the oldest
	// dead letters go beyond it). Default 256 MiB.
	DeadLetterMaxBytes int64
	// ProjectionBucket is the KV bucket of projected orders, key = order id. Default "ORDERS". An
	// order's record expires Stream.MaxAge after its last event, when the stream no longer holds
	// its events either. A new name on a store with events: start rebuilds the projection from the
	// stream (the old bucket is kept, with its reservation).
	ProjectionBucket string
	// ProjectionMaxBytes caps the projection bucket, in bytes. Default 512 MiB. When it is full the
	// appliance reports not ready, and events that cannot be applied are dead-lettered after
	// MaxDeliver (replay them once there is room); nothing is lost. Stream.MaxBytes +
	// DeadLetterMaxBytes + ProjectionMaxBytes must fit in JetStream.MaxFileStore.
	ProjectionMaxBytes int64
	// HistoryMaxBytes caps the history index, in bytes: per order, the stream sequences of its
	// events, so that an order's events and its state as of any moment are found without reading
	// the stream. It is kept in the stream "KV_<projection bucket>_HISTORY", in chunks of 256
	// sequences (about 2.5 KiB on disk each, counted at their largest, HistoryChunkMaxBytes: the
	// limit lists 43,690 events per MiB); beyond it (or stream.max_age) the oldest chunks go, and
	// the events they listed show as no longer retained. 0 (the default) is 512 MiB, or what
	// jetstream.max_file_store leaves next to the stream, the dead letters and the projection if
	// that is less; under 1 MiB left there is no index (the history calls answer ErrNoHistory,
	// saying why). Stream.MaxBytes + DeadLetterMaxBytes + ProjectionMaxBytes + HistoryMaxBytes must
	// fit in JetStream.MaxFileStore.
	HistoryMaxBytes int64
	// OrderIndex keeps the projection's orders by status and by the time of their latest event, in
	// memory (about 280 bytes per order), for [Appliance.Orders], GET /v1/orders, `orderstore
	// orders` and the orderstore_orders metrics. It is computed from the projection bucket (a
	// watch), so it holds what the projection holds. Default true.
	OrderIndex bool
	// StaleAfter maps a status to how long an order may stay in it with no event before it counts
	// as stale: orderstore_orders_stale{status}, the OrderstoreOrdersStale alert, `orderstore
	// orders -stale`. At most 64 statuses; none by default.
	StaleAfter map[string]time.Duration
	// Handler, when set, runs your logic instead of the built-in projection, with the same
	// delivery, retry, dead-letter and shutdown machinery (a program embedding orderstore with its
	// own logic). The projection still runs beside it, after it, for the events it applied
	// ([processor.WithHistory]), so that an order's history and its state as of a moment can be
	// looked up (unless max_file_store leaves no room for the history index). Nil runs the
	// projection of [NewProjection] alone. It has no TOML key.
	Handler processor.Handler
}

// Default and least size of the history index (Processor.HistoryMaxBytes 0).
const (
	defaultHistoryBytes = 512 << 20
	minHistoryBytes     = 1 << 20 // 170 chunks
)

// historyMaxBytes is the history index's limit: Processor.HistoryMaxBytes, or by default 512 MiB or
// what max_file_store leaves, if less; 0 (no index) when that is less than 1 MiB: a config that
// gives the stream, the dead letters and the projection all of max_file_store keeps working as
// before, without the index (the history calls say why).
func (c Config) historyMaxBytes() int64 {
	p, st, j := c.Processor, c.Stream, c.JetStream
	if p.HistoryMaxBytes > 0 {
		return p.HistoryMaxBytes
	}
	n := int64(defaultHistoryBytes)
	if j.MaxFileStore > 0 {
		used := p.DeadLetterMaxBytes + p.ProjectionMaxBytes
		if st.MaxBytes > 0 {
			used += st.MaxBytes
			if c.Hub.Enabled() {
				used += st.MaxBytes
			}
		}
		if n = min(n, j.MaxFileStore-used); n < minHistoryBytes {
			return 0
		}
	}
	return n
}

// ValidationConfig is schema validation at ingest ([validation]): every way an event comes in (NATS
// publishes in every durability mode and topology, HTTP ingest, dead-letter replays) passes it, and
// an invalid event is refused (422, naming the schema, the JSON pointer and the keyword) before
// anything is stored.
type ValidationConfig struct {
	// Schemas maps an event type (the subject's last token: "created" for orders.created) to a JSON
	// Schema file (draft 2020-12 unless its "$schema" says otherwise). A schema may $ref local
	// files, never a URL. A change applies from the next start, or from the next publish with
	// [Appliance.SetValidation] (SIGHUP for `orderstore run`); stored events are never touched.
	Schemas map[string]string `toml:"schemas"`
	// UnknownTypes is what happens to an event of a type without a
	// schema: "accept" (the default) or "reject".
	UnknownTypes string `toml:"unknown_types"`
	// Func, when set, is called for every event the schemas passed (and for types without one, when
	// accepted): a non-nil error refuses it, with its text. It has no TOML key: an embedding
	// program's own check. It runs on the ingest path of every publish: keep it fast.
	Func func(subject string, data []byte) error `toml:"-"`
}

// HistoryBucket is the KV bucket of the history index's chunks: "<ProjectionBucket>_HISTORY".
func (p ProcessorConfig) HistoryBucket() string { return p.ProjectionBucket + "_HISTORY" }

// AdminConfig is the HTTP admin listener ([admin]).
type AdminConfig struct {
	// Listen is host:port; "" disables the listener, port 0 picks a free
	// one. Default "127.0.0.1:8222". A non-loopback address needs Token.
	Listen string
	// Token, when set, is required as a bearer token on everything but
	// /livez and /readyz. At least 16 characters.
	Token string
	// TLS serves the listener over HTTPS (CertFile and KeyFile only).
	TLS TLSConfig
	// AllowedHosts are the host names (besides IP addresses and "localhost") a request's Host
	// header may carry: what a browser sends when you reach the listener by name. A request for any
	// other host is refused, which defeats DNS rebinding.
	AllowedHosts []string
	// AllowPlaintext silences the warning a non-loopback listener without
	// TLS logs at every start (for labs).
	AllowPlaintext bool
	// ReadTimeout, WriteTimeout and IdleTimeout bound a request's reading, its response and an idle
	// keep-alive connection. Defaults 30s, 60s and 15s; 0 is no limit. No TOML keys. At most 256
	// admin connections are open at once.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// DefaultConfig returns the built-in configuration: what `orderstore run`
// uses with no file, and what orderstore.example.toml documents.
func DefaultConfig() Config {
	return Config{
		Server: ServerConfig{
			Name:             "orderstore",
			Host:             "127.0.0.1",
			Port:             4222,
			MaxPayload:       1 << 20,
			MaxConnections:   4096,
			MaxSubscriptions: 10000,
		},
		JetStream: JetStreamConfig{
			StoreDir:       "./orderstore-data",
			MaxFileStore:   10 << 30,
			MaxMemoryStore: 256 << 20,
			DiskHeadroom:   1 << 30,
		},
		Stream: StreamConfig{
			Name:            "ORDER_EVENTS",
			Subjects:        []string{"orders.>"},
			MaxAge:          168 * time.Hour,
			MaxBytes:        8 << 30,
			MaxMsgs:         -1,
			MaxMsgSize:      1 << 20,
			Discard:         "old",
			DuplicateWindow: 2 * time.Minute,
			Replicas:        1,
		},
		Processor: ProcessorConfig{
			Enabled:            true,
			Durable:            "order-processor",
			AckWait:            30 * time.Second,
			MaxDeliver:         5,
			Backoff:            []time.Duration{time.Second, 5 * time.Second, 30 * time.Second},
			MaxAckPending:      8000,
			DeadLetterStream:   "ORDER_EVENTS_DLQ",
			DeadLetterMaxAge:   720 * time.Hour,
			DeadLetterMaxBytes: 256 << 20,
			ProjectionBucket:   "ORDERS",
			ProjectionMaxBytes: 512 << 20,
			OrderIndex:         true,
		},
		Admin:      AdminConfig{Listen: "127.0.0.1:8222", ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 15 * time.Second},
		Cluster:    ClusterConfig{Listen: "127.0.0.1:6222"},
		LeafNode:   LeafNodeConfig{ReconnectInterval: time.Second},
		Validation: ValidationConfig{UnknownTypes: "accept"},
	}
}
