package config

import (
	"github.com/orderstore/orderstore"

	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A syntax error anywhere, the secret's own line included, shows where it
// is without the secret: string values are masked, and the whole value of
// a secret key.
func TestSyntaxErrorsMaskSecrets(t *testing.T) {
	const secret = "hunter2-very-secret"
	tests := []string{
		"[server]\nsystem_password = " + secret + "\n",                     // unquoted: not TOML
		"[server]\nsystem_password = \"" + secret + "\n",                   // unterminated string
		"[admin]\ntoken = \"" + secret + "\" trailing\n",                   // junk after the value
		"[[server.users]]\nuser = \"p\"\npassword = '" + secret + "\n",     // literal string, unterminated
		"[[server.users]]\nuser = \"p\"\npassword = \"" + secret + "\"\n[", // error on the next line
		"[server]\nusers = [ { user = \"a\", password = \"" + secret + "\" }\n",
		secret + "\n",
		"[admin]\ntoken = \"\\q" + secret + "\"\n", // invalid escape inside the secret
		"[server]\nsystem_password = \"\"\"" + secret + "\n",
		// Found by review: a secret after another key on the line, and a
		// multi-line string's lines.
		"[server]\nusers = [ { user = \"p1\", password = " + secret + ", role = \"producer\" } ]\n",
		"server = { system_user = \"sys\", system_password = " + secret + " }\n",
		"[admin]\ntoken = \"\"\"\n" + secret + "=\n\"\"\" junk\n",
	}
	for _, src := range tests {
		_, err := Parse(strings.NewReader(src), "orderstore.toml")
		if err == nil {
			t.Errorf("%q parsed", src)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the secret:\n%v", err)
		}
		if !strings.Contains(err.Error(), "line ") {
			t.Errorf("the error does not say where: %v", err)
		}
	}
	// What is not a secret is still shown, to find the mistake by.
	_, err := Parse(strings.NewReader("[server]\nport = 42x\n"), "f")
	if err == nil || !strings.Contains(err.Error(), "port = 42x") {
		t.Errorf("a non-secret line is masked: %v", err)
	}
	// A non-secret string value too (its mistake is often in the quotes),
	// and what the parser's message quotes of it.
	_, err = Parse(strings.NewReader("[admin]\nlisten = \"127.0.0.1:8222\nallowed_hosts = []\n"), "f")
	if err == nil || !strings.Contains(err.Error(), `listen = "127.0.0.1:8222`) || strings.Contains(err.Error(), "***") {
		t.Errorf("a non-secret value is masked: %v", err)
	}
	// A password in a URL is a secret wherever it is.
	_, err = Parse(strings.NewReader("[[leafnode.remotes]]\nurl = \"nats-leaf://edge:hunter2@hub:7422\" x\n"), "f")
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "edge:***@hub") {
		t.Errorf("a URL's password: %v", err)
	}
}

// Values of the wrong type in a secret key are reported by key, without
// the value.
func TestDecodeErrorsDoNotEchoSecrets(t *testing.T) {
	_, err := Parse(strings.NewReader("[admin]\ntoken = 1234567890123456789\n[server]\nsystem_password = [\"hunter2-x\"]\n"), "f")
	if err == nil {
		t.Fatal("parsed")
	}
	for _, s := range []string{"1234567890123456789", "hunter2-x"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error shows the value %q: %v", s, err)
		}
	}
}

func TestUsersRolesListsAndFiles(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(strings.NewReader(`
[[server.users]]
user = "p1"
password_file = "`+pwFile+`"
role = "producer"
[[server.users]]
user = "custom"
password = "x"
publish = { allow = ["orders.>"], deny = ["orders.internal.>"] }
subscribe = ["_INBOX.>"]
`), "f")
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.Orderstore()
	if err != nil {
		t.Fatal(err)
	}
	if o.Server.Users[0].Password != "from-the-file" || o.Server.Users[0].Role != "producer" {
		t.Errorf("password_file user = %+v", o.Server.Users[0])
	}
	c := o.Server.Users[1]
	if !reflect.DeepEqual(c.Publish, []string{"orders.>"}) || !reflect.DeepEqual(c.PublishDeny, []string{"orders.internal.>"}) || !reflect.DeepEqual(c.Subscribe, []string{"_INBOX.>"}) {
		t.Errorf("lists user = %+v", c)
	}
	// check -print round-trips the users, secrets redacted.
	b, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "from-the-file") || strings.Contains(string(b), `password = "x"`) {
		t.Errorf("Encode shows a password:\n%s", b)
	}
	back, err := Parse(strings.NewReader(string(b)), "printed")
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(back.Server.Users[1].Publish, cfg.Server.Users[1].Publish) {
		t.Errorf("publish lists do not round-trip: %+v\n%s", back.Server.Users[1].Publish, b)
	}

	for src, key := range map[string]string{
		"[[server.users]]\nuser = \"u\"\npassword = \"a\"\npassword_file = \"/x\"\nrole = \"reader\"\n": "server.users[0].password",
		"[[server.users]]\nuser = \"u\"\npassword = \"a\"\npublish = 3\n":                               "server.users publish/subscribe",
		"[[server.users]]\nuser = \"u\"\npassword = \"a\"\npublish = { allow = [\"a\"], nope = [] }\n":  "server.users publish/subscribe",
		"[server.tls]\ncert_file = \"c\"\nbogus = 1\n":                                                  "server.tls.bogus",
	} {
		_, err := Parse(strings.NewReader(src), "f")
		var errs *orderstore.ValidationError
		if !asErrors(err, &errs) {
			t.Errorf("%q: %v, want *orderstore.ValidationError", src, err)
			continue
		}
		k, reason, _ := strings.Cut(key, " ")
		if !strings.Contains(strings.Join(errs.Keys(), " "), k) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%q: %v, want %s", src, err, key)
		}
	}

	// A missing password_file names its key.
	cfg.Server.Users[0].PasswordFile = filepath.Join(dir, "missing")
	if _, err := cfg.Orderstore(); err == nil || !strings.Contains(err.Error(), "server.users[0].password_file") {
		t.Errorf("missing password_file: %v", err)
	}
}

func asErrors(err error, target **orderstore.ValidationError) bool {
	e, ok := err.(*orderstore.ValidationError)
	if ok {
		*target = e
	}
	return ok
}

// check and run warn about a file holding a secret that every user can
// read.
func TestSecretFileWarnings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orderstore.toml")
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(path, []byte("[server]\nsystem_user = \"s\"\nsystem_password = \"pw\"\n"), 0o644)
	os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o640)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Admin.TokenFile = tokenFile
	w := cfg.SecretFileWarnings(path)
	if len(w) != 1 || !strings.Contains(w[0], path) || !strings.Contains(w[0], "0644") {
		t.Errorf("warnings = %q, want one for the world-readable config", w)
	}
	os.Chmod(tokenFile, 0o604)
	os.Chmod(path, 0o600)
	if w := cfg.SecretFileWarnings(path); len(w) != 1 || !strings.Contains(w[0], "admin.token_file") {
		t.Errorf("warnings = %q, want one for the token file", w)
	}
	// A config without secrets may be world-readable.
	plain := filepath.Join(dir, "plain.toml")
	os.WriteFile(plain, []byte("[server]\nport = 4222\n"), 0o644)
	pc, _ := Load(plain)
	if w := pc.SecretFileWarnings(plain); len(w) != 0 {
		t.Errorf("warnings for a config without secrets: %q", w)
	}
}

// The key comes from jetstream.encryption_key_file, else from systemd's
// credential orderstore-encryption-key; a key file others can read, or a
// short key, is refused naming the key and the file.
func TestEncryptionKeySources(t *testing.T) {
	dir := t.TempDir()
	key := strings.Repeat("k", 40)
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	creds := filepath.Join(dir, "creds")
	os.Mkdir(creds, 0o700)
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	// No file, no credential: a plain store.
	if got, err := (Config{}).EncryptionKey(); err != nil || got != "" {
		t.Errorf("no key: %q, %v", got, err)
	}
	// The credential (mode 0440: systemd's, no mode check).
	write("creds/orderstore-encryption-key", key+"\n", 0o440)
	if got, err := (Config{}).EncryptionKey(); err != nil || got != key {
		t.Errorf("credential: %q, %v; want the key without its newline", got, err)
	}
	// A credential that is there but cannot be read is an error, never a plain store
	// (ELOOP fails for root too, like EACCES for the service user).
	os.Remove(filepath.Join(creds, "orderstore-encryption-key"))
	os.Symlink("orderstore-encryption-key", filepath.Join(creds, "orderstore-encryption-key"))
	if got, err := (Config{}).EncryptionKey(); err == nil || !strings.Contains(err.Error(), "orderstore-encryption-key") {
		t.Errorf("unreadable credential: %q, %v; want an error naming it", got, err)
	}
	os.Remove(filepath.Join(creds, "orderstore-encryption-key"))
	write("creds/orderstore-encryption-key", key+"\n", 0o440)
	// A key file wins over the credential.
	var c Config
	c.JetStream.EncryptionKeyFile = write("file.key", key+"-file\n", 0o600)
	if got, err := c.EncryptionKey(); err != nil || got != key+"-file" {
		t.Errorf("key file: %q, %v", got, err)
	}
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
		says string
	}{
		"readable by others": {key, 0o644, "chmod 600"},
		"readable by group":  {key, 0o640, "chmod 600"},
		"short":              {"short-key", 0o600, "the key is 9 bytes, want at least 32"},
		"huge":               {strings.Repeat("k", 5000), 0o600, "not a key"},
	} {
		c.JetStream.EncryptionKeyFile = write(name, tc.body, tc.mode)
		_, err := c.EncryptionKey()
		if err == nil || !strings.Contains(err.Error(), "jetstream.encryption_key_file") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want it to name the key and say %q", name, err, tc.says)
		}
	}
}
