// Package config defines orderstore's TOML file: its shape, built-in defaults, strict decoding and
// validation, and its mapping onto orderstore.Config ([Config.Orderstore]). The file's types are
// the one table of its keys (keys.go): their tags drive the mapping both ways and name every
// problem by its key ([KeyOf]).
//
// Precedence, stated once: the -config flag, then the ORDERSTORE_CONFIG environment variable (for
// the path only), then the file's values, then the built-in defaults of [Default]. Every key of the
// file is optional; a key that is absent keeps its default.
package config

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/orderstore/orderstore"
)

// Config is the whole file. Each field is one TOML table.
type Config struct {
	Server    Server                   `toml:"server"`
	JetStream JetStream                `toml:"jetstream"`
	Stream    Stream                   `toml:"stream"`
	Processor Processor                `toml:"processor"`
	Admin     Admin                    `toml:"admin"`
	Cluster   orderstore.ClusterConfig `toml:"cluster"` // the library's own type: no key differs
	LeafNode  LeafNode                 `toml:"leafnode"`
	Hub       orderstore.HubConfig     `toml:"hub"`
	// Validation is the library's own type too: schemas by event type.
	Validation orderstore.ValidationConfig `toml:"validation"`
	Log        Log                         `toml:"log" lib:"-"`
}

// LeafNode links edges to a hub.
type LeafNode struct {
	Listen            string                  `toml:"listen"`             // a hub's leaf listener host:port; "" none
	User              string                  `toml:"user"`               // one user every edge presents (shared; users below: each its own)
	Password          string                  `toml:"password"`           // the password for user
	Users             []orderstore.LeafUser   `toml:"users"`              // each edge's own user instead (docs/security.md)
	ReconnectInterval Duration                `toml:"reconnect_interval"` // an edge's wait between attempts
	TLS               orderstore.TLSConfig    `toml:"tls"`                // [leafnode.tls]: the hub's listener
	Remotes           []orderstore.LeafRemote `toml:"remotes"`            // an edge's hubs
}

// Server is the NATS client listener.
type Server struct {
	Name             string               `toml:"name"`              // server name, shown by `nats server info`
	Host             string               `toml:"host"`              // client listener address; loopback by default
	Port             int                  `toml:"port"`              // client port; -1 picks a random free port
	MaxPayload       ByteSize             `toml:"max_payload"`       // largest message a client may publish
	SystemUser       string               `toml:"system_user"`       // system-account user for `nats server info`; empty disables
	SystemPassword   string               `toml:"system_password"`   // its password (or a bcrypt hash)
	Users            []User               `toml:"users"`             // client users; empty means anonymous clients are allowed (loopback only)
	MaxConnections   int                  `toml:"max_connections"`   // client connections; more are refused
	MaxSubscriptions int                  `toml:"max_subscriptions"` // subscriptions per connection; 0 unlimited
	AllowPlaintext   bool                 `toml:"allow_plaintext"`   // silence the no-TLS warning of a non-loopback host
	TLS              orderstore.TLSConfig `toml:"tls"`               // [server.tls]
}

// User is one NATS client user with its role or permissions.
type User struct {
	User         string   `toml:"user" lib:"Name"`                                   // the name it connects with
	Password     string   `toml:"password,omitempty"`                                // plaintext or a bcrypt hash ("$2a$...")
	PasswordFile string   `toml:"password_file,omitempty" lib:"-"`                   // file holding the password instead
	Nkey         string   `toml:"nkey,omitempty"`                                    // public user nkey instead of a password
	Role         string   `toml:"role,omitempty"`                                    // producer, reader or admin
	Publish      Subjects `toml:"publish,omitempty" lib:"Publish,PublishDeny"`       // explicit lists instead of a role
	Subscribe    Subjects `toml:"subscribe,omitempty" lib:"Subscribe,SubscribeDeny"` // explicit lists instead of a role
}

// JetStream is the storage engine.
type JetStream struct {
	StoreDir       string     `toml:"store_dir"`                                       // where streams live; created if missing
	MaxFileStore   ByteSize   `toml:"max_file_store"`                                  // disk JetStream may use in total
	MaxMemoryStore ByteSize   `toml:"max_memory_store"`                                // memory for memory-backed streams
	Durability     string     `toml:"durability"`                                      // "group-commit", "always" or "interval"; "" chooses
	SyncInterval   SyncPolicy `toml:"sync_interval,omitempty" lib:"SyncInterval,rule"` // with durability "interval": a duration
	DiskHeadroom   ByteSize   `toml:"disk_headroom"`                                   // free disk wanted beyond max_file_store
	AllowLowDisk   bool       `toml:"allow_low_disk"`                                  // turn the free-disk check into a warning
	Domain         string     `toml:"domain"`                                          // this node's JetStream domain (an edge's name)
	// EncryptionKeyFile names the store's encryption key (at least 32 bytes, mode 0600); "" takes
	// $CREDENTIALS_DIRECTORY/orderstore-encryption-key when systemd gives it, else no encryption.
	EncryptionKeyFile string `toml:"encryption_key_file" lib:"-"`
	Cipher            string `toml:"cipher"` // "chacha20-poly1305" (default) or "aes-256-gcm"; needs a key
}

// Stream is the ORDER_EVENTS stream and its retention limits.
type Stream struct {
	Name            string   `toml:"name"`             // the stream's name
	Subjects        []string `toml:"subjects"`         // what producers publish on: orders.> (orders.<type>)
	MaxAge          Duration `toml:"max_age"`          // "0s" keeps events forever
	MaxBytes        ByteSize `toml:"max_bytes"`        // "-1" is unlimited (up to max_file_store)
	MaxMsgs         int64    `toml:"max_msgs"`         // -1 is unlimited
	MaxMsgSize      ByteSize `toml:"max_msg_size"`     // largest event
	Discard         string   `toml:"discard"`          // "old" or "new" once a limit is reached
	DuplicateWindow Duration `toml:"duplicate_window"` // Nats-Msg-Id dedupe window
	Replicas        int      `toml:"replicas"`         // 1 on a single host
}

// Processor is the built-in durable processor and what it owns.
type Processor struct {
	Enabled          bool                `toml:"enabled"`
	Durable          string              `toml:"durable"`
	AckWait          Duration            `toml:"ack_wait"`
	MaxDeliver       int                 `toml:"max_deliver"`
	Backoff          []Duration          `toml:"backoff"`
	MaxAckPending    int                 `toml:"max_ack_pending"`
	DeadLetterStream string              `toml:"dead_letter_stream"`
	DeadLetterMaxAge Duration            `toml:"dead_letter_max_age"` // how long a dead letter is kept; "0s" forever
	DeadLetterBytes  ByteSize            `toml:"dead_letter_max_bytes" lib:"DeadLetterMaxBytes"`
	ProjectionBucket string              `toml:"projection_bucket"`
	ProjectionBytes  ByteSize            `toml:"projection_max_bytes" lib:"ProjectionMaxBytes"`
	HistoryBytes     ByteSize            `toml:"history_max_bytes" lib:"HistoryMaxBytes"`
	OrderIndex       bool                `toml:"order_index"`
	StaleAfter       map[string]Duration `toml:"stale_after"` // [processor.stale_after]: status = "duration"
}

// Admin is the HTTP admin listener.
type Admin struct {
	Listen         string               `toml:"listen"`             // host:port; "" disables the listener
	Token          string               `toml:"token"`              // bearer token; guards all but /livez and /readyz
	TokenFile      string               `toml:"token_file" lib:"-"` // file holding the token (trailing newline ignored)
	AllowedHosts   []string             `toml:"allowed_hosts"`      // Host header names accepted besides IPs and localhost
	AllowPlaintext bool                 `toml:"allow_plaintext"`    // silence the no-TLS warning of a non-loopback listener
	TLS            orderstore.TLSConfig `toml:"tls"`                // [admin.tls]: cert_file, key_file
}

// Log is the process log.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // auto (text on a terminal, JSON otherwise), text, json
}

// Default returns the built-in configuration: what `orderstore run` uses with no file, and what
// every absent key keeps. It is orderstore.DefaultConfig in the file's shape, plus [log].
func Default() Config {
	c := fromOrderstore(orderstore.DefaultConfig())
	c.Log = Log{Level: "info", Format: "auto"}
	return c
}

// Load reads and validates the file at path.
//
// Relative paths in it (store_dir, token_file, password_file, the TLS
// files, credentials, schema files) are relative to the file's own directory, not to the
// working directory (which is / under the shipped systemd unit).
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config %q: %w", path, err)
	}
	defer f.Close()
	cfg, err := Parse(f, path)
	if abs, aerr := filepath.Abs(path); aerr == nil {
		cfg.resolvePaths(filepath.Dir(abs))
	}
	return cfg, err
}

// resolvePaths makes every relative path of c relative to dir.
func (c *Config) resolvePaths(dir string) {
	rel := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	tls := func(t *orderstore.TLSConfig) { rel(&t.CertFile); rel(&t.KeyFile); rel(&t.CAFile) }
	for _, p := range []*string{&c.JetStream.StoreDir, &c.Admin.TokenFile, &c.JetStream.EncryptionKeyFile} {
		rel(p)
	}
	for _, t := range []*orderstore.TLSConfig{&c.Admin.TLS, &c.Server.TLS, &c.Cluster.TLS, &c.LeafNode.TLS} {
		tls(t)
	}
	for i := range c.Server.Users {
		rel(&c.Server.Users[i].PasswordFile)
	}
	for i := range c.LeafNode.Remotes {
		rel(&c.LeafNode.Remotes[i].Credentials)
		tls(&c.LeafNode.Remotes[i].TLS)
	}
	c.Validation.Schemas = maps.Clone(c.Validation.Schemas) // not the caller's map
	for typ, file := range c.Validation.Schemas {
		rel(&file)
		c.Validation.Schemas[typ] = file
	}
}

// Parse decodes r over [Default], rejects unknown keys and values of the wrong shape, and validates
// the result. All problems come back in one *orderstore.ValidationError, with the Config as far as
// it decoded (for a caller that checks more of it, as `check` does the files it names); a TOML
// syntax error comes back with its line and column.
func Parse(r io.Reader, name string) (Config, error) {
	cfg := Default()
	src, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("config %q: %w", name, err)
	}
	if len(src) > maxFileSize {
		return Config{}, fmt.Errorf("config %q: larger than %d bytes: not an orderstore configuration", name, maxFileSize)
	}
	var raw map[string]toml.Primitive
	md, err := toml.Decode(string(src), &raw)
	if err != nil {
		if pe := (toml.ParseError{}); errors.As(err, &pe) {
			return Config{}, fmt.Errorf("config %q: %s", name, syntaxError(pe, src))
		}
		return Config{}, fmt.Errorf("config %q: %s", name, maskQuoted(err.Error()))
	}

	errs := &orderstore.ValidationError{File: name}
	failed := map[string]bool{}
	var unknown []string
	top := reflect.ValueOf(&cfg).Elem()
	tables := tagIndex(top.Type())
	for tname, prim := range raw {
		fi, ok := tables[tname]
		if !ok {
			unknown = append(unknown, tname)
			continue
		}
		tv := top.Field(fi)
		// Decode key by key so one bad value does not hide the next.
		var keys map[string]toml.Primitive
		if typ := md.Type(tname); typ != "Hash" && typ != "" || md.PrimitiveDecode(prim, &keys) != nil {
			errs.Problems = append(errs.Problems, &orderstore.FieldError{Key: tname, Reason: "must be a table, e.g. [" + tname + "]"})
			failed[tname] = true
			continue
		}
		fields := tagIndex(tv.Type())
		for kname, kprim := range keys {
			ki, ok := fields[kname]
			if !ok {
				unknown = append(unknown, tname+"."+kname)
				continue
			}
			dotted := tname + "." + kname
			fv := tv.Field(ki)
			// Decode into a fresh value: a failed decode must not half-overwrite the default.
			nv := reflect.New(fv.Type())
			err := md.PrimitiveDecode(kprim, nv.Interface())
			if fv.Kind() == reflect.Map && md.Type(tname, kname) != "Hash" {
				err = errors.New("wrong type: it must be a table, e.g. [" + dotted + "]") // BurntSushi takes any other value as none
			}
			if err != nil {
				errs.Problems = append(errs.Problems, &orderstore.FieldError{Key: dotted, Reason: decodeReason(err)})
				failed[dotted] = true
				continue
			}
			fv.Set(nv.Elem())
		}
	}
	// Keys nested below a known key (e.g. server.users[0].bogus).
	for _, k := range md.Undecoded() {
		// A failed table or key's own keys are not unknown.
		if len(k) >= 3 && !failed[k[0]] && !failed[k[:2].String()] {
			unknown = append(unknown, k.String())
		}
	}
	// The problems by key, after the unknown keys, before validate's.
	slices.SortStableFunc(errs.Problems, func(a, b *orderstore.FieldError) int { return strings.Compare(a.Key, b.Key) })
	if len(unknown) > 0 {
		slices.Sort(unknown)
		var shown []string
		for _, k := range unknown {
			if s := suggest(k); s != "" {
				k += " (did you mean " + s + "?)"
			}
			shown = append(shown, k)
		}
		errs.Problems = append([]*orderstore.FieldError{{Key: strings.Join(unknown, ", "),
			Value: strings.Join(shown, ", "), Reason: "unknown keys", Unknown: true}}, errs.Problems...)
	}
	errs.Problems = append(errs.Problems, cfg.validate()...)
	if len(errs.Problems) > 0 {
		return cfg, errs
	}
	return cfg, nil
}

// maxFileSize bounds what Parse reads: a configuration is a few KiB.
const maxFileSize = 1 << 20

// decodeReason strips BurntSushi's wrapping down to the cause.
func decodeReason(err error) string {
	s := err.Error()
	if pe := (toml.ParseError{}); errors.As(err, &pe) && pe.Message != "" {
		s = pe.Message
	}
	if i := strings.Index(s, "toml: "); i >= 0 {
		s = s[i+len("toml: "):]
	}
	if i := strings.Index(s, "): "); i >= 0 && strings.HasPrefix(s, "line ") {
		s = s[i+3:]
	}
	s = strings.Replace(s, "incompatible types: TOML value has type", "wrong type: the value is a TOML", 1)
	// Go's kinds mean nothing to a config's reader: say what TOML wants.
	for kind, want := range map[string]string{
		"destination has type slice":   "it must be a list, e.g. [\"a\", \"b\"]",
		"destination has type string":  "it must be a string in quotes",
		"destination has type bool":    "it must be true or false",
		"destination has type int":     "it must be a whole number",
		"destination has type int64":   "it must be a whole number",
		"destination has type struct":  "it must be a table",
		"destination has type map":     "it must be a table",
		"destination has type float64": "it must be a number",
	} {
		if strings.HasSuffix(s, kind) {
			s = strings.TrimSuffix(s, kind) + want
			break
		}
	}
	return s
}

func tagIndex(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if tag := tomlName(t.Field(i)); tag != "" && tag != "-" {
			m[tag] = i
		}
	}
	return m
}
