package main

import (
	"bytes"
	"context"
	"os"
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

// check compiles every schema of [validation], relative to the config
// file, and names each bad one by its key, file and position; run refuses
// them the same way, and with good ones it refuses invalid events.
func TestCheckCompilesSchemas(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"good.json":   `{"type":"object","required":["order_id"]}`,
		"syntax.json": "{\n  \"type\": \"object\",\n  \"required\": [\"order_id\",]\n}",
		"wrong.json":  `{"type":"object","properties":{"amount":{"minimum":"zero"}}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "schemas", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), `
[validation]
schemas = { created = "schemas/good.json", paid = "schemas/syntax.json", shipped = "schemas/wrong.json", cancelled = "schemas/missing.json" }
unknown_types = "reject"
`)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb)
	got := errb.String()
	if code == exitOK || strings.Contains(got, "is valid") {
		t.Fatalf("check exit %d on bad schemas:\n%s", code, got)
	}
	for _, w := range []string{
		`validation.schemas.paid = "` + filepath.Join(dir, "schemas", "syntax.json") + `": line 3, column`,
		`validation.schemas.shipped = "` + filepath.Join(dir, "schemas", "wrong.json") + `": not a valid JSON Schema`, "/properties/amount/minimum",
		`validation.schemas.cancelled = "` + filepath.Join(dir, "schemas", "missing.json") + `"`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("check output lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "validation.schemas.created") {
		t.Errorf("check reports the good schema:\n%s", got)
	}
	if code != exitUsage {
		t.Errorf("check exit %d on bad schemas, want %d (a configuration error)", code, exitUsage)
	}
	if code := run(context.Background(), []string{"run", "-config", cfg}, &out, &errb); code != exitUsage {
		t.Errorf("run with bad schemas: exit %d, want %d (a configuration error)", code, exitUsage)
	}
	// A bad key beside them hides none of them.
	cfg = writeConfig(t, dir, filepath.Join(dir, "store"), `
[validation]
schemas = { paid = "schemas/syntax.json" }
unknown_types = "rejectt"
`)
	errb.Reset()
	code = run(context.Background(), []string{"check", "-config", cfg}, &out, &errb)
	got = errb.String()
	for _, w := range []string{"validation.unknown_types", `"rejectt"`, `validation.schemas.paid = "`, "line 3, column"} {
		if !strings.Contains(got, w) {
			t.Errorf("check exit %d; its output lacks %q:\n%s", code, w, got)
		}
	}
	// Good schemas only: valid. One the fast check does not take is named, with the keyword.
	if err := os.WriteFile(filepath.Join(dir, "schemas", "anyof.json"), []byte(`{"anyOf":[{"required":["order_id"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = writeConfig(t, dir, filepath.Join(dir, "store"), `
[validation]
schemas = { created = "schemas/good.json", paid = "schemas/anyof.json" }
`)
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb); code != exitOK {
		t.Errorf("check with good schemas: exit %d\n%s", code, errb.String())
	}
	got = errb.String()
	if !strings.Contains(got, "note: validation.schemas.paid ("+filepath.Join(dir, "schemas", "anyof.json")+") is checked by the JSON Schema library alone") ||
		!strings.Contains(got, "does not take /anyOf") || strings.Contains(got, "validation.schemas.created") {
		t.Errorf("check does not name the slow schema alone, with its keyword:\n%s", got)
	}
}

// check on a store_dir that is a file says so once, with a hint, as run
// does.
func TestCheckStoreDirIsAFile(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.WriteFile(store, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, store, "")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb)
	got := errb.String()
	if code == exitOK || strings.Contains(got, "is valid") {
		t.Fatalf("check exit %d on a store_dir that is a file:\n%s", code, got)
	}
	if !strings.Contains(got, "jetstream.store_dir") || !strings.Contains(got, "is not a directory") ||
		!strings.Contains(got, "hint: point jetstream.store_dir at a directory") {
		t.Errorf("check does not name the key, the problem and a hint:\n%s", got)
	}
	if strings.Contains(got, "meta.inf") {
		t.Errorf("check reports the store's files, not the store_dir:\n%s", got)
	}
}

// A config file given without -config is refused, not ignored: check
// would call the built-in defaults valid (and create ./orderstore-data),
// status would ask another admin listener than the one named.
func TestCommandsRefuseArguments(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("ORDERSTORE_CONFIG", "")
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "")
	for _, args := range [][]string{{"check", cfg}, {"check", "-config", cfg, "extra"}, {"status", "http://127.0.0.1:1"}, {"version", "x"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "unexpected arguments") {
			t.Errorf("%q: exit %d, want %d and the arguments named\n%s%s", args, code, exitUsage, out.String(), errb.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "orderstore-data")); err == nil {
		t.Error("check created ./orderstore-data for a file it did not read")
	}
}
