package natsconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/orderstore/orderstore/embedded"
)

// StreamAccount is the NATS account that holds orderstore's streams, consumers and bucket (in
// store_dir/jetstream/ORDERSTORE). Only orderstore's own connections live in it. Every configured
// user (or, with none, the anonymous loopback clients) has an account of its own that imports what
// its role allows from here.
const StreamAccount = "ORDERSTORE"

// Names of orderstore's own users; a configured user may not take them.
const (
	internalUser  = "orderstore-internal"
	anonymousUser = "orderstore-anonymous"
)

// AnonymousAccount is where anonymous loopback clients land when no users are configured in a
// cluster or with leaf links: outside StreamAccount, with an admin's imports, so that orderstore's
// own consumers and inboxes stay out of their reach. On a single node they are clients of
// StreamAccount itself (anonymousBesideStream).
const AnonymousAccount = "ANONYMOUS"

// InternalInbox is the inbox prefix of orderstore's own connections: anonymous loopback clients
// beside the stream are refused publishes and subscriptions on it, so the processor's deliveries
// and the projection's reads stay private and nobody answers for the stream.
const InternalInbox = "_INBOX_ORDERSTORE"

// ReservedUser reports whether name is one of orderstore's own users, barred to configured users.
func ReservedUser(name string) bool { return name == internalUser || name == anonymousUser }

// Identity is how orderstore's own connections sign in: a fresh user nkey per start, held in memory
// only. An nkey rather than a password keeps nats' "plaintext passwords detected" warning for the
// operator's own passwords.
type Identity struct {
	kp  nkeys.KeyPair
	pub string
}

// NewIdentity makes a fresh identity: a new user nkey.
func NewIdentity() (*Identity, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("internal nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("internal nkey: %w", err)
	}
	return &Identity{kp: kp, pub: pub}, nil
}

// PublicKey is id's public user nkey.
func (id *Identity) PublicKey() string { return id.pub }

// Options sign a connection in as id, with inbox as its prefix (InternalInbox, HubWatchInbox).
func (id *Identity) Options(inbox string) []nats.Option {
	return []nats.Option{
		nats.Nkey(id.pub, func(nonce []byte) ([]byte, error) { return id.kp.Sign(nonce) }),
		nats.CustomInboxPrefix(inbox),
	}
}

// accounts is the account layout of docs/security.md ("How replies stay private"): StreamAccount
// with JetStream and orderstore's own user, the system account's read-only server requests, and one
// account per configured user (or, with no users, ANONYMOUS for loopback clients; on a single node
// they are in StreamAccount itself) importing what its role allows from here. Exports, imports and
// the durable guard's mappings all come from the internal subjects table (subjects.go).
func (in Input) accounts(id *Identity) (accounts []embedded.Account, users []embedded.User, noAuthUser string, err error) {
	stream := embedded.Account{Name: StreamAccount, JetStream: true, Exports: in.streamAccountExports()}
	sys := embedded.Account{Name: "SYS"}
	var sysImports []embedded.Import // an admin's
	for _, e := range sysReadOnly {
		sys.Exports = append(sys.Exports, embedded.Export{Subject: e, Streamed: true})
		sysImports = append(sysImports, embedded.Import{Account: "SYS", Subject: e})
	}
	accounts = []embedded.Account{stream, sys}
	users = []embedded.User{{Name: internalUser, Nkey: id.pub, Account: StreamAccount}}
	client := func(name, role string) embedded.Account {
		acc := embedded.Account{Name: name, Imports: in.roleImports(role)}
		if role != RoleProducer {
			// Requests on orderstore's own consumers go to the guard.
			acc.Mappings = in.guardMappings()
		}
		if role == RoleAdmin {
			acc.Imports = append(acc.Imports, sysImports...)
		}
		return acc
	}

	denies, _ := in.besideDenies()
	if len(in.Users) == 0 {
		// The no-auth user is an nkey whose seed is thrown away: nats skips the signature only for
		// the no-auth user, so nobody can sign in as it, and no plaintext password is configured.
		anon, aerr := NewIdentity()
		if aerr != nil {
			return nil, nil, "", aerr
		}
		au := embedded.User{Name: anonymousUser, Nkey: anon.pub, Account: StreamAccount}
		if in.anonymousBesideStream() {
			// A standalone node: an admin's reach by permissions instead of imports
			// (docs/security.md). The guard's mappings move into StreamAccount and spare
			// orderstore's own user (ec.MappingsExemptNkey).
			stream.Mappings = in.guardMappings()
			stream.Imports = append(stream.Imports, sysImports...)
			accounts[0] = stream
			au.PublishDeny, au.SubscribeDeny = in.besideDenies()
		} else {
			// Anonymous loopback clients (Validate refuses them elsewhere) land in an account of
			// their own with an admin's imports, so that orderstore's own consumers are reached
			// only through the guard.
			accounts = append(accounts, client(AnonymousAccount, RoleAdmin))
			au.Account, au.PublishDeny = AnonymousAccount, denies
		}
		return accounts, append(users, au), anon.pub, nil
	}

	for _, u := range in.Users {
		role := u.Role
		if role != RoleProducer && role != RoleReader {
			role = RoleAdmin // RoleAdmin, or explicit lists on top of the admin's imports
		}
		acc := client(userAccount(u.Name), role)
		eu := embedded.User{Name: u.Name, Password: u.Password, Nkey: u.Nkey, Account: acc.Name,
			Publish: u.Publish, Subscribe: u.Subscribe, PublishDeny: u.PublishDeny, SubscribeDeny: u.SubscribeDeny}
		switch u.Role {
		case RoleProducer:
			eu.Publish = append([]string(nil), in.Subjects...)
			eu.Subscribe = []string{"_INBOX.>"}
		case RoleReader:
			eu.Publish, eu.PublishDeny = in.readerPermissions()
		default:
			eu.PublishDeny = append(eu.PublishDeny, denies...)
		}
		accounts = append(accounts, acc)
		users = append(users, eu)
	}
	return accounts, users, "", nil
}

// anonymousBesideStream says the anonymous loopback clients land in StreamAccount: no users, a
// single node, no leaf links, no JetStream domain. Elsewhere they keep AnonymousAccount and its
// imports (why: docs/security.md, where the anonymous loopback clients land).
func (in Input) anonymousBesideStream() bool {
	return len(in.Users) == 0 && !in.Cluster.Enabled() && in.LeafNode.Listen == "" &&
		len(in.LeafNode.Remotes) == 0 && len(in.Edges) == 0 && in.Domain == ""
}

// besideDenies are what anonymous clients beside the stream may not publish or subscribe to,
// and admins may not publish or have a push consumer deliver to: every internal subjects row
// an admin does not reach (orderstore's own inboxes, advisories, what a hub sources), the
// replies of StreamAccount's service imports, group commit's stop markers, the guard's denies.
func (in Input) besideDenies() (pub, sub []string) {
	for _, r := range in.internalSubjects() {
		if !r.Admin {
			sub = append(sub, r.Pattern)
		}
	}
	sub = append(sub, "_R_.>", "_ORDERSTORE_GC_SENT.>")
	return append(slices.Clone(sub), in.guardDenies()...), sub
}

// sysReadOnly are the system account's requests an admin may make: the server pings `nats server
// info/report/list` send, and the monitoring requests of one server. Kicking clients, lame-duck
// mode and reloads stay with the system user.
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
func (in Input) readerPermissions() (allow, deny []string) {
	allow = []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.INFO.*",
		"$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>",
		"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>",
		"$JS.API.CONSUMER.INFO.>", "$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.LIST.*",
		"$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.DELETE.>",
		"$JS.ACK.>",
	}
	s, d := in.Stream, in.Durable
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
	// The account's mappings send requests on orderstore's own consumers to the durable guard
	// before nats checks permissions: a reader may send there, so that the guard's answer says why
	// it is refused (a permission error would not).
	guarded := in.guardMappings()
	if len(guarded) > 0 {
		allow = append(allow, GuardPrefix+">")
	}
	return allow, slices.DeleteFunc(deny, func(d string) bool {
		return slices.ContainsFunc(guarded, func(m embedded.Mapping) bool { return m.From == d })
	})
}

// userAccount names a user's account from the name alone, so that the user's dedupe scope (ids are
// stored as "<account>:<id>") stays when users are added, removed or reordered: "USER_<name>" for
// a name of letters, digits, '_' and '-' up to 59 bytes; else "USERX_", those of its characters
// and a hash of the whole name, so that two names never share an account (what /connz and `nats
// server report` show).
func userAccount(name string) string {
	kept := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return -1
	}, name)
	if kept == name && len(name) <= 59 {
		return "USER_" + name
	}
	sum := sha256.Sum256([]byte(name))
	return "USERX_" + kept[:min(len(kept), 48)] + "_" + hex.EncodeToString(sum[:4])
}
