package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// check reports every file run would fail on, all at once: missing
// secret files and missing TLS files, each naming its key, instead of
// "valid".
func TestCheckReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	missing := func(name string) string { return filepath.Join(dir, name) }
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), `
[admin]
token_file = "`+missing("token")+`"
[[server.users]]
user = "p1"
password_file = "`+missing("p1.pw")+`"
role = "producer"
[[server.users]]
user = "p2"
password_file = "`+missing("p2.pw")+`"
role = "producer"
[server.tls]
cert_file = "`+missing("server.crt")+`"
key_file = "`+missing("server.key")+`"
`)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb)
	if code == exitOK {
		t.Fatalf("check exit 0 on missing files:\n%s", errb.String())
	}
	got := errb.String()
	if strings.Contains(got, "is valid") {
		t.Errorf("check said valid:\n%s", got)
	}
	for _, key := range []string{"admin.token_file", "server.users[0].password_file", "server.users[1].password_file"} {
		if !strings.Contains(got, key) {
			t.Errorf("check output lacks %s:\n%s", key, got)
		}
	}
	// With the secrets in place, the TLS files are reported.
	cfg = writeConfig(t, dir, filepath.Join(dir, "store"), `
[server.tls]
cert_file = "`+missing("server.crt")+`"
key_file = "`+missing("server.key")+`"
`)
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb); code == exitOK || !strings.Contains(errb.String(), "server.tls") || strings.Contains(errb.String(), "is valid") {
		t.Errorf("check with missing TLS files: exit %d\n%s", code, errb.String())
	}
}
