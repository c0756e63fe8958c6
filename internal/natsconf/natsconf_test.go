package natsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderstore/orderstore/embedded"
)

func input() Input {
	return Input{Stream: "ORDER_EVENTS", Subjects: []string{"orders.>"}, DeadLetterSubjects: "dlq.ORDER_EVENTS_DLQ.>",
		Processor: true, Durable: "orderstore-processor", ConsumerStream: "ORDER_EVENTS"}
}

// A disabled processor protects nothing: no guard mappings, no denies
// (an operator may change its consumer with natscli).
func TestNothingProtectedWithoutTheProcessor(t *testing.T) {
	in := input()
	if _, _, ok := in.ProtectedConsumers(); !ok || len(in.guardMappings()) == 0 || len(in.guardDenies()) != 1 {
		t.Fatalf("processor on: protected %v, %d mappings, denies %q", ok, len(in.guardMappings()), in.guardDenies())
	}
	in.Processor = false
	if _, _, ok := in.ProtectedConsumers(); ok || in.guardMappings() != nil || in.guardDenies() != nil {
		t.Errorf("processor off: protected %v, mappings %v, denies %q, want none", ok, in.guardMappings(), in.guardDenies())
	}
}

// The durable guard's mappings belong to every account that imports the
// JetStream API, and to none other: a producer's account (its events) and
// orderstore's own account (its connections use the processor's durable)
// hold none. An account with them imports the API, the acks and the
// guard's subject straight from StreamAccount: one service import hop per
// request and per delivered message (a second hop through another account
// cost a pull consumer a third of its rate, bench/README.md).
//
// On a single node with no users and no domain the anonymous clients are
// in StreamAccount itself: the mappings are StreamAccount's (orderstore's
// own user is exempt, ec.MappingsExemptNkey), no account imports the API,
// and the anonymous user's permissions deny the guard's subject-less
// create and orderstore's inbox both ways.
func TestGuardMappingsInEveryAPIAccount(t *testing.T) {
	in := input()
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	var ec embedded.Config
	if err := in.Apply(&ec, id); err != nil {
		t.Fatal(err)
	}
	if ec.MappingsExemptNkey == "" {
		t.Error("no user is exempt from the mappings")
	}
	for _, a := range ec.Accounts {
		if a.Name == StreamAccount && !slices.Equal(a.Mappings, in.guardMappings()) {
			t.Errorf("no users: StreamAccount's mappings %v, want the guard's", a.Mappings)
		}
		if a.Name != StreamAccount && (len(a.Mappings) > 0 || len(a.Imports) > 0 && a.Name != "SYS") {
			t.Errorf("no users: account %s has mappings %v, imports %v: want none", a.Name, a.Mappings, a.Imports)
		}
	}
	anon := 0
	for _, u := range ec.Users {
		if u.Nkey == ec.NoAuthUser {
			anon++
			if u.Account != StreamAccount || !slices.Contains(u.PublishDeny, "$JS.API.CONSUMER.CREATE."+in.ConsumerStream) ||
				!slices.Contains(u.PublishDeny, InternalInbox+".>") || !slices.Contains(u.SubscribeDeny, InternalInbox+".>") {
				t.Errorf("no users: the anonymous user %+v", u)
			}
		}
	}
	if anon != 1 {
		t.Errorf("no users: %d anonymous users", anon)
	}

	for _, users := range [][]User{nil, {{Name: "p", Role: RoleProducer}, {Name: "r", Role: RoleReader}, {Name: "a", Role: RoleAdmin}}} {
		in := input()
		in.Users = users
		in.Domain = "d1" // no users: the anonymous clients in an account of their own
		accounts := testAccounts(t, in)
		withAPI := 0
		for _, a := range accounts {
			api, guard := false, false
			for _, im := range a.Imports {
				if im.Subject == "$JS.API.>" || im.Subject == "$JS.ACK.>" || strings.HasPrefix(im.Subject, GuardPrefix) {
					if im.Account != StreamAccount {
						t.Errorf("users %v: account %s imports %s from %s, want from %s", users, a.Name, im.Subject, im.Account, StreamAccount)
					}
					api = api || im.Subject == "$JS.API.>"
					guard = guard || strings.HasPrefix(im.Subject, GuardPrefix)
				}
			}
			if api {
				withAPI++
				if !guard || !slices.Equal(a.Mappings, in.guardMappings()) || len(a.Mappings) == 0 {
					t.Errorf("users %v: account %s imports the API with mappings %v and the guard's subject %v, want the guard's mappings %v and subject",
						users, a.Name, a.Mappings, guard, in.guardMappings())
				}
			} else if len(a.Mappings) > 0 || guard {
				t.Errorf("users %v: account %s (no API) has mappings %v, guard import %v: want none", users, a.Name, a.Mappings, guard)
			}
		}
		if want := map[bool]int{true: 1, false: 2}[users == nil]; withAPI != want {
			t.Errorf("users %v: %d accounts import the API, want %d", users, withAPI, want)
		}
	}
}

// Every row crosses the leaf link only where the hub allows it, and the
// edge denies it every other way: the two lists split the table.
func TestLeafListsSplitTheTable(t *testing.T) {
	in := input()
	in.Edges = []string{"edge-1"}
	fromLeaf, toLeaf, denyImports, denyExports := in.leafLists("")
	for _, r := range in.internalSubjects() {
		if slices.Contains(toLeaf, r.Pattern) == slices.Contains(denyImports, r.Pattern) {
			t.Errorf("%s: in the hub's toLeaf %v, in the edge's denyImports %v", r.Pattern, slices.Contains(toLeaf, r.Pattern), slices.Contains(denyImports, r.Pattern))
		}
		if slices.Contains(fromLeaf, r.Pattern) == slices.Contains(denyExports, r.Pattern) {
			t.Errorf("%s: in the hub's fromLeaf %v, in the edge's denyExports %v", r.Pattern, slices.Contains(fromLeaf, r.Pattern), slices.Contains(denyExports, r.Pattern))
		}
	}
	if !slices.Contains(toLeaf, "$JS.edge-1.API.>") {
		t.Errorf("toLeaf %q lacks the edge's API", toLeaf)
	}
	// An edge's own leaf user: its own answers and deliveries in, flow control and its own
	// domain's requests out.
	in.Edges = []string{"edge-1", "edge-2"}
	fromLeaf, toLeaf, _, _ = in.leafLists("edge-2")
	if want := []string{"_ORDERSTORE_HUBWATCH.edge-2.>", "$JS.S.edge-2.>", "$JSC.R.edge-2.>"}; !slices.Equal(fromLeaf, want) {
		t.Errorf("edge-2's fromLeaf %q, want %q", fromLeaf, want)
	}
	if want := []string{"$JS.FC.>", "$JS.edge-2.API.>"}; !slices.Equal(toLeaf, want) {
		t.Errorf("edge-2's toLeaf %q, want %q", toLeaf, want)
	}
}

func TestAccountNamesAndStreamImports(t *testing.T) {
	// From the name alone (a user's dedupe scope stays when others are added or removed), and
	// never the same for two names.
	seen := map[string]string{}
	for _, name := range []string{"p1", "p-1_X", "ann o'brien.x*", "annobrienx", "p.1", "USERX_p1_a8f6a0e2", strings.Repeat("a", 59), strings.Repeat("a", 100), strings.Repeat("a", 101)} {
		got := userAccount(name)
		if len(got) > 64 || seen[got] != "" {
			t.Errorf("userAccount(%q) = %q: %d characters (at most 64), or %q's too", name, got, len(got), seen[got])
		}
		seen[got] = name
	}
	if got := userAccount("p1"); got != "USER_p1" {
		t.Errorf("userAccount(p1) = %q, want USER_p1", got)
	}
	// The accounts that may publish events import the stream's subjects
	// from StreamAccount as a service (its subscription answers them);
	// a reader's does not.
	publishers := func(in Input) []string {
		accounts := testAccounts(t, in)
		var got []string
		for _, a := range accounts {
			for _, im := range a.Imports {
				if im.Account == StreamAccount && im.Subject == in.Subjects[0] && !im.Stream {
					got = append(got, a.Name)
				}
			}
		}
		return got
	}
	in := input()
	if got := publishers(in); len(got) != 0 {
		t.Errorf("no users, single node: accounts importing the stream's subjects %q, want none (the anonymous clients are in StreamAccount)", got)
	}
	in.Domain = "d1"
	if got := publishers(in); !slices.Equal(got, []string{AnonymousAccount}) {
		t.Errorf("no users, a domain: accounts importing the stream's subjects %q", got)
	}
	in.Domain = ""
	in.Users = []User{{Name: "p", Role: RoleProducer}, {Name: "r", Role: RoleReader}, {Name: "x", Publish: []string{"a"}}}
	if got := publishers(in); !slices.Equal(got, []string{"USER_p", "USER_x"}) {
		t.Errorf("users: accounts importing the stream's subjects %q", got)
	}
	for _, n := range []string{"orderstore-internal", "orderstore-anonymous"} {
		if !ReservedUser(n) {
			t.Errorf("%s is not reserved", n)
		}
	}
}

// caFile writes a self-signed CA certificate and returns its path.
func caFile(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadTLS(t *testing.T) {
	ca := caFile(t)
	// Nothing configured; a listener's CA without a certificate is nothing.
	for _, c := range []struct {
		tc   TLSConfig
		peer bool
	}{{TLSConfig{}, false}, {TLSConfig{}, true}, {TLSConfig{CAFile: ca}, false}} {
		if cfg, err := LoadTLS("x.tls", c.tc, c.peer); cfg != nil || err != nil {
			t.Errorf("%+v peer %v: %v, %v, want nil", c.tc, c.peer, cfg, err)
		}
	}
	// A leaf remote verifies its hub with a CA alone, both ways, TLS 1.3.
	cfg, err := LoadTLS("leafnode.remotes[0].tls", TLSConfig{CAFile: ca, Verify: true, MinVersion: "1.3"}, true)
	if err != nil || cfg.RootCAs == nil || cfg.ClientCAs == nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("peer with a CA: %+v, %v", cfg, err)
	}
	// Errors name the key and carry a hint.
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	var hinted interface{ Hint() string }
	_, err = LoadTLS("cluster.tls", TLSConfig{CAFile: notPEM}, true)
	if err == nil || !strings.Contains(err.Error(), "cluster.tls: ca_file") || !errors.As(err, &hinted) || !strings.Contains(hinted.Hint(), "other nodes") {
		t.Errorf("a CA file without PEM: %v", err)
	}
	_, err = LoadTLS("server.tls", TLSConfig{CertFile: notPEM, KeyFile: notPEM}, false)
	if err == nil || !strings.Contains(err.Error(), "server.tls: cert_file") || !errors.As(err, &hinted) {
		t.Errorf("a bad certificate: %v", err)
	}
}

// accountOf is the account the named user lands in ("": the no-auth
// user, with no users configured) in the layout accounts makes; "" when
// there is no such user.
func accountOf(t *testing.T, in Input, user string) string {
	t.Helper()
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	_, users, noAuth, err := in.accounts(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if user != "" && u.Name == user || user == "" && noAuth != "" && u.Nkey == noAuth {
			return u.Account
		}
	}
	return ""
}

func TestAccountOf(t *testing.T) {
	if got := accountOf(t, Input{}, ""); got != StreamAccount {
		t.Fatalf("no users, single node: %q, want %q", got, StreamAccount)
	}
	for _, in := range []Input{{Domain: "d1"}, {Cluster: ClusterConfig{Name: "c"}}, {Edges: []string{"e"}}, {LeafNode: LeafNodeConfig{Listen: "127.0.0.1:7422"}}} {
		if got := accountOf(t, in, ""); got != AnonymousAccount {
			t.Fatalf("no users, %+v: %q, want %q", in, got, AnonymousAccount)
		}
	}
	in := Input{Users: []User{{Name: "p1", Role: RoleProducer}, {Name: "ann o'brien", Role: RoleAdmin}}}
	for user, want := range map[string]string{"p1": "USER_p1", "ann o'brien": userAccount("ann o'brien"), "": "", "nobody": ""} {
		if got := accountOf(t, in, user); got != want {
			t.Errorf("account of %q = %q, want %q", user, got, want)
		}
	}
}

// testAccounts is in's account layout, with a fresh identity.
func testAccounts(t *testing.T, in Input) []embedded.Account {
	t.Helper()
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	accounts, _, _, err := in.accounts(id)
	if err != nil {
		t.Fatal(err)
	}
	return accounts
}
