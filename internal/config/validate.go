package config

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Validate reports every problem of an already decoded Config at once.
func (c Config) Validate() error {
	if l := c.validate(); len(l) > 0 {
		return &Errors{Name: "<config>", List: l}
	}
	return nil
}

func (c Config) validate() []*Error {
	var errs []*Error
	bad := func(key string, value any, format string, args ...any) {
		v := ""
		switch x := value.(type) {
		case nil:
		case string:
			v = strconv.Quote(x)
		case fmt.Stringer:
			v = strconv.Quote(x.String())
		default:
			v = fmt.Sprint(x)
		}
		errs = append(errs, &Error{Key: key, Value: v, Reason: fmt.Sprintf(format, args...)})
	}

	// [server]
	s := c.Server
	if s.Name == "" || strings.ContainsAny(s.Name, " \t\n") {
		bad("server.name", s.Name, "must be non-empty and without spaces")
	}
	if s.Host == "" {
		bad("server.host", s.Host, "must be set (e.g. \"127.0.0.1\")")
	} else if net.ParseIP(s.Host) == nil && s.Host != "localhost" {
		bad("server.host", s.Host, "must be an IP address or \"localhost\"")
	}
	if s.Port < -1 || s.Port > 65535 {
		bad("server.port", s.Port, "must be 0..65535, or -1 for a random port")
	}
	if s.MaxPayload <= 0 || s.MaxPayload > 64<<20 {
		bad("server.max_payload", s.MaxPayload, "must be between 1B and 64MiB")
	}
	if (s.SystemUser == "") != (s.SystemPassword == "") {
		bad("server.system_user", s.SystemUser, "system_user and system_password go together")
	}
	seen := map[string]bool{}
	for i, u := range s.Users {
		key := fmt.Sprintf("server.users[%d]", i)
		if u.User == "" || u.Password == "" {
			bad(key, u.User, "needs user and password")
		}
		if seen[u.User] || (u.User != "" && u.User == s.SystemUser) {
			bad(key+".user", u.User, "is defined twice")
		}
		seen[u.User] = true
	}
	if s.Host != "" && !isLoopback(s.Host) && len(s.Users) == 0 {
		bad("server.host", s.Host, "is not a loopback address and no [[server.users]] are configured: anyone on the network could publish and read orders; add users, or bind 127.0.0.1")
	}

	// [jetstream]
	j := c.JetStream
	if j.StoreDir == "" {
		bad("jetstream.store_dir", j.StoreDir, "must be set")
	}
	if j.MaxFileStore <= 0 {
		bad("jetstream.max_file_store", j.MaxFileStore, "must be a positive size (an explicit limit keeps JetStream from sizing itself from free disk)")
	}
	if j.MaxMemoryStore <= 0 {
		bad("jetstream.max_memory_store", j.MaxMemoryStore, "must be a positive size")
	}
	if j.DiskHeadroom < 0 {
		bad("jetstream.disk_headroom", j.DiskHeadroom, "must be zero or positive")
	}
	if !j.SyncInterval.Always && j.SyncInterval.Interval <= 0 {
		bad("jetstream.sync_interval", j.SyncInterval, "must be \"always\" or a positive duration")
	}

	// [stream]
	st := c.Stream
	if !validName(st.Name) {
		bad("stream.name", st.Name, "must be non-empty and may not contain spaces, '.', '*', '>', '/' or '\\'")
	}
	if len(st.Subjects) == 0 {
		bad("stream.subjects", nil, "must list at least one subject (e.g. [\"orders.>\"])")
	}
	for i, subj := range st.Subjects {
		if !validSubject(subj) {
			bad(fmt.Sprintf("stream.subjects[%d]", i), subj, "is not a valid NATS subject")
		}
	}
	if st.MaxAge < 0 {
		bad("stream.max_age", st.MaxAge, "must be zero (forever) or positive")
	}
	if st.MaxBytes == 0 || st.MaxBytes < -1 {
		bad("stream.max_bytes", st.MaxBytes, "must be a positive size, or \"-1\" for unlimited")
	}
	if j.MaxFileStore > 0 && st.MaxBytes > j.MaxFileStore {
		bad("stream.max_bytes", st.MaxBytes, "exceeds jetstream.max_file_store %s: lower max_bytes or raise max_file_store", j.MaxFileStore)
	}
	if st.MaxMsgs == 0 || st.MaxMsgs < -1 {
		bad("stream.max_msgs", st.MaxMsgs, "must be positive, or -1 for unlimited")
	}
	if st.MaxMsgSize <= 0 {
		bad("stream.max_msg_size", st.MaxMsgSize, "must be a positive size")
	} else if s.MaxPayload > 0 && st.MaxMsgSize > s.MaxPayload {
		bad("stream.max_msg_size", st.MaxMsgSize, "exceeds server.max_payload %s: clients could never publish such an event", s.MaxPayload)
	}
	if st.Discard != "old" && st.Discard != "new" {
		bad("stream.discard", st.Discard, "must be \"old\" or \"new\"")
	}
	if st.DuplicateWindow <= 0 {
		bad("stream.duplicate_window", st.DuplicateWindow, "must be positive")
	} else if st.MaxAge > 0 && st.DuplicateWindow > st.MaxAge {
		bad("stream.duplicate_window", st.DuplicateWindow, "exceeds stream.max_age %s", st.MaxAge)
	}
	if st.Replicas != 1 {
		bad("stream.replicas", st.Replicas, "must be 1 on a single host (replicas 3 needs a NATS cluster)")
	}

	// [processor]
	p := c.Processor
	if !validName(p.Durable) {
		bad("processor.durable", p.Durable, "must be non-empty and may not contain spaces, '.', '*', '>', '/' or '\\'")
	}
	if p.AckWait <= 0 {
		bad("processor.ack_wait", p.AckWait, "must be positive")
	}
	if p.MaxDeliver < 1 {
		bad("processor.max_deliver", p.MaxDeliver, "must be at least 1 (a finite number, so a failing event is dead-lettered instead of retried forever)")
	}
	for i, d := range p.Backoff {
		if d <= 0 {
			bad(fmt.Sprintf("processor.backoff[%d]", i), d, "must be positive")
		}
	}
	if p.MaxDeliver >= 1 && len(p.Backoff) >= p.MaxDeliver {
		bad("processor.backoff", fmt.Sprintf("%d entries", len(p.Backoff)), "must have fewer entries than processor.max_deliver (%d)", p.MaxDeliver)
	}
	if p.MaxAckPending < 1 {
		bad("processor.max_ack_pending", p.MaxAckPending, "must be at least 1")
	}
	if !validName(p.DeadLetterStream) {
		bad("processor.dead_letter_stream", p.DeadLetterStream, "must be a valid stream name")
	} else if p.DeadLetterStream == st.Name {
		bad("processor.dead_letter_stream", p.DeadLetterStream, "must differ from stream.name")
	}
	if p.DeadLetterMaxAge < 0 {
		bad("processor.dead_letter_max_age", p.DeadLetterMaxAge, "must be zero (forever) or positive")
	}
	if p.ProjectionBucket == "" || strings.ContainsAny(p.ProjectionBucket, " .*>/\\") {
		bad("processor.projection_bucket", p.ProjectionBucket, "must be a valid KV bucket name (letters, digits, '-' and '_')")
	}

	// [admin]
	a := c.Admin
	if a.Listen != "" {
		host, port, err := net.SplitHostPort(a.Listen)
		if err != nil {
			bad("admin.listen", a.Listen, "must be host:port (e.g. \"127.0.0.1:8222\")")
		} else if _, perr := strconv.Atoi(port); perr != nil {
			bad("admin.listen", a.Listen, "port %q is not a number", port)
		} else if !isLoopback(host) && a.Token == "" && a.TokenFile == "" {
			bad("admin.listen", a.Listen, "is not a loopback address and no admin.token or admin.token_file is set: set a token, or bind 127.0.0.1")
		}
	}
	if a.Token != "" && a.TokenFile != "" {
		bad("admin.token", nil, "set admin.token or admin.token_file, not both")
	}

	// [log]
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

// AdminToken returns the admin bearer token from admin.token or the file
// named by admin.token_file.
func (c Config) AdminToken() (string, error) {
	if c.Admin.TokenFile == "" {
		return c.Admin.Token, nil
	}
	b, err := os.ReadFile(c.Admin.TokenFile)
	if err != nil {
		return "", fmt.Errorf("admin.token_file %q: %w", c.Admin.TokenFile, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("admin.token_file %q is empty", c.Admin.TokenFile)
	}
	return t, nil
}

// SyncEvery returns the fsync interval to hand to the server: zero means
// fsync before every ack.
func (j JetStream) SyncEvery() time.Duration {
	if j.SyncInterval.Always {
		return 0
	}
	return j.SyncInterval.Interval
}

// Encode writes c as TOML: the effective configuration `check -print` shows.
// Secrets are masked.
func (c Config) Encode() ([]byte, error) {
	if c.Server.SystemPassword != "" {
		c.Server.SystemPassword = "<redacted>"
	}
	users := make([]User, len(c.Server.Users))
	for i, u := range c.Server.Users {
		u.Password = "<redacted>"
		users[i] = u
	}
	c.Server.Users = users
	if c.Admin.Token != "" {
		c.Admin.Token = "<redacted>"
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\n.*>/\\")
}

func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\n") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" {
			return false
		}
		if strings.Contains(t, ">") && (t != ">" || i != len(toks)-1) {
			return false
		}
		if strings.Contains(t, "*") && t != "*" {
			return false
		}
	}
	return true
}
