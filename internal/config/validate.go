package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/orderstore/orderstore"
)

// Validate reports every problem of an already decoded Config at once.
func (c Config) Validate() error {
	if l := c.validate(); len(l) > 0 {
		return &orderstore.ValidationError{File: "<config>", Problems: l}
	}
	return nil
}

func (c Config) validate() []*orderstore.FieldError {
	var errs []*orderstore.FieldError
	bad := func(key string, value any, reason string) {
		v := ""
		if value != nil {
			v = fmt.Sprintf("%q", fmt.Sprint(value))
		}
		errs = append(errs, &orderstore.FieldError{Key: key, Value: v, Reason: reason})
	}
	// What the appliance checks, named by the file's keys.
	var ve *orderstore.ValidationError
	if err := c.toOrderstore().Validate(); errors.As(err, &ve) {
		for _, p := range ve.Problems {
			errs = append(errs, &orderstore.FieldError{Key: p.Key, Value: p.Value, Reason: p.Reason})
		}
	} else if err != nil {
		bad("", nil, err.Error())
	}
	// What only the file has.
	if js := c.JetStream; js.Durability != "" && js.SyncInterval.Always {
		bad("jetstream.sync_interval", js.SyncInterval, fmt.Sprintf("\"always\" is a durability: with durability = %q leave sync_interval out", js.Durability))
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		bad("admin.token", nil, "set admin.token or admin.token_file, not both")
	}
	for i, u := range c.Server.Users {
		if u.Password != "" && u.PasswordFile != "" {
			bad(fmt.Sprintf("server.users[%d].password", i), nil, "set password or password_file, not both")
		}
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "auto", "text", "json":
	default:
		bad("log.format", c.Log.Format, "must be auto, text or json")
	}
	return errs
}

// Orderstore maps the file onto the appliance's configuration, reading
// admin.token_file. Logger and Build are the caller's.
// Every file that cannot be read is reported, all at once.
func (c Config) Orderstore() (orderstore.Config, error) {
	o := c.toOrderstore()
	var errs []error
	tok, err := c.AdminToken()
	switch {
	case err != nil:
		errs = append(errs, err)
	case c.Admin.TokenFile != "" && len(tok) < 16:
		errs = append(errs, fmt.Errorf("admin.token_file %q: the token is %d characters, want at least 16 (make one with `openssl rand -hex 24`)", c.Admin.TokenFile, len(tok)))
	default:
		o.Admin.Token = tok
	}
	for i, u := range c.Server.Users {
		if u.PasswordFile == "" {
			continue
		}
		pw, err := readSecretFile(fmt.Sprintf("server.users[%d].password_file", i), u.PasswordFile)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.Server.Users[i].Password = pw
	}
	return o, errors.Join(errs...)
}

// readSecretFile reads a secret from a file, without its trailing newline.
func readSecretFile(key, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", key, path, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s %q is empty", key, path)
	}
	return t, nil
}

// toOrderstore is the mapping without reading admin.token_file (a set
// token_file stands in for the token, for validation).
func (c Config) toOrderstore() orderstore.Config {
	s, j, st, p := c.Server, c.JetStream, c.Stream, c.Processor
	o := orderstore.Config{
		Server: orderstore.ServerConfig{
			Name: s.Name, Host: s.Host, Port: s.Port, MaxPayload: int64(s.MaxPayload),
			SystemUser: s.SystemUser, SystemPassword: s.SystemPassword,
			MaxConnections: s.MaxConnections, MaxSubscriptions: s.MaxSubscriptions, AllowPlaintext: s.AllowPlaintext,
			TLS: s.TLS,
		},
		JetStream: orderstore.JetStreamConfig{
			StoreDir: j.StoreDir, MaxFileStore: int64(j.MaxFileStore), MaxMemoryStore: int64(j.MaxMemoryStore),
			DiskHeadroom: int64(j.DiskHeadroom), AllowLowDisk: j.AllowLowDisk,
		},
		Stream: orderstore.StreamConfig{
			Name: st.Name, Subjects: st.Subjects, MaxAge: st.MaxAge.D(), MaxBytes: int64(st.MaxBytes), MaxMsgs: st.MaxMsgs,
			MaxMsgSize: int64(st.MaxMsgSize), Discard: st.Discard, DuplicateWindow: st.DuplicateWindow.D(), Replicas: st.Replicas,
		},
		Processor: orderstore.ProcessorConfig{
			Enabled: p.Enabled, Durable: p.Durable, AckWait: p.AckWait.D(), MaxDeliver: p.MaxDeliver,
			MaxAckPending: p.MaxAckPending, DeadLetterStream: p.DeadLetterStream, DeadLetterMaxAge: p.DeadLetterMaxAge.D(),
			DeadLetterMaxBytes: int64(p.DeadLetterBytes), ProjectionBucket: p.ProjectionBucket, ProjectionMaxBytes: int64(p.ProjectionBytes),
		},
		Admin: orderstore.AdminConfig{Listen: c.Admin.Listen, Token: c.Admin.Token, TLS: c.Admin.TLS,
			AllowedHosts: c.Admin.AllowedHosts, AllowPlaintext: c.Admin.AllowPlaintext},
	}
	o.JetStream.Domain = j.Domain
	cl, ln := c.Cluster, c.LeafNode
	o.Cluster = orderstore.ClusterConfig{Name: cl.Name, Listen: cl.Listen, Routes: cl.Routes, User: cl.User, Password: cl.Password, TLS: cl.TLS}
	o.LeafNode = orderstore.LeafNodeConfig{Listen: ln.Listen, User: ln.User, Password: ln.Password, TLS: ln.TLS,
		ReconnectInterval: ln.ReconnectInterval.D()}
	for _, r := range ln.Remotes {
		o.LeafNode.Remotes = append(o.LeafNode.Remotes, orderstore.LeafRemote{URL: r.URL, User: r.User, Password: r.Password,
			Credentials: r.Credentials, TLS: r.TLS})
	}
	o.Hub = orderstore.HubConfig{Stream: c.Hub.Stream, Edges: c.Hub.Edges}
	def := orderstore.DefaultConfig().Admin
	o.Admin.ReadTimeout, o.Admin.WriteTimeout, o.Admin.IdleTimeout = def.ReadTimeout, def.WriteTimeout, def.IdleTimeout
	// sync_interval from before durability existed: "always" is that
	// mode, a duration the "interval" mode.
	o.JetStream.Durability, o.JetStream.SyncInterval = j.Durability, j.SyncInterval.Interval
	if j.Durability == "" && j.SyncInterval.Always {
		o.JetStream.Durability = orderstore.DurabilityAlways
	}
	for _, u := range s.Users {
		ou := orderstore.User{Name: u.User, Password: u.Password, Nkey: u.Nkey, Role: u.Role,
			Publish: u.Publish.Allow, PublishDeny: u.Publish.Deny, Subscribe: u.Subscribe.Allow, SubscribeDeny: u.Subscribe.Deny}
		if u.PasswordFile != "" && ou.Password == "" {
			ou.Password = "<password_file>" // read by Orderstore; stands in for validation
		}
		o.Server.Users = append(o.Server.Users, ou)
	}
	for _, d := range p.Backoff {
		o.Processor.Backoff = append(o.Processor.Backoff, d.D())
	}
	if c.Admin.TokenFile != "" && o.Admin.Token == "" {
		o.Admin.Token = "<admin.token_file>"
	}
	return o
}

// fromOrderstore is the file form of o (without [log]).
func fromOrderstore(o orderstore.Config) Config {
	s, j, st, p := o.Server, o.JetStream, o.Stream, o.Processor
	c := Config{
		Server: Server{Name: s.Name, Host: s.Host, Port: s.Port, MaxPayload: ByteSize(s.MaxPayload),
			SystemUser: s.SystemUser, SystemPassword: s.SystemPassword},
		JetStream: JetStream{StoreDir: j.StoreDir, MaxFileStore: ByteSize(j.MaxFileStore), MaxMemoryStore: ByteSize(j.MaxMemoryStore),
			Durability: j.Durability, SyncInterval: SyncPolicy{Interval: j.SyncInterval},
			DiskHeadroom: ByteSize(j.DiskHeadroom), AllowLowDisk: j.AllowLowDisk},
		Stream: Stream{Name: st.Name, Subjects: append([]string(nil), st.Subjects...), MaxAge: Duration(st.MaxAge), MaxBytes: ByteSize(st.MaxBytes),
			MaxMsgs: st.MaxMsgs, MaxMsgSize: ByteSize(st.MaxMsgSize), Discard: st.Discard, DuplicateWindow: Duration(st.DuplicateWindow),
			Replicas: st.Replicas},
		Processor: Processor{Enabled: p.Enabled, Durable: p.Durable, AckWait: Duration(p.AckWait), MaxDeliver: p.MaxDeliver,
			MaxAckPending: p.MaxAckPending, DeadLetterStream: p.DeadLetterStream, DeadLetterMaxAge: Duration(p.DeadLetterMaxAge),
			DeadLetterBytes: ByteSize(p.DeadLetterMaxBytes), ProjectionBucket: p.ProjectionBucket, ProjectionBytes: ByteSize(p.ProjectionMaxBytes)},
		Admin: Admin{Listen: o.Admin.Listen, Token: o.Admin.Token, TLS: o.Admin.TLS, AllowedHosts: o.Admin.AllowedHosts,
			AllowPlaintext: o.Admin.AllowPlaintext},
	}
	c.Server.MaxConnections, c.Server.MaxSubscriptions, c.Server.AllowPlaintext = s.MaxConnections, s.MaxSubscriptions, s.AllowPlaintext
	c.Server.TLS = s.TLS
	c.JetStream.Domain = j.Domain
	c.Cluster = Cluster{Name: o.Cluster.Name, Listen: o.Cluster.Listen, Routes: o.Cluster.Routes, User: o.Cluster.User,
		Password: o.Cluster.Password, TLS: o.Cluster.TLS}
	c.LeafNode = LeafNode{Listen: o.LeafNode.Listen, User: o.LeafNode.User, Password: o.LeafNode.Password,
		ReconnectInterval: Duration(o.LeafNode.ReconnectInterval), TLS: o.LeafNode.TLS}
	for _, r := range o.LeafNode.Remotes {
		c.LeafNode.Remotes = append(c.LeafNode.Remotes, LeafRemote{URL: r.URL, User: r.User, Password: r.Password, Credentials: r.Credentials, TLS: r.TLS})
	}
	c.Hub = Hub{Stream: o.Hub.Stream, Edges: o.Hub.Edges}
	for _, u := range s.Users {
		c.Server.Users = append(c.Server.Users, User{User: u.Name, Password: u.Password, Nkey: u.Nkey, Role: u.Role,
			Publish: Subjects{Allow: u.Publish, Deny: u.PublishDeny}, Subscribe: Subjects{Allow: u.Subscribe, Deny: u.SubscribeDeny}})
	}
	for _, d := range p.Backoff {
		c.Processor.Backoff = append(c.Processor.Backoff, Duration(d))
	}
	return c
}

// AdminToken returns the admin bearer token from admin.token or the file
// named by admin.token_file.
func (c Config) AdminToken() (string, error) {
	if c.Admin.TokenFile == "" {
		return c.Admin.Token, nil
	}
	return readSecretFile("admin.token_file", c.Admin.TokenFile)
}

// Redacted is c with every secret replaced by "<redacted>": what Encode
// prints.
func (c Config) Redacted() Config {
	if c.Server.SystemPassword != "" {
		c.Server.SystemPassword = "<redacted>"
	}
	users := make([]User, len(c.Server.Users))
	for i, u := range c.Server.Users {
		if u.Password != "" {
			u.Password = "<redacted>"
		}
		users[i] = u
	}
	c.Server.Users = users
	if c.Admin.Token != "" {
		c.Admin.Token = "<redacted>"
	}
	if c.Cluster.Password != "" {
		c.Cluster.Password = "<redacted>"
	}
	if c.LeafNode.Password != "" {
		c.LeafNode.Password = "<redacted>"
	}
	remotes := make([]LeafRemote, len(c.LeafNode.Remotes))
	for i, r := range c.LeafNode.Remotes {
		if r.Password != "" {
			r.Password = "<redacted>"
		}
		remotes[i] = r
	}
	c.LeafNode.Remotes = remotes
	return c
}

// Encode writes c as TOML: the effective configuration `check -print` shows.
// Secrets are masked.
func (c Config) Encode() ([]byte, error) {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c.Redacted()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// SecretFileWarnings names each file holding a secret that users other
// than its owner and group can read: the configuration at path (when it
// holds a password or token), admin.token_file and every password_file.
// `check` and `run` print them at every start.
func (c Config) SecretFileWarnings(path string) []string {
	var w []string
	check := func(what, file string) {
		if file == "" {
			return
		}
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm()&0o004 == 0 {
			return
		}
		w = append(w, fmt.Sprintf("%s %q holds a secret and is readable by every user (mode %04o): chmod o-r %q (e.g. 0600, or 0640 owned by the service group)", what, file, fi.Mode().Perm(), file))
	}
	holds := c.Server.SystemPassword != "" || c.Admin.Token != "" || c.Cluster.Password != "" || c.LeafNode.Password != ""
	for _, r := range c.LeafNode.Remotes {
		holds = holds || r.Password != ""
	}
	for _, u := range c.Server.Users {
		holds = holds || u.Password != ""
	}
	if holds {
		check("config", path)
	}
	check("admin.token_file", c.Admin.TokenFile)
	for i, u := range c.Server.Users {
		check(fmt.Sprintf("server.users[%d].password_file", i), u.PasswordFile)
	}
	return w
}
