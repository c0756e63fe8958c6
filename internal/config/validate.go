package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/orderstore/orderstore"
)

// validate is every problem of an already decoded Config.
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
			// A field the file has no key for is set from one that it has: the table misses a row.
			key := cmp.Or(KeyOf(p.Field), p.Field)
			errs = append(errs, &orderstore.FieldError{Key: key, Value: p.Value, Reason: p.Reason})
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
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(c.Log.Level)) {
		bad("log.level", c.Log.Level, "must be debug, info, warn or error")
	}
	if !slices.Contains([]string{"auto", "text", "json"}, c.Log.Format) {
		bad("log.format", c.Log.Format, "must be auto, text or json")
	}
	return errs
}

// Orderstore maps the file onto the appliance's configuration, reading admin.token_file. Logger and
// Build are the caller's. Every file that cannot be read is reported, all at once.
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
	if key, err := c.EncryptionKey(); err != nil {
		errs = append(errs, err)
	} else {
		o.JetStream.EncryptionKey = key
	}
	for i, u := range c.Server.Users {
		if u.PasswordFile == "" {
			continue
		}
		if pw, err := readSecretFile(fmt.Sprintf("server.users[%d].password_file", i), u.PasswordFile); err != nil {
			errs = append(errs, err)
		} else {
			o.Server.Users[i].Password = pw
		}
	}
	return o, errors.Join(errs...)
}

// EncryptionKey reads the store's encryption key: jetstream.encryption_key_file, else
// the systemd credential orderstore.CredentialName, else none (""). The file
// must be no one else's to read; one trailing newline is not part of the key.
func (c Config) EncryptionKey() (string, error) {
	if path := c.JetStream.EncryptionKeyFile; path != "" {
		return ReadKeyFile("jetstream.encryption_key_file", path)
	}
	path := credential(orderstore.CredentialName)
	if path == "" {
		return "", nil
	}
	// systemd keeps credentials where only the service can read them (its
	// own file system, mode 0500 and 0400 or 0440): no mode check.
	return readKey("the systemd credential "+orderstore.CredentialName, path, false)
}

// ReadKeyFile reads an encryption key from path (named key in errors): the file must be no one
// else's to read, and one trailing newline is not part of the key.
func ReadKeyFile(key, path string) (string, error) { return readKey(key, path, true) }

// maxKeyFile bounds what is read as a key.
const maxKeyFile = 4 << 10

func readKey(key, path string, private bool) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", key, path, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxKeyFile {
		return "", fmt.Errorf("%s %q: not a key: a key file is a regular file of at most %d bytes (`orderstore key generate FILE` makes one)", key, path, maxKeyFile)
	}
	if private && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s %q: mode %04o lets other users read the store's key: chmod 600 %q", key, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", key, path, err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < orderstore.MinEncryptionKeyLen {
		return "", fmt.Errorf("%s %q: the key is %d bytes, want at least %d (make one with `orderstore key generate FILE`)",
			key, path, len(b), orderstore.MinEncryptionKeyLen)
	}
	return string(b), nil
}

// credential is the path of systemd credential name, if systemd gave the service one
// ($CREDENTIALS_DIRECTORY/name), else "". A credential that is there but cannot be read is
// given (reading it says why): a store must not start plain because its key was unreadable.
func credential(name string) string {
	dir := os.Getenv("CREDENTIALS_DIRECTORY")
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); dir == "" || errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return path
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

// toOrderstore is the mapping without reading admin.token_file (a set token_file stands in for the
// token, for validation): the key table (keys.go), then the rules it cannot state.
func (c Config) toOrderstore() orderstore.Config {
	var o orderstore.Config
	copyFields(reflect.ValueOf(&c).Elem(), reflect.ValueOf(&o).Elem(), true)
	def := orderstore.DefaultConfig().Admin
	o.Admin.ReadTimeout, o.Admin.WriteTimeout, o.Admin.IdleTimeout = def.ReadTimeout, def.WriteTimeout, def.IdleTimeout
	// sync_interval predating durability: "always" is that mode, a duration "interval".
	j := c.JetStream
	o.JetStream.SyncInterval = j.SyncInterval.Interval
	if j.Durability == "" && j.SyncInterval.Always {
		o.JetStream.Durability = orderstore.DurabilityAlways
	}
	for i, u := range c.Server.Users {
		if u.PasswordFile != "" && u.Password == "" {
			o.Server.Users[i].Password = "<password_file>" // read by Orderstore; stands in for validation
		}
	}
	if c.Admin.TokenFile != "" && o.Admin.Token == "" {
		o.Admin.Token = "<admin.token_file>"
	}
	if c.JetStream.EncryptionKeyFile != "" || credential(orderstore.CredentialName) != "" {
		o.JetStream.EncryptionKey = strings.Repeat("k", orderstore.MinEncryptionKeyLen) // read by Orderstore; stands in for validation
	}
	return o
}

// fromOrderstore is the file form of o (without [log]).
func fromOrderstore(o orderstore.Config) Config {
	var c Config
	copyFields(reflect.ValueOf(&c).Elem(), reflect.ValueOf(&o).Elem(), false)
	c.JetStream.SyncInterval = SyncPolicy{Interval: o.JetStream.SyncInterval}
	return c
}

// AdminToken returns the admin bearer token from admin.token or the file named by admin.token_file.
func (c Config) AdminToken() (string, error) {
	if c.Admin.TokenFile == "" {
		return c.Admin.Token, nil
	}
	return readSecretFile("admin.token_file", c.Admin.TokenFile)
}

// Redacted is c with every secret replaced by "<redacted>": what Encode prints.
func (c Config) Redacted() Config {
	c.Server.Users = append([]User{}, c.Server.Users...)
	c.LeafNode.Remotes = append([]orderstore.LeafRemote{}, c.LeafNode.Remotes...)
	c.LeafNode.Users = append([]orderstore.LeafUser{}, c.LeafNode.Users...)
	for _, s := range c.secrets() {
		if *s != "" {
			*s = "<redacted>"
		}
	}
	return c
}

// secrets are the fields of c that hold a secret.
func (c *Config) secrets() []*string {
	s := []*string{&c.Server.SystemPassword, &c.Admin.Token, &c.Cluster.Password, &c.LeafNode.Password}
	for i := range c.Server.Users {
		s = append(s, &c.Server.Users[i].Password)
	}
	for i := range c.LeafNode.Remotes {
		s = append(s, &c.LeafNode.Remotes[i].Password)
	}
	for i := range c.LeafNode.Users {
		s = append(s, &c.LeafNode.Users[i].Password)
	}
	return s
}

// Encode writes c as TOML: the effective configuration `check -print` shows. Secrets are masked.
func (c Config) Encode() ([]byte, error) { return toml.Marshal(c.Redacted()) }

// SecretFileWarnings names each file holding a secret that users other than its owner and group can
// read: the configuration at path (when it holds a password or token), admin.token_file and every
// password_file. `check` and `run` print them at every start.
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
	if slices.ContainsFunc(c.secrets(), func(s *string) bool { return *s != "" }) {
		check("config", path)
	}
	check("admin.token_file", c.Admin.TokenFile)
	for i, u := range c.Server.Users {
		check(fmt.Sprintf("server.users[%d].password_file", i), u.PasswordFile)
	}
	return w
}
