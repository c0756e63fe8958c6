package orderstore

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/processor"
)

// FieldError is one problem with one field.
type FieldError struct {
	// Field is the Go path, e.g. "Stream.MaxAge" ("" for what only a config file has); Key is the
	// same field in the TOML file, e.g. "stream.max_age", when the problem was found in a file.
	Field, Key string
	// Value is the offending value, formatted; empty if none applies.
	Value  string
	Reason string
	// Unknown marks the problem that lists every unknown key of a file (Key holds them,
	// comma-separated; Value the same with a suggestion after each key close to a known one).
	Unknown bool
}

// Error names the problem by its Go field, or by its TOML key when it has no field (a file's).
func (e *FieldError) Error() string {
	name := cmp.Or(e.Field, e.Key)
	if e.Unknown {
		return "unknown keys: " + cmp.Or(e.Value, e.Key) + " (hint: check the spelling against orderstore.example.toml)"
	}
	if e.Value != "" {
		return fmt.Sprintf("%s = %s: %s", name, e.Value, e.Reason)
	}
	return fmt.Sprintf("%s: %s", name, e.Reason)
}

// FileError is a file the configuration names (a JSON Schema, a TLS
// certificate or key) that does not load: a problem of the configuration,
// as a [ValidationError] is, found by [Config.CheckFiles] and [Start].
type FileError struct{ Err error }

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// ValidationError is every problem found at once: by [Config.Validate] (named by Go field), or in a
// config file (File, named by TOML key). It is orderstore's one problem-list error.
type ValidationError struct {
	// File is the config file the problems are in; "" for a Config built in Go.
	File     string
	Problems []*FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.File != "" {
		fmt.Fprintf(&b, "config %q: %d problem", e.File, len(e.Problems))
	} else {
		fmt.Fprintf(&b, "config: %d problem", len(e.Problems))
	}
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		q := *p
		if e.File != "" {
			q.Field = "" // a file's reader knows its keys, not the Go fields
		}
		b.WriteString("\n  " + q.Error())
	}
	return b.String()
}

// Keys returns the TOML key of every problem, in order.
func (e *ValidationError) Keys() []string {
	keys := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		keys[i] = p.Key
	}
	return keys
}

// Validate reports every problem of c at once as a *[ValidationError],
// each naming its field; nil if c is valid.
func (c Config) Validate() error {
	return problems(c.validateServer, c.validateJetStream, c.validateStream, c.validateScaleOut,
		c.validateProcessor, c.validateAdmin, c.validateValidation)
}

// problems runs checks and returns what they found as a *[ValidationError]; nil if nothing.
func problems(checks ...func(badFunc)) error {
	var errs []*FieldError
	bad := func(field string, value any, format string, args ...any) {
		v := ""
		switch x := value.(type) {
		case nil:
		case string:
			v = strconv.Quote(x)
		case time.Duration:
			v = strconv.Quote(duration.Format(x))
		case size:
			v = strconv.Quote(bytesize.Format(int64(x)))
		default:
			v = fmt.Sprint(x)
		}
		errs = append(errs, &FieldError{Field: field, Value: v, Reason: fmt.Sprintf(format, args...)})
	}
	for _, check := range checks {
		check(bad)
	}
	if len(errs) > 0 {
		return &ValidationError{Problems: errs}
	}
	return nil
}

// badFunc records a Validate problem: the Go field, the offending value (nil: none), the reason.
type badFunc func(field string, value any, format string, args ...any)

func (bad badFunc) when(cond bool, field string, value any, format string, args ...any) {
	if cond {
		bad(field, value, format, args...)
	}
}

func (c Config) validateServer(bad badFunc) {
	s := c.Server
	bad.when(s.Name == "" || strings.ContainsAny(s.Name, " \t\n"), "Server.Name", s.Name, "must be non-empty and without spaces")
	if s.Host == "" {
		bad("Server.Host", s.Host, "must be set (e.g. \"127.0.0.1\")")
	} else if net.ParseIP(s.Host) == nil && s.Host != "localhost" {
		bad("Server.Host", s.Host, "must be an IP address or \"localhost\"")
	}
	bad.when(s.Port < -1 || s.Port > 65535, "Server.Port", s.Port, "must be 0..65535, or -1 for a random port")
	bad.when(s.MaxPayload <= 0 || s.MaxPayload > 64<<20, "Server.MaxPayload", size(s.MaxPayload), "must be between 1B and 64MiB")
	bad.when((s.SystemUser == "") != (s.SystemPassword == ""), "Server.SystemUser", s.SystemUser, "system_user and system_password go together")
	seen := map[string]bool{}
	for i, u := range s.Users {
		field := fmt.Sprintf("Server.Users[%d]", i)
		switch {
		case u.Name == "":
			bad(field+".Name", nil, "is required")
		case len(u.Name) > 128 || strings.IndexFunc(u.Name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			bad(field+".Name", clipValue(u.Name), "must be at most 128 characters without spaces")
		case seen[u.Name] || u.Name == s.SystemUser || natsconf.ReservedUser(u.Name):
			bad(field+".Name", u.Name, "is defined twice or reserved")
		}
		seen[u.Name] = true
		switch {
		case u.Password == "" && u.Nkey == "":
			bad(field+".Password", nil, "set password (or password_file) or nkey")
		case u.Password != "" && u.Nkey != "":
			bad(field+".Nkey", nil, "set password or nkey, not both")
		case u.Nkey != "" && strings.HasPrefix(u.Nkey, "S"):
			bad(field+".Nkey", nil, "holds a private seed (\"S...\"), not the public key: rotate that key (it is in the config file now) and put its public key (\"U...\", `nats auth nkey show FILE`) here")
		case u.Nkey != "" && !nkeys.IsValidPublicUserKey(u.Nkey):
			bad(field+".Nkey", nil, "is not a public user nkey (\"U...\", from `nats auth nkey gen user --output FILE`, then `nats auth nkey show FILE`)")
		}
		lists := len(u.Publish)+len(u.Subscribe)+len(u.PublishDeny)+len(u.SubscribeDeny) > 0
		switch u.Role {
		case RoleProducer, RoleReader, RoleAdmin:
			bad.when(lists, field+".Role", u.Role, "set a role or publish/subscribe lists, not both")
		case "":
			bad.when(!lists, field+".Role", nil, "set role = \"producer\", \"reader\" or \"admin\" (or explicit publish/subscribe lists)")
		default:
			bad(field+".Role", clipValue(u.Role), "must be \"producer\", \"reader\" or \"admin\"")
		}
		for _, l := range []struct {
			name string
			subj []string
		}{{"Publish", u.Publish}, {"Subscribe", u.Subscribe}, {"PublishDeny", u.PublishDeny}, {"SubscribeDeny", u.SubscribeDeny}} {
			for k, subj := range l.subj {
				bad.when(!validSubject(subj), fmt.Sprintf("%s.%s[%d]", field, l.name, k), clipValue(subj), "is not a valid NATS subject")
			}
		}
	}
	bad.when(s.Host != "" && !isLoopback(s.Host) && len(s.Users) == 0, "Server.Host", s.Host, "is not a loopback address and no users are configured: anyone on the network could publish and read orders; add users, or bind 127.0.0.1")
	bad.when(s.MaxConnections < 1 || s.MaxConnections > 1<<20, "Server.MaxConnections", s.MaxConnections, "must be between 1 and 1048576 (keep it well below the process's file descriptor limit)")
	bad.when(s.MaxSubscriptions < 0, "Server.MaxSubscriptions", s.MaxSubscriptions, "must be zero (unlimited) or positive")
	validTLS(bad, "Server.TLS", s.TLS, true)
}

// validTLS checks a listener's [TLSConfig]; client says whether it may verify client certificates.
func validTLS(bad badFunc, field string, t TLSConfig, client bool) {
	validTLSFiles(bad, field, t)
	bad.when(!client && (t.CAFile != "" || t.Verify), field+".CAFile", nil, "client certificates (ca_file, verify) are for the client port only")
	bad.when((t.Verify || t.CAFile != "") && !t.Enabled(), field+".CAFile", nil, "needs cert_file and key_file: client certificates are checked only over TLS")
}

func (c Config) validateJetStream(bad badFunc) {
	j := c.JetStream
	bad.when(j.StoreDir == "", "JetStream.StoreDir", j.StoreDir, "must be set")
	bad.when(j.MaxFileStore <= 0, "JetStream.MaxFileStore", size(j.MaxFileStore), "must be a positive size (an explicit limit keeps JetStream from sizing itself from free disk)")
	bad.when(j.MaxMemoryStore <= 0, "JetStream.MaxMemoryStore", size(j.MaxMemoryStore), "must be a positive size")
	bad.when(j.DiskHeadroom < 0, "JetStream.DiskHeadroom", size(j.DiskHeadroom), "must be zero or positive")
	switch {
	case j.Cipher != "" && j.Cipher != CipherChaCha && j.Cipher != CipherAES:
		bad("JetStream.Cipher", j.Cipher, "must be %q or %q", CipherChaCha, CipherAES)
	case j.EncryptionKey == "" && j.Cipher != "":
		bad("JetStream.Cipher", j.Cipher, "needs an encryption key (jetstream.encryption_key_file)")
	case j.EncryptionKey != "" && len(j.EncryptionKey) < MinEncryptionKeyLen:
		bad("JetStream.EncryptionKey", nil, "is %d bytes, want at least %d (make one with `orderstore key generate FILE`)", len(j.EncryptionKey), MinEncryptionKeyLen)
	}
	switch mode := c.DurabilityMode(); {
	case j.Durability != "" && j.Durability != DurabilityGroupCommit && j.Durability != DurabilityAlways && j.Durability != DurabilityInterval:
		bad("JetStream.Durability", j.Durability, "must be \"group-commit\", \"always\" or \"interval\"")
	case j.SyncInterval < 0:
		bad("JetStream.SyncInterval", j.SyncInterval, "must be a positive duration (with durability \"interval\") or 0")
	case mode == DurabilityInterval && j.SyncInterval == 0:
		bad("JetStream.SyncInterval", nil, "durability \"interval\" needs a sync_interval (e.g. \"1s\")")
	case mode != DurabilityInterval && j.SyncInterval > 0:
		bad("JetStream.SyncInterval", j.SyncInterval, "applies to durability \"interval\" only (durability is %q)", mode)
	case mode == DurabilityGroupCommit && c.Cluster.Enabled():
		bad("JetStream.Durability", j.Durability, "group-commit is for a single node: in a cluster the stream leader's quorum acks events; use \"always\"")
	}
}

func (c Config) validateStream(bad badFunc) {
	s, j, st := c.Server, c.JetStream, c.Stream
	bad.when(!validName(st.Name), "Stream.Name", st.Name, "must be non-empty and may not contain spaces, '.', '*', '>', '/' or '\\'")
	bad.when(len(st.Subjects) == 0, "Stream.Subjects", nil, "must list at least one subject (e.g. [\"orders.>\"])")
	for i, subj := range st.Subjects {
		bad.when(!validSubject(subj), fmt.Sprintf("Stream.Subjects[%d]", i), subj, "is not a valid NATS subject")
	}
	bad.when(st.MaxAge < 0, "Stream.MaxAge", st.MaxAge, "must be zero (forever) or positive")
	bad.when(st.MaxBytes == 0 || st.MaxBytes < -1, "Stream.MaxBytes", size(st.MaxBytes), "must be a positive size, or -1 for unlimited")
	bad.when(j.MaxFileStore > 0 && st.MaxBytes > j.MaxFileStore, "Stream.MaxBytes", size(st.MaxBytes), "exceeds jetstream.max_file_store %s: lower max_bytes or raise max_file_store", bytesize.Format(j.MaxFileStore))
	bad.when(st.MaxMsgs == 0 || st.MaxMsgs < -1, "Stream.MaxMsgs", st.MaxMsgs, "must be positive, or -1 for unlimited")
	if st.MaxMsgSize <= 0 || st.MaxMsgSize > 64<<20 {
		bad("Stream.MaxMsgSize", size(st.MaxMsgSize), "must be a positive size up to 64MiB")
	} else if s.MaxPayload > 0 && st.MaxMsgSize > s.MaxPayload {
		bad("Stream.MaxMsgSize", size(st.MaxMsgSize), "exceeds server.max_payload %s: clients could never publish such an event", bytesize.Format(s.MaxPayload))
	}
	bad.when(st.Discard != "old" && st.Discard != "new", "Stream.Discard", st.Discard, "must be \"old\" or \"new\"")
	if st.DuplicateWindow <= 0 {
		bad("Stream.DuplicateWindow", st.DuplicateWindow, "must be positive")
	} else if st.MaxAge > 0 && st.DuplicateWindow > st.MaxAge {
		bad("Stream.DuplicateWindow", st.DuplicateWindow, "exceeds stream.max_age %s", duration.Format(st.MaxAge))
	}
	switch {
	case st.Replicas != 1 && st.Replicas != 3 && st.Replicas != 5:
		bad("Stream.Replicas", st.Replicas, "must be 1, 3 or 5")
	case st.Replicas > 1 && !c.Cluster.Enabled():
		bad("Stream.Replicas", st.Replicas, "needs a cluster: set [cluster] name, listen and routes on every node (or replicas = 1 on a single host)")
	}
}

func (c Config) validateProcessor(bad badFunc) {
	j, st, p := c.JetStream, c.Stream, c.Processor
	bad.when(!validName(p.Durable), "Processor.Durable", p.Durable, "must be non-empty and may not contain spaces, '.', '*', '>', '/' or '\\'")
	bad.when(p.AckWait <= 0, "Processor.AckWait", p.AckWait, "must be positive")
	bad.when(p.MaxDeliver < 1, "Processor.MaxDeliver", p.MaxDeliver, "must be at least 1 (a finite number, so a failing event is dead-lettered instead of retried forever)")
	for i, d := range p.Backoff {
		bad.when(d <= 0, fmt.Sprintf("Processor.Backoff[%d]", i), d, "must be positive")
	}
	bad.when(p.MaxDeliver >= 1 && len(p.Backoff) >= p.MaxDeliver, "Processor.Backoff", fmt.Sprintf("%d entries", len(p.Backoff)), "must have fewer entries than processor.max_deliver (%d)", p.MaxDeliver)
	bad.when(p.MaxAckPending < 1, "Processor.MaxAckPending", p.MaxAckPending, "must be at least 1")
	bad.when(p.MaxAckPending > nats.DefaultSubPendingMsgsLimit, "Processor.MaxAckPending", p.MaxAckPending, "must be at most %d, what the processor's client (nats.go) holds of delivered events: it drops the rest, each a delivery spent (hint: lower it; the default is 8000)", nats.DefaultSubPendingMsgsLimit)
	if !validName(p.DeadLetterStream) {
		bad("Processor.DeadLetterStream", p.DeadLetterStream, "must be a valid stream name")
	} else if p.DeadLetterStream == st.Name {
		bad("Processor.DeadLetterStream", p.DeadLetterStream, "must differ from stream.name")
	}
	bad.when(p.DeadLetterMaxAge < 0, "Processor.DeadLetterMaxAge", p.DeadLetterMaxAge, "must be zero (forever) or positive")
	bad.when(p.DeadLetterMaxBytes <= 0, "Processor.DeadLetterMaxBytes", size(p.DeadLetterMaxBytes), "must be a positive size")
	bad.when(p.ProjectionMaxBytes <= 0, "Processor.ProjectionMaxBytes", size(p.ProjectionMaxBytes), "must be a positive size")
	bad.when(p.HistoryMaxBytes < 0, "Processor.HistoryMaxBytes", size(p.HistoryMaxBytes), "must be a positive size, or 0 for the default")
	bad.when(len(p.StaleAfter) > orderindex.MaxStaleStatuses, "Processor.StaleAfter", fmt.Sprintf("%d statuses", len(p.StaleAfter)), "may name at most %d statuses (each is a metric series)", orderindex.MaxStaleStatuses)
	for _, status := range slices.Sorted(maps.Keys(p.StaleAfter)) {
		switch d := p.StaleAfter[status]; {
		case status == "" || len(status) > processor.MaxStatusLen || !utf8.ValidString(status):
			bad("Processor.StaleAfter", fmt.Sprintf("%.40q", status), "a status is 1 to %d bytes of UTF-8", processor.MaxStatusLen)
		case d <= 0:
			bad("Processor.StaleAfter", fmt.Sprintf("%s = %s", status, d), "must be a positive duration")
		}
	}
	hist := max(p.HistoryMaxBytes, 0) // the default takes what is left
	if st.MaxBytes > 0 && p.DeadLetterMaxBytes > 0 && p.ProjectionMaxBytes > 0 && j.MaxFileStore > 0 && st.MaxBytes <= j.MaxFileStore {
		sum := st.MaxBytes + p.DeadLetterMaxBytes + p.ProjectionMaxBytes + hist
		if c.Hub.Enabled() {
			sum += st.MaxBytes // the aggregate stream has the stream's limits
		}
		if sum > j.MaxFileStore {
			histTerm := ""
			if hist > 0 {
				histTerm = " + processor.history_max_bytes " + bytesize.Format(hist)
			}
			bad("Stream.MaxBytes", size(st.MaxBytes), "stream.max_bytes (twice on a hub: its aggregate stream has the same limit) + processor.dead_letter_max_bytes %s + processor.projection_max_bytes %s%s = %s exceeds jetstream.max_file_store %s: lower them or raise max_file_store",
				bytesize.Format(p.DeadLetterMaxBytes), bytesize.Format(p.ProjectionMaxBytes), histTerm, bytesize.Format(sum), bytesize.Format(j.MaxFileStore))
		}
	} else if st.MaxBytes == -1 && j.MaxFileStore > 0 && p.DeadLetterMaxBytes+p.ProjectionMaxBytes+hist >= j.MaxFileStore {
		bad("JetStream.MaxFileStore", size(j.MaxFileStore), "leaves no room for the stream next to processor.dead_letter_max_bytes, projection_max_bytes and history_max_bytes")
	}
	if !validBucket(p.ProjectionBucket) {
		bad("Processor.ProjectionBucket", p.ProjectionBucket, "must be a valid KV bucket name (letters, digits, '-' and '_')")
	} else if b := p.HistoryBucket(); !validBucket(b) {
		bad("Processor.ProjectionBucket", p.ProjectionBucket, "is too long: its history bucket %q must be a valid KV bucket name", b)
	}
}

func (c Config) validateValidation(bad badFunc) {
	v := c.Validation
	bad.when(!slices.Contains([]string{"", "accept", "reject"}, v.UnknownTypes), "Validation.UnknownTypes", v.UnknownTypes, `must be "accept" or "reject"`)
	for _, typ := range slices.Sorted(maps.Keys(v.Schemas)) {
		if typ == "" || strings.ContainsAny(typ, ".*> \t") {
			bad("Validation.Schemas", typ, "is not an event type: the last token of a subject (\"created\" for orders.created), without '.', '*', '>' or spaces")
		} else if v.Schemas[typ] == "" {
			bad("Validation.Schemas", typ, "names no schema file")
		}
	}
}

func (c Config) validateAdmin(bad badFunc) {
	a := c.Admin
	if a.Listen != "" {
		host, port, err := net.SplitHostPort(a.Listen)
		if err != nil {
			bad("Admin.Listen", a.Listen, "must be host:port (e.g. \"127.0.0.1:8222\")")
		} else if _, perr := strconv.Atoi(port); perr != nil {
			bad("Admin.Listen", a.Listen, "port %q is not a number", port)
		} else if !isLoopback(host) && a.Token == "" {
			bad("Admin.Listen", a.Listen, "is not a loopback address and no admin token is set: set a token, or bind 127.0.0.1")
		}
	}
	bad.when(a.Token != "" && len(a.Token) < minTokenLen, "Admin.Token", nil, "is %d characters, want at least %d (make one with `openssl rand -hex 24`)", len(a.Token), minTokenLen)
	validTLS(bad, "Admin.TLS", a.TLS, false)
	for i, h := range a.AllowedHosts {
		bad.when(h == "" || strings.ContainsAny(h, "/ @?#") || len(h) > 253, fmt.Sprintf("Admin.AllowedHosts[%d]", i), clipValue(h), "must be a host name as a browser sends it (e.g. \"orders.example.com\" or \"orders.example.com:8222\")")
	}
	bad.when(a.ReadTimeout < 0 || a.WriteTimeout < 0 || a.IdleTimeout < 0, "Admin.ReadTimeout", nil, "timeouts must not be negative")
}

// validateScaleOut checks [cluster], [leafnode], [hub] and the domain.
func (c Config) validateScaleOut(bad badFunc) {
	cl := c.Cluster
	if cl.Enabled() {
		bad.when(!validName(cl.Name), "Cluster.Name", clipValue(cl.Name), "may not contain spaces, '.', '*', '>', '/' or '\\'")
		bad.when(c.Server.Name == "" || c.Server.Name == DefaultConfig().Server.Name, "Server.Name", c.Server.Name, "must be set to this node's own name in a cluster (unique among the nodes, e.g. \"orders-1\")")
		if _, err := hostOf(cl.Listen); err != nil {
			bad("Cluster.Listen", clipValue(cl.Listen), "must be host:port (e.g. \"10.0.0.1:6222\")")
		} else if cl.User == "" && !(cl.TLS.Enabled() && cl.TLS.Verify) {
			bad("Cluster.Listen", cl.Listen, "needs route credentials, also on loopback: any local process could join as a node and read every event; set cluster.user and cluster.password (the same on every node), or [cluster.tls] with ca_file and verify")
		}
		bad.when(len(cl.Routes) == 0, "Cluster.Routes", nil, "must list the nodes' route URLs (e.g. [\"nats-route://10.0.0.1:6222\", ...]; listing this node is fine)")
		for i, r := range cl.Routes {
			if u, err := url.Parse(r); err != nil || (u.Scheme != "nats-route" && u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
				bad(fmt.Sprintf("Cluster.Routes[%d]", i), nil, "must be a route URL such as \"nats-route://10.0.0.1:6222\"") // not shown: it may hold a password
			}
		}
		bad.when((cl.User == "") != (cl.Password == ""), "Cluster.User", cl.User, "cluster.user and cluster.password go together")
		validTLSFiles(bad, "Cluster.TLS", cl.TLS)
	}
	d := c.JetStream.Domain
	bad.when(d != "" && !validDomain(d), "JetStream.Domain", clipValue(d), "must be letters, digits, '-' and '_' (no '.', '*', '>' or spaces)")
	ln := c.LeafNode
	if ln.Listen != "" {
		host, err := hostOf(ln.Listen)
		if err != nil {
			bad("LeafNode.Listen", clipValue(ln.Listen), "must be host:port (e.g. \"0.0.0.0:7422\")")
		} else if !isLoopback(host) && ln.User == "" && len(ln.Users) == 0 {
			bad("LeafNode.Listen", ln.Listen, "is not a loopback address and no leafnode.user is set: anyone could join the hub; set [[leafnode.users]] (each edge's own), or leafnode.user and leafnode.password, or bind 127.0.0.1")
		} else if ln.User == "" && len(ln.Users) == 0 {
			bad("LeafNode.Listen", ln.Listen, "needs [[leafnode.users]] (each edge's own user and password) or leafnode.user and leafnode.password, also on loopback: edges sign in with them, and what may cross the link is bound to that user")
		}
	}
	bad.when((ln.User == "") != (ln.Password == ""), "LeafNode.User", ln.User, "leafnode.user and leafnode.password go together")
	taken, own := map[string]bool{ln.User: true, c.Server.SystemUser: true}, map[string]bool{}
	for _, u := range c.Server.Users {
		taken[u.Name] = true
	}
	for i, u := range ln.Users {
		f := fmt.Sprintf("LeafNode.Users[%d]", i)
		bad.when(u.User == "" || u.Password == "", f+".User", u.User, "needs user and password: what edge %q presents in its [[leafnode.remotes]]", u.Edge)
		bad.when(u.User != "" && taken[u.User], f+".User", u.User, "is defined twice: each edge's leaf user needs a name no other user has")
		bad.when(!slices.Contains(c.Hub.Edges, u.Edge), f+".Edge", clipValue(u.Edge), "must be one of hub.edges %q: the edge this user signs in as", c.Hub.Edges)
		taken[u.User], own[u.Edge] = true, true
	}
	for i, e := range c.Hub.Edges {
		bad.when(len(ln.Users) > 0 && !own[e], fmt.Sprintf("Hub.Edges[%d]", i), e, "has no user in [[leafnode.users]]: with them every edge needs its own (edge = %q)", e)
	}
	bad.when(ln.ReconnectInterval < 0, "LeafNode.ReconnectInterval", ln.ReconnectInterval, "must be positive, or 0 for 1s")
	validTLS(bad, "LeafNode.TLS", ln.TLS, true) // a listener: ca_file verifies the edges' certificates
	for i, r := range ln.Remotes {
		f := fmt.Sprintf("LeafNode.Remotes[%d]", i)
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "nats-leaf" && u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			bad(f+".URL", nil, "must be a leaf URL such as \"nats-leaf://hub.example.com:7422\"") // not shown: it may hold a password
		}
		bad.when(r.Password != "" && r.User == "", f+".User", nil, "a password needs a user")
		validTLSFiles(bad, f+".TLS", r.TLS)
	}
	bad.when(len(ln.Remotes) > 0 && c.JetStream.Domain == "", "JetStream.Domain", nil, "an edge (leafnode.remotes) needs its own domain, e.g. \"edge-1\", which the hub lists in hub.edges")
	h := c.Hub
	if h.Enabled() || len(h.Edges) > 0 {
		if !validName(h.Stream) {
			bad("Hub.Stream", clipValue(h.Stream), "must be a stream name, e.g. \"ORDER_EVENTS_ALL\"")
		} else if h.Stream == c.Stream.Name || h.Stream == c.Processor.DeadLetterStream {
			bad("Hub.Stream", h.Stream, "must differ from stream.name and processor.dead_letter_stream")
		}
		bad.when(len(h.Edges) == 0, "Hub.Edges", nil, "must list the edges' domains (their jetstream.domain)")
		for i, e := range h.Edges {
			bad.when(!validDomain(e) || slices.Index(h.Edges, e) < i || e == d, fmt.Sprintf("Hub.Edges[%d]", i), clipValue(e), "must be a domain name, listed once, not this node's own")
		}
		bad.when(ln.Listen == "", "LeafNode.Listen", nil, "a hub needs a leaf listener for its edges (e.g. \"0.0.0.0:7422\")")
	}
}

// validTLSFiles checks a TLS table that may carry client-certificate keys.
func validTLSFiles(bad badFunc, field string, t TLSConfig) {
	bad.when((t.CertFile == "") != (t.KeyFile == ""), field+".CertFile", nil, "cert_file and key_file go together")
	bad.when(t.Verify && t.CAFile == "", field+".Verify", true, "needs ca_file: the CAs that sign the other side's certificates")
	bad.when(t.MinVersion != "" && t.MinVersion != "1.2" && t.MinVersion != "1.3", field+".MinVersion", clipValue(t.MinVersion), "must be \"1.2\" or \"1.3\"")
}

func hostOf(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err == nil {
		_, err = strconv.Atoi(port)
	}
	return host, err
}

func validDomain(s string) bool { return len(s) <= 64 && validBucket(s) }

// wordRune is a letter, digit, '-' or '_': what bucket and domain names take.
func wordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// minTokenLen is the shortest admin token accepted.
const minTokenLen = 16

// clipValue shortens a value before a message echoes it.
func clipValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// size marks a byte count for Validate's messages.
type size int64

func isLoopback(host string) bool { return host == "localhost" || net.ParseIP(host).IsLoopback() }

func validName(s string) bool {
	return s != "" && len(s) <= 255 && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

func validBucket(s string) bool {
	return s != "" && len(s) <= 255 && strings.IndexFunc(s, func(r rune) bool { return !wordRune(r) }) < 0
}

func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		// No empty token; '>' only as the last token, '*' only as a token.
		if t == "" || strings.Contains(t, ">") && (t != ">" || i != len(toks)-1) || strings.Contains(t, "*") && t != "*" {
			return false
		}
	}
	return true
}
