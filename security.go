package orderstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/orderstore/orderstore/embedded"
)

// StreamAccount is the NATS account that holds orderstore's streams,
// consumers and bucket (in store_dir/jetstream/ORDERSTORE). Only
// orderstore's own connections live in it, and, when no users are
// configured, anonymous loopback clients. Every configured user has an
// account of its own that imports what its role allows from here.
const StreamAccount = "ORDERSTORE"

// legacyAccount is where stores written before accounts (orderstore up to
// the library release) keep their streams: nats' global account.
const legacyAccount = "$G"

// Names of orderstore's own users; a configured user may not take them.
const (
	internalUser  = "orderstore-internal"
	anonymousUser = "orderstore-anonymous"
)

// AnonymousAccount is where anonymous loopback clients land when no users
// are configured and durability is "group-commit": outside StreamAccount,
// so that their publishes reach the stream only through the ingest
// service. (In the other modes they land in StreamAccount.)
const AnonymousAccount = "ANONYMOUS"

// internalInboxPrefix is the inbox prefix of orderstore's own connections:
// an anonymous loopback client (the one other client in StreamAccount) is
// refused subscriptions on it, so the processor's deliveries and the
// projection's reads stay private.
const internalInboxPrefix = "_INBOX_ORDERSTORE"

func reservedUser(name string) bool {
	return name == internalUser || name == anonymousUser
}

// internalIdentity is how orderstore's own connections sign in: a fresh
// user nkey per start, held in memory only. An nkey rather than a password
// keeps nats' "plaintext passwords detected" warning for the operator's own
// passwords.
type internalIdentity struct {
	kp  nkeys.KeyPair
	pub string
}

func newInternalIdentity() (*internalIdentity, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("internal nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("internal nkey: %w", err)
	}
	return &internalIdentity{kp: kp, pub: pub}, nil
}

func (id *internalIdentity) options(inbox string) []nats.Option {
	return []nats.Option{
		nats.Nkey(id.pub, func(nonce []byte) ([]byte, error) { return id.kp.Sign(nonce) }),
		nats.CustomInboxPrefix(inbox),
	}
}

// accounts is the account layout of the security section of README.md:
// StreamAccount with JetStream and orderstore's own user, the system
// account's read-only server requests, and one account per configured user
// (or, with no users, ANONYMOUS for loopback clients) importing what its
// role allows from here. Exports, imports and the durable guard's mappings
// all come from the internal subjects table (subjects.go).
func (c Config) accounts(id *internalIdentity) (accounts []embedded.Account, users []embedded.User, noAuthUser string, err error) {
	stream := embedded.Account{Name: StreamAccount, JetStream: true, Exports: c.streamAccountExports()}
	sys := embedded.Account{Name: "SYS"}
	for _, e := range sysReadOnly {
		sys.Exports = append(sys.Exports, embedded.Export{Subject: e, Streamed: true})
	}
	accounts = []embedded.Account{stream, sys}
	users = []embedded.User{{Name: internalUser, Nkey: id.pub, Account: StreamAccount}}
	client := func(name, role string) embedded.Account {
		acc := embedded.Account{Name: name, Imports: c.roleImports(role, name)}
		if role == RoleAdmin || role == RoleReader {
			acc.Mappings = c.guardMappings()
		}
		if role == RoleAdmin {
			for _, s := range sysReadOnly {
				acc.Imports = append(acc.Imports, embedded.Import{Account: "SYS", Subject: s})
			}
		}
		return acc
	}

	if len(c.Server.Users) == 0 {
		// Anonymous loopback clients (Validate refuses them elsewhere)
		// land in an account of their own with an admin's imports, so
		// that their publishes reach the stream only through the ingest
		// service and orderstore's own consumers only through the guard.
		// The no-auth user is an nkey whose seed is thrown away: nats
		// skips the signature only for the no-auth user, so nobody can
		// sign in as it, and no plaintext password is configured.
		anon, aerr := newInternalIdentity()
		if aerr != nil {
			return nil, nil, "", aerr
		}
		accounts = append(accounts, client(AnonymousAccount, RoleAdmin))
		users = append(users, embedded.User{Name: anonymousUser, Nkey: anon.pub, Account: AnonymousAccount,
			PublishDeny: c.guardDenies()})
		return accounts, users, anon.pub, nil
	}

	for i, u := range c.Server.Users {
		role := u.Role
		if role != RoleProducer && role != RoleReader {
			role = RoleAdmin // RoleAdmin, or explicit lists on top of the admin's imports
		}
		acc := client(userAccount(i, u.Name), role)
		eu := embedded.User{Name: u.Name, Password: u.Password, Nkey: u.Nkey, Account: acc.Name,
			Publish: u.Publish, Subscribe: u.Subscribe, PublishDeny: u.PublishDeny, SubscribeDeny: u.SubscribeDeny}
		switch u.Role {
		case RoleProducer:
			eu.Publish = append([]string(nil), c.Stream.Subjects...)
			eu.Subscribe = []string{"_INBOX.>"}
		case RoleReader:
			eu.Publish, eu.PublishDeny = c.readerPermissions()
		default:
			eu.PublishDeny = append(eu.PublishDeny, c.guardDenies()...)
		}
		accounts = append(accounts, acc)
		users = append(users, eu)
	}
	return accounts, users, "", nil
}

// sysReadOnly are the system account's requests an admin may make: the
// server pings `nats server info/report/list` send, and the monitoring
// requests of one server. Kicking clients, lame-duck mode and reloads stay
// with the system user.
var sysReadOnly = []string{
	"$SYS.REQ.SERVER.PING",
	"$SYS.REQ.SERVER.PING.*",
	"$SYS.REQ.SERVER.*.VARZ", "$SYS.REQ.SERVER.*.CONNZ", "$SYS.REQ.SERVER.*.SUBSZ",
	"$SYS.REQ.SERVER.*.ROUTEZ", "$SYS.REQ.SERVER.*.GATEWAYZ", "$SYS.REQ.SERVER.*.LEAFZ",
	"$SYS.REQ.SERVER.*.ACCOUNTZ", "$SYS.REQ.SERVER.*.JSZ", "$SYS.REQ.SERVER.*.HEALTHZ",
	"$SYS.REQ.SERVER.*.STATSZ", "$SYS.REQ.SERVER.*.IDZ", "$SYS.REQ.SERVER.*.RAFTZ",
}

// readerPermissions lets a reader look and read, never change: stream and
// consumer info, message gets, its own consumers (create, fetch, ack,
// delete), and nothing on the processor's consumer but its info.
func (c Config) readerPermissions() (allow, deny []string) {
	allow = []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.INFO.*",
		"$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>",
		"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>",
		"$JS.API.CONSUMER.INFO.>", "$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.LIST.*",
		"$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.DELETE.>",
		"$JS.ACK.>",
		// What the durable guard's mappings make of the requests below.
		guardPrefix + ">",
	}
	s, d := c.Stream.Name, c.Processor.Durable
	deny = []string{
		// The subject-less create takes the consumer's name from the
		// request body, where no permission can see it.
		"$JS.API.CONSUMER.CREATE." + s,
		"$JS.API.CONSUMER.CREATE." + s + "." + d, "$JS.API.CONSUMER.CREATE." + s + "." + d + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + s + "." + d,
		"$JS.API.CONSUMER.DELETE." + s + "." + d,
		"$JS.API.CONSUMER.MSG.NEXT." + s + "." + d,
		// Both ack subject formats nats-server 2.15 listens on: the
		// classic one and "$JS.ACK.<domain>.<account hash>.<stream>.
		// <consumer>...", where a "+NXT" is also a pull request.
		"$JS.ACK." + s + "." + d + ".>",
		"$JS.ACK.*.*." + s + "." + d + ".>",
	}
	return allow, deny
}

// userAccount names user i's account: "USER<i>_" and the name's letters,
// digits, '_' and '-' (what /connz and `nats server report` show).
func userAccount(i int, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "USER%d_", i+1)
	for _, r := range name {
		if b.Len() >= 64 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// loadTLS loads a [*.tls] table as Start uses it, naming key in its
// errors. A listener's (the client port, admin, a hub's leaf listener:
// peer false) needs a certificate, and its CA verifies client
// certificates (required with verify). A peer link's (cluster routes, an
// edge's leaf remotes: peer true) CA verifies the other side both ways,
// and a leaf remote may have no certificate of its own (it only verifies
// the hub).
func loadTLS(key string, t TLSConfig, peer bool) (*tls.Config, error) {
	if !t.Enabled() && !(peer && t.CAFile != "") {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.MinVersion == "1.3" {
		cfg.MinVersion = tls.VersionTLS13
	}
	if t.Enabled() {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, withHint(fmt.Errorf("%s: cert_file %q, key_file %q: %w", key, t.CertFile, t.KeyFile, err),
				"both must be PEM files: the certificate (chain) and its unencrypted private key")
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s: ca_file %q: %w", key, t.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		hint := "it must be the PEM certificates of the CAs that sign client certificates"
		if peer {
			hint = "it must be the PEM certificates of the CAs that sign the other nodes' certificates"
		}
		return nil, withHint(fmt.Errorf("%s: ca_file %q holds no PEM certificate", key, t.CAFile), hint)
	}
	cfg.ClientCAs = pool
	switch {
	case t.Verify:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	case !peer:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if peer {
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// PlaintextWarnings returns what the start-up log warns about every time:
// each listener reachable from the network that sends passwords, events or
// the admin token in clear (silenced per listener by AllowPlaintext).
func (c Config) PlaintextWarnings() []string {
	var w []string
	if !isLoopback(c.Server.Host) && !c.Server.TLS.Enabled() && !c.Server.AllowPlaintext {
		w = append(w, fmt.Sprintf("the NATS client port %s:%d faces the network without TLS: passwords and events cross it in clear; set [server.tls] (or server.allow_plaintext = true in a lab)", c.Server.Host, c.Server.Port))
	}
	if host, _, err := net.SplitHostPort(c.Admin.Listen); err == nil && !isLoopback(host) && !c.Admin.TLS.Enabled() && !c.Admin.AllowPlaintext {
		w = append(w, fmt.Sprintf("the admin listener %s faces the network without TLS: the admin token crosses it in clear; set [admin.tls] (or admin.allow_plaintext = true in a lab)", c.Admin.Listen))
	}
	return w
}
