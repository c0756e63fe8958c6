package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orderstore/orderstore"
)

func TestExampleFileEqualsDefaults(t *testing.T) {
	got, err := Load("../../orderstore.example.toml")
	if err != nil {
		t.Fatalf("orderstore.example.toml: %v", err)
	}
	want := Default()
	want.Server.Users = []User{} // the example writes users = [] explicitly
	want.Admin.AllowedHosts = []string{}
	want.Cluster.Routes, want.LeafNode.Remotes, want.Hub.Edges = []string{}, []orderstore.LeafRemote{}, []string{}
	// A relative path in a file is relative to the file's directory.
	dir, _ := filepath.Abs("../..")
	want.JetStream.StoreDir = filepath.Join(dir, want.JetStream.StoreDir)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("orderstore.example.toml differs from Default():\n got %+v\nwant %+v", got, want)
	}
}

// Every key of every table appears in the example file, so it documents
// everything the decoder accepts.
func TestExampleFileListsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../orderstore.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	top := reflect.TypeOf(Config{})
	for i := range top.NumField() {
		table := top.Field(i).Tag.Get("toml")
		if !strings.Contains(text, "["+table+"]") {
			t.Errorf("example lacks table [%s]", table)
		}
		ft := top.Field(i).Type
		for j := range ft.NumField() {
			key := strings.Split(ft.Field(j).Tag.Get("toml"), ",")[0]
			if key == "-" {
				continue // the library's only (a func): no key
			}
			if ft.Field(j).Type.Kind() == reflect.Map && (strings.Contains(text, "\n["+table+"."+key+"]") || strings.Contains(text, "\n# ["+table+"."+key+"]")) {
				continue // a table of the user's keys
			}
			if ft.Field(j).Type == reflect.TypeOf(orderstore.TLSConfig{}) {
				if !strings.Contains(text, "\n["+table+"."+key+"]") {
					t.Errorf("example lacks table [%s.%s]", table, key)
				}
				continue
			}
			// A key with no default value is shown commented out.
			if !strings.Contains(text, "\n"+key+" = ") && !strings.Contains(text, "\n# "+key+" = ") {
				t.Errorf("example lacks key %s.%s", table, key)
			}
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().validate(); len(err) > 0 {
		t.Fatal(err)
	}
}

// hubTOML is a hub of edge-1 and edge-2 with the leaf users named in pairs (user, edge).
func hubTOML(users ...string) string {
	s := "[leafnode]\nlisten = \"127.0.0.1:7422\"\n"
	for i := 0; i < len(users); i += 2 {
		s += fmt.Sprintf("[[leafnode.users]]\nuser = %q\npassword = \"secret\"\nedge = %q\n", users[i], users[i+1])
	}
	return "[jetstream]\nmax_file_store = \"40GiB\"\n[hub]\nstream = \"ORDER_EVENTS_ALL\"\nedges = [\"edge-1\", \"edge-2\"]\n" + s
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		toml     string
		wantKeys []string // keys named by the error, in order
		wantText []string // substrings of the message
	}{
		{"unknown keys all listed", "[stream]\nmax_agee = \"1h\"\n[admin]\nadress = \"x\"\n[bogus]\nx = 1\n",
			[]string{"admin.adress, bogus, stream.max_agee"}, []string{"unknown keys: admin.adress (did you mean admin.listen?), bogus, stream.max_agee (did you mean stream.max_age?)"}},
		{"bare number duration", "[stream]\nmax_age = \"72\"\n", []string{"stream.max_age"}, []string{`"72": missing unit`}},
		{"integer duration", "[processor]\nack_wait = 30\n", []string{"processor.ack_wait"}, []string{"missing unit"}},
		{"unknown size unit", "[jetstream]\nmax_file_store = \"10XB\"\n", []string{"jetstream.max_file_store"}, []string{`"10XB"`}},
		{"SI size rejected with hint", "[stream]\nmax_bytes = \"1GB\"\n", []string{"stream.max_bytes"}, []string{"write GiB"}},
		{"bare size", "[stream]\nmax_bytes = \"1024\"\n", []string{"stream.max_bytes"}, []string{"missing unit"}},
		{"wrong type", "[server]\nport = \"x\"\n", []string{"server.port"}, []string{"wrong type"}},
		{"all problems at once", "[stream]\nmax_age = \"72\"\ndiscard = \"oldest\"\n[processor]\nmax_deliver = 0\n",
			[]string{"stream.max_age", "stream.discard", "processor.max_deliver"}, nil},
		{"max_bytes over max_file_store", "[jetstream]\nmax_file_store = \"1GiB\"\n[stream]\nmax_bytes = \"2GiB\"\n",
			[]string{"stream.max_bytes"}, []string{"exceeds jetstream.max_file_store 1GiB"}},
		{"backoff not shorter than max_deliver", "[processor]\nmax_deliver = 2\nbackoff = [\"1s\", \"2s\"]\n",
			[]string{"processor.backoff"}, []string{"fewer entries than processor.max_deliver (2)"}},
		{"infinite max_deliver", "[processor]\nmax_deliver = -1\n", []string{"processor.max_deliver"}, []string{"finite"}},
		{"max_ack_pending beyond the client's", "[processor]\nmax_ack_pending = 500001\n", []string{"processor.max_ack_pending"},
			[]string{"processor.max_ack_pending = 500001: must be at most 500000", "hint: lower it"}},
		{"sync interval word", "[jetstream]\nsync_interval = \"sometimes\"\n", []string{"jetstream.sync_interval"}, []string{"always"}},
		{"durability word", "[jetstream]\ndurability = \"fast\"\n", []string{"jetstream.durability"}, []string{`"group-commit", "always" or "interval"`}},
		{"interval without sync_interval", "[jetstream]\ndurability = \"interval\"\n", []string{"jetstream.sync_interval"}, []string{"needs a sync_interval"}},
		{"sync_interval with always", "[jetstream]\ndurability = \"always\"\nsync_interval = \"1s\"\n", []string{"jetstream.sync_interval"}, []string{`applies to durability "interval" only`}},
		{"sync_interval always with a durability", "[jetstream]\ndurability = \"group-commit\"\nsync_interval = \"always\"\n", []string{"jetstream.sync_interval"}, []string{"leave sync_interval out"}},
		{"group commit in a cluster", "[server]\nname = \"n1\"\n[jetstream]\ndurability = \"group-commit\"\n[cluster]\nname = \"c\"\nroutes = [\"nats-route://127.0.0.1:6223\"]\nuser = \"route\"\npassword = \"route-secret-1\"\n",
			[]string{"jetstream.durability"}, []string{"single node"}},
		{"non-loopback without users", "[server]\nhost = \"0.0.0.0\"\n", []string{"server.host"}, []string{"users"}},
		{"non-loopback admin without token", "[admin]\nlisten = \"0.0.0.0:8222\"\n", []string{"admin.listen"}, []string{"token"}},
		{"replicas on one host", "[stream]\nreplicas = 3\n", []string{"stream.replicas"}, nil},
		{"table is not a table", "stream = 1\n", []string{"stream"}, []string{"must be a table"}},
		{"duplicate window over max_age", "[stream]\nmax_age = \"1m\"\nduplicate_window = \"2m\"\n", []string{"stream.duplicate_window"}, nil},
		{"bad subject", "[stream]\nsubjects = [\"orders.>.x\"]\n", []string{"stream.subjects[0]"}, nil},
		{"log level", "[log]\nlevel = \"verbose\"\n", []string{"log.level"}, nil},
		{"dlq equals stream", "[processor]\ndead_letter_stream = \"ORDER_EVENTS\"\n", []string{"processor.dead_letter_stream"}, nil},
		{"storage budget over max_file_store", "[jetstream]\nmax_file_store = \"2GiB\"\n[stream]\nmax_bytes = \"1800MiB\"\n",
			[]string{"stream.max_bytes"}, []string{"processor.dead_letter_max_bytes 256MiB + processor.projection_max_bytes 512MiB = 2.5GiB exceeds jetstream.max_file_store 2GiB"}},
		{"zero dead-letter budget", "[processor]\ndead_letter_max_bytes = \"0B\"\n", []string{"processor.dead_letter_max_bytes"}, nil},
		{"max_msg_size over max_payload", "[stream]\nmax_msg_size = \"2MiB\"\n", []string{"stream.max_msg_size"}, nil},
		// BurntSushi leaves a map as it was when the value is not a table.
		{"schemas not a table", "[validation]\nschemas = \"created.json\"\n", []string{"validation.schemas"}, []string{"must be a table"}},
		{"stale_after not a table", "[processor]\nstale_after = \"1h\"\n", []string{"processor.stale_after"}, []string{"must be a table"}},
		{"min_version of a route", "[server]\nname = \"n1\"\n[cluster]\nname = \"c\"\nroutes = [\"nats-route://127.0.0.1:6223\"]\nuser = \"route\"\npassword = \"route-secret-1\"\ntls = { min_version = \"TLS1.3\" }\n", []string{"cluster.tls.min_version"}, []string{`"1.2" or "1.3"`}},
		{"min_version of a leaf remote", "[jetstream]\ndomain = \"e1\"\n[[leafnode.remotes]]\nurl = \"nats-leaf://hub:7422\"\ntls = { min_version = \"1.4\" }\n",
			[]string{"leafnode.remotes[0].tls.min_version"}, []string{`"1.2" or "1.3"`}},
		{"negative reconnect_interval", "[leafnode]\nreconnect_interval = \"-1s\"\n", []string{"leafnode.reconnect_interval"}, []string{"positive"}},
		{"leaf user of no hub edge", hubTOML("edge-1", "edge-1", "e2", "edge-3"), []string{"leafnode.users[1].edge", "hub.edges[1]"},
			[]string{`leafnode.users[1].edge = "edge-3": must be one of hub.edges ["edge-1" "edge-2"]`, `hub.edges[1] = "edge-2": has no user in [[leafnode.users]]`}},
		{"leaf users defined twice", hubTOML("edge-1", "edge-1", "edge-1", "edge-2"), []string{"leafnode.users[1].user"}, []string{`"edge-1": is defined twice`}},
		{"edge without its leaf user", hubTOML("edge-1", "edge-1"), []string{"hub.edges[1]"}, []string{`has no user in [[leafnode.users]]: with them every edge needs its own (edge = "edge-2")`}},
		{"leaf user without password", hubTOML("edge-1", "edge-1") + "[[leafnode.users]]\nuser = \"e2\"\nedge = \"edge-2\"\n", []string{"leafnode.users[1].user"},
			[]string{`needs user and password: what edge "edge-2" presents`}},
		{"size beyond int64", "[jetstream]\nmax_file_store = \"1e30TiB\"\n", []string{"jetstream.max_file_store"}, []string{"too large"}},
		{"bare byte count", "[server]\nmax_payload = 1048576\n", []string{"server.max_payload"}, []string{`"1048576B"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.toml), "test.toml")
			var errs *orderstore.ValidationError
			if !errors.As(err, &errs) {
				t.Fatalf("Parse() error = %v, want *orderstore.ValidationError", err)
			}
			if got := errs.Keys(); !reflect.DeepEqual(got, tt.wantKeys) {
				t.Errorf("keys = %q, want %q\n%v", got, tt.wantKeys, err)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if !strings.HasPrefix(err.Error(), `config "test.toml": `) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestSyntaxErrorHasPosition(t *testing.T) {
	_, err := Parse(strings.NewReader("[stream]\nmax_age = \n"), "bad.toml")
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), `config "bad.toml"`) {
		t.Fatalf("error = %v, want file name and line 2", err)
	}
}

func TestParseValues(t *testing.T) {
	cfg, err := Parse(strings.NewReader(`
[jetstream]
sync_interval = "1s"
max_file_store = "1.5GiB"
[stream]
max_age = "72h"
max_bytes = "-1"
[processor]
stale_after = { shipped = "36h" }
[[server.users]]
user = "producer"
password = "p"
publish = ["orders.>"]
`), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JetStream.SyncInterval.Always || cfg.JetStream.SyncInterval.Interval != time.Second {
		t.Errorf("sync = %+v", cfg.JetStream.SyncInterval)
	}
	if cfg.JetStream.MaxFileStore != 3<<29 {
		t.Errorf("max_file_store = %d", cfg.JetStream.MaxFileStore)
	}
	if time.Duration(cfg.Stream.MaxAge) != 72*time.Hour || cfg.Stream.MaxBytes != -1 {
		t.Errorf("stream = %+v", cfg.Stream)
	}
	if len(cfg.Server.Users) != 1 || cfg.Server.Users[0].Publish.Allow[0] != "orders.>" {
		t.Errorf("users = %+v", cfg.Server.Users)
	}
	if time.Duration(cfg.Processor.StaleAfter["shipped"]) != 36*time.Hour {
		t.Errorf("stale_after = %v", cfg.Processor.StaleAfter)
	}
	// Keys not in the file keep their defaults.
	if cfg.Processor.Durable != "order-processor" || cfg.Stream.Name != "ORDER_EVENTS" {
		t.Errorf("defaults lost: %+v", cfg.Processor)
	}
}

// check -print output parses back to the same configuration.
func TestEncodeRoundTrip(t *testing.T) {
	cfg := Default()
	cfg.JetStream.SyncInterval = SyncPolicy{Interval: 1500 * time.Millisecond}
	cfg.Stream.MaxAge = Duration(90 * time.Minute)
	b, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(strings.NewReader(string(b)), "printed")
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, b)
	}
	normalizeEmpty(&cfg)
	normalizeEmpty(&back)
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip differs:\n%s", b)
	}
}

func TestEncodeRedactsSecrets(t *testing.T) {
	cfg := Default()
	cfg.Server.SystemUser, cfg.Server.SystemPassword = "admin", "hunter2"
	cfg.Server.Users = []User{{User: "p", Password: "hunter3"}}
	cfg.Admin.Token = "hunter4"
	b, _ := cfg.Encode()
	for _, s := range []string{"hunter2", "hunter3", "hunter4"} {
		if strings.Contains(string(b), s) {
			t.Errorf("Encode leaks %q", s)
		}
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"10GiB", 10 << 30, false}, {"512MiB", 512 << 20, false}, {"1KiB", 1024, false}, {"7B", 7, false},
		{"1TiB", 1 << 40, false}, {"-1", -1, false}, {"10GB", 0, true}, {"10", 0, true}, {"", 0, true}, {"GiB", 0, true}, {"-5MiB", 0, true},
		{"NaNGiB", 0, true}, {"InfB", 0, true}, {"9000000TiB", 0, true},
	}
	for _, tt := range tests {
		var b ByteSize
		err := b.UnmarshalText([]byte(tt.in))
		if (err != nil) != tt.err || (!tt.err && int64(b) != tt.want) {
			t.Errorf("ByteSize(%q) = %d, %v; want %d, err %v", tt.in, b, err, tt.want, tt.err)
		}
		if !tt.err {
			if s := b.String(); s != tt.in && tt.in != "-1" {
				t.Errorf("ByteSize(%q).String() = %q", tt.in, s)
			}
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"72h": 72 * time.Hour, "1m30s": 90 * time.Second, "0s": 0} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || time.Duration(d) != want {
			t.Errorf("Duration(%q) = %v, %v", in, time.Duration(d), err)
		}
	}
	for _, in := range []string{"72", "", "1 day", "3.5"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("Duration(%q) accepted", in)
		}
	}
	if s := Duration(168 * time.Hour).String(); s != "168h" {
		t.Errorf("String = %q", s)
	}
}

// The file's defaults are the library's: one set of values, two shapes.
func TestDefaultMapsToLibraryDefaults(t *testing.T) {
	got, err := Default().Orderstore()
	if err != nil {
		t.Fatal(err)
	}
	if want := orderstore.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default().Orderstore() =\n%+v\nwant orderstore.DefaultConfig() =\n%+v", got, want)
	}
}

// Every table maps onto the library's Config, token_file included.
func TestOrderstoreMapping(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(strings.NewReader(`
[server]
port = -1
max_payload = "2MiB"
[[server.users]]
user = "producer"
password = "p"
publish = ["orders.>"]
[[server.users]]
user = "reader"
nkey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
role = "reader"
[jetstream]
store_dir = "/srv/orders"
sync_interval = "250ms"
max_file_store = "3GiB"
[stream]
max_age = "24h"
max_bytes = "-1"
discard = "new"
[processor]
enabled = false
backoff = ["2s"]
[admin]
listen = "0.0.0.0:9000"
token_file = "`+tokenFile+`"
`), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.Orderstore()
	if err != nil {
		t.Fatal(err)
	}
	want := orderstore.DefaultConfig()
	want.Server.Port, want.Server.MaxPayload = -1, 2<<20
	want.Server.Users = []orderstore.User{{Name: "producer", Password: "p", Publish: []string{"orders.>"}},
		{Name: "reader", Nkey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", Role: "reader"}}
	want.JetStream.StoreDir, want.JetStream.SyncInterval, want.JetStream.MaxFileStore = "/srv/orders", 250*time.Millisecond, 3<<30
	want.Stream.MaxAge, want.Stream.MaxBytes, want.Stream.Discard = 24*time.Hour, -1, "new"
	want.Processor.Enabled, want.Processor.Backoff = false, []time.Duration{2 * time.Second}
	want.Admin.Listen, want.Admin.Token = "0.0.0.0:9000", "s3cret-token-0123456789"
	if !reflect.DeepEqual(o, want) {
		t.Errorf("Orderstore() =\n%+v\nwant\n%+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("mapped config does not validate: %v", err)
	}

	cfg.Admin.TokenFile = filepath.Join(dir, "missing")
	if _, err := cfg.Orderstore(); err == nil || !strings.Contains(err.Error(), "admin.token_file") {
		t.Errorf("missing token_file: %v, want an error naming admin.token_file", err)
	}
}

// jetstream.durability, and sync_interval as files wrote it before
// durability existed.
func TestDurabilityModes(t *testing.T) {
	for _, c := range []struct {
		toml, want string
		interval   time.Duration
	}{
		{"", orderstore.DurabilityGroupCommit, 0},
		{"durability = \"always\"\n", orderstore.DurabilityAlways, 0},
		{"durability = \"interval\"\nsync_interval = \"2s\"\n", orderstore.DurabilityInterval, 2 * time.Second},
		{"sync_interval = \"always\"\n", orderstore.DurabilityAlways, 0}, // an older file keeps its mode
		{"sync_interval = \"1s\"\n", orderstore.DurabilityInterval, time.Second},
	} {
		cfg, err := Parse(strings.NewReader("[jetstream]\n"+c.toml), "t.toml")
		if err != nil {
			t.Fatalf("%q: %v", c.toml, err)
		}
		o, err := cfg.Orderstore()
		if err != nil {
			t.Fatal(err)
		}
		if got := o.DurabilityMode(); got != c.want || o.JetStream.SyncInterval != c.interval {
			t.Errorf("%q: durability %q, sync_interval %s; want %q, %s", c.toml, got, o.JetStream.SyncInterval, c.want, c.interval)
		}
	}
	// A cluster without a durability gets "always".
	o := orderstore.DefaultConfig()
	o.Cluster.Name, o.Cluster.Routes = "c", []string{"nats-route://127.0.0.1:6223"}
	if got := o.DurabilityMode(); got != orderstore.DurabilityAlways {
		t.Errorf("cluster default %q, want always", got)
	}
}

// Relative paths in a file are relative to the file's directory (the
// working directory is / under the shipped systemd unit); absolute ones
// stay.
func TestRelativePathsFollowTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orderstore.toml")
	body := "[jetstream]\nstore_dir = \"data\"\n[admin]\ntoken_file = \"secrets/token\"\n[admin.tls]\ncert_file = \"/etc/abs.crt\"\nkey_file = \"k.key\"\n" +
		"[[server.users]]\nuser = \"p\"\npassword_file = \"p.pw\"\nrole = \"producer\"\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		c.JetStream.StoreDir:           filepath.Join(dir, "data"),
		c.Admin.TokenFile:              filepath.Join(dir, "secrets/token"),
		c.Admin.TLS.CertFile:           "/etc/abs.crt",
		c.Admin.TLS.KeyFile:            filepath.Join(dir, "k.key"),
		c.Server.Users[0].PasswordFile: filepath.Join(dir, "p.pw"),
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}
}

// The key table names Go fields by the file's keys, through slices and
// renamed fields, and has nothing for what only the library has.
func TestKeyOf(t *testing.T) {
	for field, want := range map[string]string{
		"Server.Users[2].Name":           "server.users[2].user",
		"Server.Users[0].PublishDeny":    "server.users[0].publish.deny",
		"Server.Users[0].Subscribe[3]":   "server.users[0].subscribe[3]",
		"Server.TLS.CAFile":              "server.tls.ca_file",
		"JetStream.MaxFileStore":         "jetstream.max_file_store",
		"JetStream.SyncInterval":         "jetstream.sync_interval",
		"Processor.DeadLetterMaxBytes":   "processor.dead_letter_max_bytes",
		"LeafNode.Remotes[1].TLS.Verify": "leafnode.remotes[1].tls.verify",
		"Server.Name":                    "server.name",
		"Cluster.Routes[0]":              "cluster.routes[0]",
		"Hub.Edges[1]":                   "hub.edges[1]",
		"LeafNode.Listen":                "leafnode.listen",
		"JetStream.Domain":               "jetstream.domain",
		"Stream.Replicas":                "stream.replicas",
		"Admin.IdleTimeout":              "", // the library's alone
		"Logger":                         "",
		"Server.Name.Nope":               "",
		"Nope":                           "",
	} {
		if got := KeyOf(field); got != want {
			t.Errorf("KeyOf(%q) = %q, want %q", field, got, want)
		}
	}
}

// Every field of orderstore.Config has a key in the file, but for the few
// a library caller alone sets; and every key maps onto a field (copyFields
// panics on a lib tag naming a missing field).
func TestKeyTableCoversTheLibrary(t *testing.T) {
	libraryOnly := map[string]bool{
		"Logger": true, "Build": true, "Processor.Handler": true, "rebuildPace": true, "syncHungAfter": true, // unexported: tests only
		"JetStream.EncryptionKey": true, // read from jetstream.encryption_key_file
		"Admin.ReadTimeout":       true, "Admin.WriteTimeout": true, "Admin.IdleTimeout": true,
	}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
				p += "[0]"
			}
			if libraryOnly[strings.TrimSuffix(p, "[0]")] {
				continue
			}
			if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
				walk(ft, p)
				continue
			}
			if KeyOf(p) == "" {
				t.Errorf("orderstore.Config.%s has no key in the file: add it to the file's types (internal/config) or to libraryOnly", p)
			}
		}
	}
	walk(reflect.TypeOf(orderstore.Config{}), "")
	// Both ways, a full config survives the round trip.
	c := Default()
	c.Server.Users = []User{{User: "u", Password: "p", Role: "producer", Publish: Subjects{Allow: []string{"orders.>"}, Deny: []string{"orders.x"}}}}
	c.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-leaf://h:7422", TLS: orderstore.TLSConfig{CAFile: "ca.pem", Verify: true}}}
	c.LeafNode.Users = []orderstore.LeafUser{{User: "leaf-e1", Password: "p", Edge: "e1"}}
	c.Processor.Backoff = []Duration{Duration(time.Second)}
	c.Log = Log{}
	if back := fromOrderstore(c.toOrderstore()); !reflect.DeepEqual(back, c) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, c)
	}
}

// An unknown key is answered with the key it most likely meant: an alias
// of its last word, the nearest spelling in its table, or the nearest
// table; nothing when nothing is near.
func TestUnknownKeySuggestions(t *testing.T) {
	for unknown, want := range map[string]string{
		"admin.adress":         "admin.listen",
		"stream.max_agee":      "stream.max_age",
		"server.prot":          "server.port",
		"jetstram":             "jetstream",
		"server.users.rol":     "server.users.role",
		"processor.ack_wiat":   "processor.ack_wait",
		"admin.completely_new": "",
		"bogus":                "",
	} {
		if got := suggest(unknown); got != want {
			t.Errorf("suggest(%q) = %q, want %q", unknown, got, want)
		}
	}
	_, err := Parse(strings.NewReader("[admin]\nadress = \"127.0.0.1:9\"\n"), "f")
	if err == nil || !strings.Contains(err.Error(), "admin.adress (did you mean admin.listen?)") {
		t.Errorf("Parse = %v, want the suggestion", err)
	}
}
