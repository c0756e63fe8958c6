package natsconf

import "time"

// The config types of the NATS side of orderstore's Config: the root package names them as aliases
// (orderstore.User, orderstore.TLSConfig, ...), so that they are one type in the API, the file
// mapping (internal/config) and here.

// ClusterConfig joins a NATS cluster ([cluster]): JetStream clustering with Raft over the routes,
// so Stream.Replicas may be 3. Every node runs the processor against the one durable consumer.
type ClusterConfig struct {
	// Name is the cluster's name, the same on every node. "" (the default) runs a single node.
	Name string `toml:"name"`
	// Listen is the route listener, host:port. Default "127.0.0.1:6222". It needs User and
	// Password (or TLS with client certificates), also on loopback: any local process could join.
	Listen string `toml:"listen"`
	// Routes are every node's route URL ("nats-route://host:6222");
	// listing the node itself is fine.
	Routes []string `toml:"routes"`
	// User and Password are what every route presents.
	User     string `toml:"user"`
	Password string `toml:"password"` // the routes' password
	// TLS secures the routes; CAFile and Verify check the peers' certificates.
	TLS TLSConfig `toml:"tls"`
}

// Enabled reports whether the node runs in a cluster.
func (c ClusterConfig) Enabled() bool { return c.Name != "" }

// LeafNodeConfig connects edges to a hub over NATS leaf nodes ([leafnode]).
type LeafNodeConfig struct {
	// Listen is a hub's leaf listener, host:port ("" none). A
	// non-loopback address needs User and Password.
	Listen string
	// User and Password are what every edge presents to this hub, unless it has its own in Users.
	User, Password string
	// Users are each edge's own credential: a peer signed in with one acts for that edge only.
	Users []LeafUser
	// TLS secures the hub's leaf listener.
	TLS TLSConfig
	// Remotes are the hubs an edge connects to.
	Remotes []LeafRemote
	// ReconnectInterval is how long an edge waits between attempts to reach its hub. Default 1s.
	ReconnectInterval time.Duration
}

// LeafRemote is one hub an edge connects to.
type LeafRemote struct {
	// URL is the hub's leaf listener: "nats-leaf://hub:7422" (or "tls://hub:7422").
	URL string `toml:"url"`
	// User and Password (or Credentials, a .creds file) sign in at the hub.
	User        string `toml:"user,omitempty"`
	Password    string `toml:"password,omitempty"`    // the hub's password for User
	Credentials string `toml:"credentials,omitempty"` // a .creds file instead of User and Password
	// TLS: CAFile verifies the hub; CertFile and KeyFile present a client certificate.
	TLS TLSConfig `toml:"tls,omitempty"`
}

// LeafUser is one edge's own credential at a hub ([[leafnode.users]]).
type LeafUser struct {
	User     string `toml:"user"`     // what the edge's [[leafnode.remotes]] present, with password
	Password string `toml:"password"` // plaintext or a bcrypt hash ("$2a$...")
	Edge     string `toml:"edge"`     // the one of hub.edges it signs in as
}

// TLSConfig names the certificate files of a listener ([server.tls], [admin.tls]).
type TLSConfig struct {
	// CertFile and KeyFile are PEM files: the listener's certificate
	// (chain) and its private key. Both or neither.
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"` // the certificate's private key (PEM)
	// CAFile is a PEM file of the CAs that sign client certificates (on
	// routes and leaf remotes: the other side's); with Verify, every
	// client must present one they signed (not in [admin.tls]).
	CAFile string `toml:"ca_file,omitempty"`
	Verify bool   `toml:"verify,omitempty"` // require a client certificate signed by CAFile
	// MinVersion is the lowest TLS version accepted: "1.2" (default) or "1.3".
	MinVersion string `toml:"min_version,omitempty"`
}

// Enabled reports whether a certificate is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Roles of a [User].
const (
	// RoleProducer may publish to the stream's subjects and get its own publish acks, nothing else.
	RoleProducer = "producer"
	// RoleReader may read stream and consumer info, events (ordered consumers, its own durables)
	// and the projection; it cannot publish, purge, delete or touch the processor's consumer.
	RoleReader = "reader"
	// RoleAdmin may do everything to orderstore's streams, consumers and
	// buckets, publish events, and run `nats server info/report`.
	RoleAdmin = "admin"
)

// User is one NATS client user ([[server.users]]). Each user lands in an account of its own, which
// reaches the stream's account only through the services its role imports: no user can receive
// another user's replies, and the stream's account holds orderstore's own connections only.
type User struct {
	// Name is the user name (with Nkey: a label in logs and errors).
	Name string
	// Password logs the user in; a bcrypt hash ("$2a$...", made with `nats server passwd`) is
	// accepted and keeps the secret out of the file. Nkey, instead of a password, is the user's
	// public nkey ("U...", made with `nats auth nkey gen user --output user.nk` and shown by `nats
	// auth nkey show user.nk`).
	Password, Nkey string
	// Role is RoleProducer, RoleReader or RoleAdmin. Leave it empty to give explicit
	// Publish/Subscribe lists: such a user gets the admin role's imports, limited by the lists.
	Role string
	// Publish and Subscribe list the subjects the user may publish to and subscribe to (empty:
	// everything); the Deny lists refuse subjects an allow list would permit.
	Publish, Subscribe         []string
	PublishDeny, SubscribeDeny []string
}
