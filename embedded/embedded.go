package embedded

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/orderstore/orderstore/natsserver/server"
)

// The ciphers of Config.Cipher.
const (
	CipherChaCha = "chacha20-poly1305"
	CipherAES    = "aes-256-gcm"
)

// Config describes one embedded server: plain data, valid at its zero value but for StoreDir.
type Config struct {
	// StoreDir is the JetStream storage directory. Required. Streams live in StoreDir/jetstream.
	// Start locks it ([LockFileName] in it) until the server stops, and refuses with ErrLocked a
	// StoreDir that another server holds, of this process or another.
	StoreDir string

	// StoreLocked says the caller holds StoreDir's lock already ([LockStoreDir]; the appliance
	// holds it across its server's restarts): Start then takes none.
	StoreLocked bool

	// Host is the client listener address. Default "127.0.0.1" (nats-server's
	// own default is 0.0.0.0; an embedded broker stays on loopback unless told).
	Host string

	// Port is the client port. 0 means 4222, -1 a random free port (see [Server.ClientURL]).
	Port int

	// ServerName is the name `nats server info` shows. Default "orderstore".
	ServerName string

	// MaxPayload is the largest message a client may publish, in bytes; 0: nats' 1 MiB default.
	MaxPayload int32

	// MaxMemory and MaxStore are JetStream's storage limits in bytes for memory- and file-backed
	// streams. 0 means 256 MiB and 1 GiB; nats-server's own default (a share of free RAM and disk
	// at start) breaks restarts once a disk fills, so a limit is always explicit.
	MaxMemory int64
	MaxStore  int64

	// SyncInterval is how often stream files are fsynced. 0 means fsync before every publish ack
	// (nats "sync_interval: always"): an acked message survives power loss. A positive interval
	// trades that for throughput: a process crash loses nothing, a power loss up to the interval.
	SyncInterval time.Duration

	// GroupCommit makes every single-replica file stream (key-value buckets included) acknowledge a
	// publish only once one sync of its store has covered it, shared by every publish waiting then:
	// the guarantee of a sync before every ack at far higher throughput (natsserver/patches/
	// 0001-group-commit.patch). SyncInterval then only paces nats' background syncs (0 means nats'
	// default, 2 min). Ignored by streams of a cluster, whose durability is their Raft log's.
	GroupCommit bool

	// EncryptionKey, when set, encrypts every stream and bucket the server stores (nats' JetStream
	// store encryption) with Cipher: CipherChaCha ("" too) or CipherAES.
	EncryptionKey, Cipher string

	// GroupCommitRound, if set, is called after each group commit round that synced: the stream,
	// the acks it released and the sync's time. It runs on the round's goroutine: keep it short.
	GroupCommitRound func(stream string, acks int, sync time.Duration)

	// GroupCommitFailed, if set, is called once for each stream whose group commit sync failed.
	// That stream refuses every write from then on (the kernel may have dropped what it could not
	// write): stop the server and start it again, which reads the store back from disk.
	GroupCommitFailed func(stream string, err error)

	// Admit, if set, decides on every message published into a stream at this server, on the
	// publisher's own goroutine, before the stream queues it: it may rewrite the headers, hold the
	// publisher back, or refuse the message with a JetStream API error, which the publisher gets at
	// once; nothing refused is stored (server.AdmitMsg, natsserver/patches/0002-admission.patch).
	Admit func(*server.AdmitMsg) ([]byte, *server.ApiError)

	// AwaitInterest, if set, is asked about a client's publish with a reply subject that finds no
	// subscriber in account: a positive duration holds that publisher up to that long for one to
	// subscribe (a clustered stream electing its leader) instead of answering "no responders" at
	// once (natsserver/patches/0004-await-interest.patch).
	AwaitInterest func(account, subject string) time.Duration

	// MappingsExemptNkey, if set, is a user nkey (of Users) whose publishes no account's Mappings
	// apply to: the embedding program's own user, in an account whose mappings are meant for its
	// other clients (natsserver/patches/0008-own-user.patch).
	MappingsExemptNkey string

	// ReadyTimeout bounds Start when ctx has no deadline. Default 60s:
	// stream recovery on a large store runs inside start-up.
	ReadyTimeout time.Duration

	// Logger receives the server's log lines under component=nats. Nil discards them.
	Logger *slog.Logger

	// Debug and Trace turn on nats-server's debug and protocol trace logs.
	Debug, Trace bool

	// DontListen opens no TCP listener: clients connect in-process (nats.InProcessServer(srv)).
	DontListen bool

	// SystemUser and SystemPassword, when both set, define a user in the
	// system account so `nats server info` and `nats server report` work.
	// Anonymous clients (or Users) keep landing in the default account.
	SystemUser, SystemPassword string

	// Users are the client users. Empty means anonymous clients are allowed
	// (unless NoAuthUser names one of them, see there).
	Users []User

	// Accounts, when set, are the server's accounts besides the default one: a JetStream-enabled
	// account holds its own streams (in StoreDir/jetstream/<Name>), and service exports and imports
	// connect them. A user with Account "" stays in the default account. An account named like the
	// system account ("SYS") only adds exports to it. With Accounts set, nats-server's hidden
	// no-auth user for the default account is never added: a client without credentials is refused
	// unless NoAuthUser is set.
	Accounts []Account

	// NoAuthUser names the user (in Users: its Name, or its Nkey for an nkey user) a client without
	// credentials connects as. Empty refuses such clients when any user exists.
	NoAuthUser string

	// TLS, when set, secures the client port: every TCP client must speak TLS (in-process
	// connections need not). For client certificates set its ClientAuth and ClientCAs. TLSTimeout
	// bounds the handshake (default 2s).
	TLS        *tls.Config
	TLSTimeout time.Duration

	// Cluster, with Cluster.Name set, joins a NATS cluster: JetStream then runs its Raft meta group
	// over the routes; streams may have replicas. ServerName must be set and unique in the cluster.
	Cluster Cluster

	// LeafNode opens a leaf node listener (a hub) or connects to remote ones (an edge).
	LeafNode LeafNode

	// Domain is the JetStream domain ("" none): an edge's own domain, so a hub reaches its
	// JetStream API as $JS.<Domain>.API over a leaf connection. No '.', '*', '>' or spaces.
	Domain string

	// AuthTimeout is how long a client may take to authenticate after it connects (0: nats'
	// default, 2s; with TLS, the TLS timeout too). A connection that has not signed in yet counts
	// against MaxConnections: a short timeout frees its slot sooner.
	AuthTimeout time.Duration

	// MaxConnections caps client connections (0: nats' default of 64K); past it new clients are
	// refused. MaxSubscriptions caps a connection's subscriptions (0: unlimited).
	MaxConnections, MaxSubscriptions int

	// DropForSlowConsumers: a message to a connection that has fallen behind (3/4 of nats'
	// max_pending, 64 MiB, waiting for it) is dropped for that connection, and a producer's request
	// that nobody else took is answered 503 no responders, instead of stalling the producer up to
	// 10 ms per read and, once max_pending is full, closing the slow connection with everything it
	// had waiting (nats' no_fast_producer_stall). A slow reader then costs only itself.
	DropForSlowConsumers bool

	// OnError, if set, is called with every error line nats-server logs (a stream's critical write
	// error, for one), on the logging goroutine: it must return quickly.
	OnError func(msg string)
}

// User is one client user and its permissions.
type User struct {
	// Name and Password log the user in; a Password starting with "$2a$"
	// (or $2b$, $2y$) is a bcrypt hash. With Nkey set instead, the user
	// signs in with that public user nkey ("U..."), and Name only labels it.
	Name, Password string
	Nkey           string
	// Account is the account the user lands in: one of Config.Accounts, or "" for the default one.
	Account string
	// Publish and Subscribe list the subjects the user may publish to and
	// subscribe to. Empty means everything. JetStream clients also need
	// "$JS.API.>" (publish) and "_INBOX.>" (subscribe); the caller adds them.
	Publish, Subscribe []string
	// PublishDeny and SubscribeDeny list subjects refused even where an
	// allow list (or its absence) would permit them.
	PublishDeny, SubscribeDeny []string
}

// Cluster is a NATS cluster listener and its routes.
type Cluster struct {
	// Name of the cluster, the same on every node.
	Name string
	// Host and Port of the route listener (Port -1: random).
	Host string
	Port int
	// Routes are the other nodes' route URLs ("nats-route://host:port"); listing this node is fine.
	Routes []string
	// User and Password, when set, are required from every route and sent on those this node makes.
	User, Password string
	// TLS secures the routes (both directions).
	TLS *tls.Config
}

// LeafNode is a leaf node listener (a hub's) and remotes (an edge's).
type LeafNode struct {
	// Host and Port of the listener; Port 0 opens none, -1 a random one.
	Host string
	Port int
	// User and Password, when set, sign an incoming leaf connection in (as
	// Users do); it then binds to Account.
	User, Password, Account string
	// Users are more users leaf peers may sign in as, each with lists of its own (see FromLeaf).
	Users []LeafUser
	// FromLeaf and ToLeaf, when set (with User), are allow lists for the listener's leaf
	// connections: the subjects a leaf peer may send into this server (its publishes and replies),
	// and those this server sends it (what the peer may subscribe to). Empty: everything.
	FromLeaf, ToLeaf []string
	// TLS secures the listener.
	TLS *tls.Config
	// Remotes are the hubs this server connects to.
	Remotes []LeafRemote
	// ReconnectInterval is how long a remote waits before reconnecting (0: nats' default, 1s).
	ReconnectInterval time.Duration
}

// LeafUser is one user of a leaf listener, with its own FromLeaf and ToLeaf (see LeafNode).
type LeafUser struct {
	User, Password   string
	FromLeaf, ToLeaf []string
}

// LeafRemote is one leaf connection this server makes.
type LeafRemote struct {
	// URL of the hub's leaf listener ("nats-leaf://host:7422"), with or without user:password.
	URL string
	// User and Password are added to URL when set.
	User, Password string
	// Credentials is a .creds file, for hubs in operator mode.
	Credentials string
	// LocalAccount is the account the connection joins on this side.
	LocalAccount string
	// TLS for the connection; nil for plaintext.
	TLS *tls.Config
	// DenyImports and DenyExports keep subjects off the link (into this server and out of it).
	DenyImports, DenyExports []string
}

// Account is one nats account (see Config.Accounts).
type Account struct {
	// Name is letters, digits, '_' and '-'.
	Name string
	// JetStream enables JetStream for the account, without limits of its
	// own (the server's MaxMemory and MaxStore bound it).
	JetStream bool
	// Exports are the services and message streams other accounts may import from it.
	Exports []Export
	// Imports bring other accounts' exports into it (see Import).
	Imports []Import
	// Mappings rewrite a client's publish subject in this account before it is delivered (nats
	// subject mappings): From (wildcards allowed) to To.
	Mappings []Mapping
}

// Mapping is one subject mapping of an account.
type Mapping struct{ From, To string }

// Export is a service export.
type Export struct {
	Subject string
	// Streamed marks a service that answers one request with several
	// messages (a JetStream pull request, a server PING).
	Streamed bool
	// Stream exports a message stream instead of a service: what is
	// published on Subject here is delivered to importers' subscribers.
	Stream bool
	// Accounts, if set, are the only accounts that may import it.
	Accounts []string
}

// Import is a service import of Subject from Account: a publish on Subject here is delivered on To
// there (To "" is Subject; with wildcards, To takes them in the same order). With Stream it is a
// stream import of Subject instead: what is published on Subject there is delivered here on To (""
// is Subject; with wildcards, as for a service, so that "x.>" to ">" delivers x.a.b as a.b).
type Import struct {
	Account, Subject, To string
	Stream               bool
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, err error) {
		if bad {
			errs = append(errs, err)
		}
	}
	check(c.StoreDir == "", errors.New("StoreDir: required"))
	check(c.Port < -1 || c.Port > 65535, fmt.Errorf("Port: %d out of range (0..65535, -1 random)", c.Port))
	check(c.MaxMemory < 0 || c.MaxStore < 0, errors.New("MaxMemory, MaxStore: must not be negative"))
	check(c.Cipher != "" && c.Cipher != CipherChaCha && c.Cipher != CipherAES,
		fmt.Errorf("Cipher: %q is none of %q and %q", c.Cipher, CipherChaCha, CipherAES))
	check(c.SyncInterval < 0, fmt.Errorf("SyncInterval: %s is negative", c.SyncInterval))
	check((c.SystemUser == "") != (c.SystemPassword == ""), errors.New("SystemUser, SystemPassword: set both or neither"))
	accounts := map[string]bool{"": true, systemAccount: true}
	for i, a := range c.Accounts {
		check(!validAccountName(a.Name), fmt.Errorf("Accounts[%d]: Name %q must be letters, digits, '_' and '-'", i, a.Name))
		check(a.Name == systemAccount && (a.JetStream || len(a.Imports) > 0),
			fmt.Errorf("Accounts[%d]: the system account %q takes exports only", i, a.Name))
		accounts[a.Name] = true
	}
	for i, a := range c.Accounts {
		for _, im := range a.Imports {
			check(!accounts[im.Account] || im.Account == "", fmt.Errorf("Accounts[%d]: import of %q from unknown account %q", i, im.Subject, im.Account))
		}
		for _, e := range a.Exports {
			for _, name := range e.Accounts {
				check(!accounts[name] || name == "", fmt.Errorf("Accounts[%d]: export of %q to unknown account %q", i, e.Subject, name))
			}
		}
	}
	names := map[string]bool{}
	for i, u := range c.Users {
		check(u.Name == "" && u.Nkey == "", fmt.Errorf("Users[%d]: Name is empty", i))
		check(!accounts[u.Account] || u.Account == systemAccount, fmt.Errorf("Users[%d]: unknown Account %q", i, u.Account))
		names[cmp.Or(u.Nkey, u.Name)] = true // what NoAuthUser names it by
	}
	check(c.NoAuthUser != "" && !names[c.NoAuthUser], fmt.Errorf("NoAuthUser: %q is not one of Users", c.NoAuthUser))
	check(c.Cluster.Name != "" && c.ServerName == "", errors.New("ServerName: required in a cluster"))
	for i, r := range c.Cluster.Routes {
		// Not url.Parse's error: it quotes the URL, or the part of it up to a '/', '?' or '#'
		// (a password's unescaped '/' makes its start the "port").
		_, err := url.Parse(r)
		check(err != nil, fmt.Errorf("Cluster.Routes[%d]: not a URL", i))
	}
	for i, r := range c.LeafNode.Remotes {
		_, err := url.Parse(r.URL)
		check(err != nil || r.URL == "", fmt.Errorf("LeafNode.Remotes[%d].URL: not a URL", i))
	}
	check(c.MaxConnections < 0 || c.MaxSubscriptions < 0, errors.New("MaxConnections, MaxSubscriptions: must not be negative"))
	return errors.Join(errs...)
}

// Server is a running, ready embedded nats-server with JetStream. The handle
// exists only once the server accepts connections.
type Server struct {
	ns       *server.Server
	lock     *StoreLock // nil with Config.StoreLocked
	problems []string
	cfg      Config
	done     chan struct{}
	closing  chan struct{}

	closeOnce sync.Once
}

const (
	defaultMaxMemory    = 256 << 20
	defaultMaxStore     = 1 << 30
	defaultReadyTimeout = 60 * time.Second
	systemAccount       = "SYS"
)

func (c Config) options() (*server.Options, error) {
	o := &server.Options{}
	// A JetStream-enabled account can only be declared in nats' own configuration language (its
	// limits are not exported); the names are validated, so the text holds nothing but them.
	var js []string
	for _, a := range c.Accounts {
		if a.JetStream {
			js = append(js, a.Name+" { jetstream: enabled }")
		}
	}
	if len(js) > 0 {
		if err := o.ProcessConfigString("accounts { " + strings.Join(js, "\n") + " }"); err != nil {
			return nil, fmt.Errorf("accounts: %w", err)
		}
	}
	*o = server.Options{
		Accounts:               o.Accounts,
		ServerName:             cmp.Or(c.ServerName, "orderstore"),
		Host:                   cmp.Or(c.Host, "127.0.0.1"),
		Port:                   cmp.Or(c.Port, server.DEFAULT_PORT),
		NoSigs:                 true,
		JetStream:              true,
		StoreDir:               c.StoreDir,
		JetStreamMaxMemory:     cmp.Or(c.MaxMemory, defaultMaxMemory),
		JetStreamMaxStore:      cmp.Or(c.MaxStore, defaultMaxStore),
		DisableJetStreamBanner: true,
		DontListen:             c.DontListen,
		MaxPayload:             c.MaxPayload,
		Debug:                  c.Debug,
		Trace:                  c.Trace,
		MaxConn:                c.MaxConnections,
		MaxSubs:                c.MaxSubscriptions,
		NoAuthUser:             c.NoAuthUser,
		AuthTimeout:            c.AuthTimeout.Seconds(),
		NoFastProducerStall:    c.DropForSlowConsumers,
	}
	o.JetStreamDomain = c.Domain
	if cl := c.Cluster; cl.Name != "" {
		o.Cluster = server.ClusterOpts{Name: cl.Name, Host: cmp.Or(cl.Host, "127.0.0.1"), Port: cl.Port, Username: cl.User, Password: cl.Password,
			TLSConfig: cl.TLS, TLSTimeout: 2}
		for _, r := range cl.Routes {
			u, _ := url.Parse(r) // Validate checked it
			if cl.User != "" && u.User == nil {
				u.User = url.UserPassword(cl.User, cl.Password)
			}
			o.Routes = append(o.Routes, u)
		}
	}
	if ln := c.LeafNode; ln.Port != 0 || len(ln.Remotes) > 0 {
		o.LeafNode = server.LeafNodeOpts{Host: cmp.Or(ln.Host, "127.0.0.1"), Port: ln.Port, Username: ln.User, Password: ln.Password, Account: ln.Account,
			TLSConfig: ln.TLS, TLSTimeout: 2, ReconnectInterval: ln.ReconnectInterval}
		for _, r := range ln.Remotes {
			u, _ := url.Parse(r.URL) // Validate checked it
			if r.User != "" {
				u.User = url.UserPassword(r.User, r.Password)
			}
			o.LeafNode.Remotes = append(o.LeafNode.Remotes, &server.RemoteLeafOpts{URLs: []*url.URL{u}, Credentials: r.Credentials,
				LocalAccount: r.LocalAccount, TLS: r.TLS != nil, TLSConfig: r.TLS, TLSTimeout: 2,
				DenyImports: r.DenyImports, DenyExports: r.DenyExports})
		}
	}
	if c.TLS != nil {
		o.TLSConfig = c.TLS
		o.TLSVerify = c.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		o.TLSTimeout = cmp.Or(max(c.TLSTimeout, 0), 2*time.Second).Seconds()
	}
	o.JetStreamKey = c.EncryptionKey // with the zero JetStreamCipher, server.ChaCha
	if c.EncryptionKey != "" && c.Cipher == CipherAES {
		o.JetStreamCipher = server.AES
	}
	o.JetStreamAdmit, o.AwaitInterest = c.Admit, c.AwaitInterest
	o.MappingsExemptNkey = c.MappingsExemptNkey
	o.GroupCommit, o.SyncInterval, o.SyncAlways = c.GroupCommit, c.SyncInterval, c.SyncInterval == 0 && !c.GroupCommit
	if c.GroupCommit {
		o.GroupCommitRound, o.GroupCommitError = c.GroupCommitRound, c.GroupCommitFailed
	}
	byName := map[string]*server.Account{}
	for _, a := range o.Accounts {
		byName[a.Name] = a
	}
	account := func(name string) *server.Account {
		if a := byName[name]; a != nil || name == "" {
			return a
		}
		a := server.NewAccount(name)
		byName[name] = a
		o.Accounts = append(o.Accounts, a)
		return a
	}
	if c.SystemUser != "" || len(c.Accounts) > 0 {
		account(systemAccount)
		o.SystemAccount = systemAccount
	}
	for _, a := range c.Accounts {
		acc := account(a.Name)
		for _, e := range a.Exports {
			rt := server.Singleton
			if e.Streamed {
				rt = server.Streamed
			}
			var to []*server.Account
			for _, name := range e.Accounts {
				to = append(to, account(name))
			}
			if e.Stream {
				if err := acc.AddStreamExport(e.Subject, to); err != nil {
					return nil, fmt.Errorf("account %q: stream export %q: %w", a.Name, e.Subject, err)
				}
				continue
			}
			if err := acc.AddServiceExportWithResponse(e.Subject, rt, to); err != nil {
				return nil, fmt.Errorf("account %q: export %q: %w", a.Name, e.Subject, err)
			}
		}
		for _, m := range a.Mappings {
			if err := acc.AddMapping(m.From, m.To); err != nil {
				return nil, fmt.Errorf("account %q: mapping %q to %q: %w", a.Name, m.From, m.To, err)
			}
		}
	}
	for _, a := range c.Accounts {
		for _, im := range a.Imports {
			add, kind, to := byName[a.Name].AddServiceImport, "import", cmp.Or(im.To, im.Subject)
			if im.Stream {
				add, kind, to = byName[a.Name].AddMappedStreamImport, "stream import", im.To
			}
			if err := add(byName[im.Account], im.Subject, to); err != nil {
				return nil, fmt.Errorf("account %q: %s %q from %q: %w", a.Name, kind, im.Subject, im.Account, err)
			}
		}
	}
	// Client users connect as clients only: none of them (nor the
	// no-auth user) can join as a leaf peer past the leaf user below.
	clientOnly := map[string]struct{}{jwt.ConnectionTypeStandard: {}, jwt.ConnectionTypeInProcess: {}}
	ln := c.LeafNode
	if ln.User != "" {
		ln.Users = append([]LeafUser{{User: ln.User, Password: ln.Password, FromLeaf: ln.FromLeaf, ToLeaf: ln.ToLeaf}}, ln.Users...)
	}
	if ln.Port != 0 && len(ln.Users) > 0 {
		// Permissions bind only to a server user that leaf peers sign in as (nats ignores those of
		// the leaf listener's own users). For an accepted leaf nats reads them from the peer's
		// side: Publish is what the peer may send in, Subscribe what it is sent.
		o.LeafNode.Username, o.LeafNode.Password, o.LeafNode.Account = "", "", ""
		for _, u := range ln.Users {
			o.Users = append(o.Users, &server.User{Username: u.User, Password: u.Password, Permissions: permissions(User{Publish: u.FromLeaf, Subscribe: u.ToLeaf}),
				Account: account(ln.Account), AllowedConnectionTypes: map[string]struct{}{jwt.ConnectionTypeLeafnode: {}}})
		}
		// Replies to this server's requests to another domain's API name it: $JSC.R.<domain>.>.
		o.FeatureFlags = map[string]bool{server.FeatureFlagJsAPIReplyFormatV2: true}
	}
	if c.SystemUser != "" {
		// nats serves every account's JetStream API from the system account: the system user reads
		// only its own replies and $SYS, and sends system requests only (nats honours the
		// Nats-Request-Info a system account client sets, so it could act as any account), and the
		// cluster's meta leader step-down and peer removal.
		o.Users = append(o.Users, &server.User{Username: c.SystemUser, Password: c.SystemPassword, Account: byName[systemAccount],
			Permissions: &server.Permissions{Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "$SYS.>"}},
				Publish: &server.SubjectPermission{Allow: []string{"$SYS.REQ.>", "$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"}}},
			AllowedConnectionTypes: clientOnly})
	}
	for _, u := range c.Users {
		if u.Nkey != "" {
			o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: u.Nkey, Permissions: permissions(u), Account: account(u.Account), AllowedConnectionTypes: clientOnly})
			continue
		}
		o.Users = append(o.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: permissions(u), Account: account(u.Account), AllowedConnectionTypes: clientOnly})
	}
	return o, nil
}

func permissions(u User) *server.Permissions {
	if len(u.Publish)+len(u.Subscribe)+len(u.PublishDeny)+len(u.SubscribeDeny) == 0 {
		return nil
	}
	p := &server.Permissions{}
	if len(u.Publish)+len(u.PublishDeny) > 0 {
		p.Publish = &server.SubjectPermission{Allow: u.Publish, Deny: u.PublishDeny}
	}
	if len(u.Subscribe)+len(u.SubscribeDeny) > 0 {
		p.Subscribe = &server.SubjectPermission{Allow: u.Subscribe, Deny: u.SubscribeDeny}
	}
	return p
}

func validAccountName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	})
}

// Start validates cfg, starts nats-server with JetStream and returns once it is ready for
// connections, or with an error. A fatal error during start-up (port in use, unusable store) comes
// back as soon as nats-server reports it, not after a timeout. On any error nothing is left
// running: Start returns only after nats-server's own start-up has returned and the server has shut
// down. If ctx ends while nats-server is still recovering streams, Start therefore waits for that
// recovery before it shuts the server down (and logs that it does): stopping nats-server in the
// middle of its start-up can leave stream stores open on StoreDir.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("start embedded nats: invalid config: %w", err)
	}
	var lock *StoreLock
	if !cfg.StoreLocked {
		if err := os.MkdirAll(cfg.StoreDir, 0o750); err != nil {
			return nil, fmt.Errorf("start embedded nats: cannot create storage directory: %w", err)
		}
		if lock, err = LockStoreDir(cfg.StoreDir); errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("start embedded nats: StoreDir %q: %w: close that server, or give this one a StoreDir of its own", cfg.StoreDir, err)
		} else if err != nil {
			return nil, fmt.Errorf("start embedded nats: StoreDir %q: %w", cfg.StoreDir, err)
		}
		defer func() {
			if err != nil {
				lock.Release()
			}
		}()
	}
	opts, err := cfg.options()
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	fatal := make(chan string, 1)
	logger := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("component", "nats")
	adapter := &slogAdapter{l: logger, fatal: fatal, starting: true, onError: cfg.OnError}
	ns.SetLoggerV2(adapter, cfg.Debug, cfg.Trace, false)

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(max(cfg.ReadyTimeout, 0), defaultReadyTimeout))
		defer cancel()
	}

	// nats-server's Start runs in its own goroutine: it recovers every stream before it opens the
	// client listener, so it can take long, and it reports a failure only through Fatalf.
	started := make(chan struct{})
	go func() {
		defer close(started)
		ns.Start()
	}()
	defer func() {
		if err != nil {
			stopAfterStart(ns, started, logger)
		}
	}()

	// A captured fatal message is preferred over a timeout or a missing JetStream: it is the cause.
	fatalOr := func(err error) error {
		select {
		case msg := <-fatal:
			return fmt.Errorf("start embedded nats: %s", msg)
		default:
			return err
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	begin := time.Now()
	for ready := false; !ready; ready = ns.ReadyForConnections(time.Millisecond) {
		select {
		case msg := <-fatal:
			return nil, fmt.Errorf("start embedded nats: %s", msg)
		case <-ctx.Done():
			return nil, fatalOr(fmt.Errorf("start embedded nats: not ready after %s: %w", time.Since(begin).Round(time.Millisecond), ctx.Err()))
		case <-tick.C:
		}
	}
	if !ns.JetStreamEnabled() {
		return nil, fatalOr(errors.New("start embedded nats: server ready but JetStream is not enabled"))
	}

	// Ready means the listener is open, the last step of nats-server's Start: it returns right
	// after. Wait for it, so that Close never races it.
	<-started

	s := &Server{ns: ns, lock: lock, cfg: cfg, done: make(chan struct{}), closing: make(chan struct{}), problems: adapter.started()}
	go func() {
		ns.WaitForShutdown()
		s.lock.Release()
		close(s.done)
	}()
	return s, nil
}

// stopAfterStart shuts down a server whose start failed, once its Start
// (running in the goroutine that closes started) has returned.
//
// Shutdown must not run while Start still does (nats-server v2.15.3, server/server.go): Shutdown is
// one-shot, so whatever Start sets up after it stays up. Start does not check for a shutdown until
// AcceptLoop, and that check is not under the server lock: a JetStream enabled after the shutdown
// keeps its stream stores open on the store dir (goroutines alive), and an AcceptLoop that passed
// the check just before the shutdown still opens the client listener. After Start has returned,
// Shutdown sees everything it started and stops it; WaitForShutdown then waits for it.
func stopAfterStart(ns *server.Server, started <-chan struct{}, logger *slog.Logger) {
	select {
	case <-started:
	default:
		// Start returns the error; this line only says why it takes long.
		logger.Warn("start aborted: waiting for nats-server to finish starting (stream recovery) before shutting it down")
		<-started
	}
	ns.Shutdown()
	ns.WaitForShutdown()
}

// ClientURL returns the URL clients connect to, with the real port even when Config.Port was -1.
// With DontListen it returns "" (connect with nats.InProcessServer(srv) instead).
func (s *Server) ClientURL() string {
	if s.cfg.DontListen {
		return ""
	}
	a, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok {
		return s.ns.ClientURL()
	}
	host := strings.Trim(s.cfg.Host, "[]")
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // a wildcard listener is reachable on loopback
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// InProcessConn returns a connection to the server that bypasses TCP. It
// makes *Server a nats.InProcessConnProvider:
//
//	nc, err := nats.Connect("", nats.InProcessServer(srv))
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }

// StoreDir returns the JetStream storage directory.
func (s *Server) StoreDir() string { return s.cfg.StoreDir }

// SyncAlways reports whether every publish is fsynced before its ack.
func (s *Server) SyncAlways() bool { return s.cfg.SyncInterval == 0 && !s.cfg.GroupCommit }

// StartupProblems returns the warnings and errors nats-server logged while it started, at most 100:
// what stream and consumer recovery reported (damaged blocks, unreadable metadata, consumers moved
// back). Empty after a clean start.
func (s *Server) StartupProblems() []string { return s.problems }

// NATSServer returns the underlying nats-server, for monitoring handlers (HandleVarz, HandleJsz,
// ...) and tests. Do not Shutdown it directly: use [Server.Close].
func (s *Server) NATSServer() *server.Server { return s.ns }

// Done is closed once the server has stopped, for any reason.
func (s *Server) Done() <-chan struct{} { return s.done }

// Wait blocks until the server stopped: nil after Close, an error if it stopped on its own.
func (s *Server) Wait() error {
	<-s.done
	select {
	case <-s.closing:
		return nil
	default:
		return errors.New("embedded nats stopped unexpectedly")
	}
}

// Close stops the server and waits until it has stopped. In order:
//  1. mark the stop as requested, so Wait returns nil;
//  2. nats-server Shutdown: stop accepting, close client connections,
//     flush and close every JetStream stream and consumer store;
//  3. WaitForShutdown: wait for all of the server's goroutines;
//  4. drop StoreDir's lock.
//
// Close is idempotent and safe concurrently; later calls wait for the same stop and return nil.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.ns.Shutdown()
	})
	<-s.done
	return nil
}

// LockFileName is the file in StoreDir whose lock a server holds while it runs: an flock
// (LockFileEx on Windows), which the kernel drops when the process dies, even on SIGKILL.
const LockFileName = "orderstore.lock"

// ErrLocked is matched (errors.Is) when another server, of this process or another, holds a
// StoreDir: two servers on one store both acknowledge publishes, and one's are lost.
var ErrLocked = errors.New("locked by another server")

// StoreLock is the lock on a store directory, of [LockStoreDir].
type StoreLock struct {
	f    *os.File
	path string
}

// LockStoreDir takes the lock on dir, an existing directory, that [Start] takes unless
// Config.StoreLocked says the caller holds it. If another holds it the error is ErrLocked, naming
// the holder's process; else any error is the lock file's.
func LockStoreDir(dir string) (*StoreLock, error) {
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	if held {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := "a server of this process or another"
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); pid == os.Getpid() {
			holder = "this process (another Appliance or embedded server in it)"
		} else if perr == nil && pid > 0 {
			holder = fmt.Sprintf("process %d", pid)
		}
		return nil, fmt.Errorf("%w: %s holds %q", ErrLocked, holder, path)
	}
	// The PID is a hint for the next one to fail; it needs no fsync (the
	// lock itself lives in the kernel and dies with the process).
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &StoreLock{f: f, path: path}, nil
}

// Path returns the lock file's path.
func (l *StoreLock) Path() string { return l.path }

// Release drops the lock. It is safe to call more than once, and on nil.
func (l *StoreLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := errors.Join(unlock(l.f), l.f.Close())
	l.f = nil
	return err
}
