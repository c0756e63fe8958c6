package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `key generate` writes a key no one else can read and never overwrites
// one; run encrypts with it; check and run refuse another key the same
// way (exit 2) and a key file others can read.
func TestEncryptionKeyFile(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	k1, k2 := filepath.Join(dir, "k1"), filepath.Join(dir, "k2")
	var out, errb bytes.Buffer
	for _, k := range []string{k1, k2} {
		if code := run(context.Background(), []string{"key", "generate", k}, &out, &errb); code != exitOK {
			t.Fatalf("key generate: exit %d\n%s", code, errb.String())
		}
		fi, err := os.Stat(k)
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 65 {
			t.Fatalf("key file %v (%v), want 64 hex digits and a newline, mode 0600", fi, err)
		}
	}
	errb.Reset()
	before, _ := os.ReadFile(k1)
	if code := run(context.Background(), []string{"key", "generate", k1}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "exists") {
		t.Errorf("key generate over a key: exit %d\n%s", code, errb.String())
	}
	if after, _ := os.ReadFile(k1); !bytes.Equal(before, after) {
		t.Fatal("key generate overwrote a key")
	}

	// A flag is not a file name: `key generate -h` once wrote a key to a file named "-h".
	for _, h := range []string{"-h", "--help"} {
		errb.Reset()
		code := run(context.Background(), []string{"key", "generate", h}, &out, &errb)
		if _, err := os.Stat(h); code != exitUsage || !strings.Contains(errb.String(), "usage") || err == nil {
			os.Remove(h)
			t.Errorf("key generate %s: exit %d, file made: %v\n%s", h, code, err == nil, errb.String())
		}
	}

	cfg := writeConfig(t, dir, store, "[jetstream]\nencryption_key_file = \"k1\"\n")
	p := start(t, nil, "run", "-config", cfg)
	p.waitReady()
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("run with a key: exit %d\n%s", code, p.stderr)
	}

	wrong := writeConfig(t, dir, store, "[jetstream]\nencryption_key_file = \"k2\"\n")
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", wrong}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "does not open store") || !strings.Contains(errb.String(), "hint:") {
		t.Errorf("check with another key: exit %d\n%s", code, errb.String())
	}
	p = start(t, nil, "run", "-config", wrong)
	if code := p.wait(30 * time.Second); code != exitUsage || !strings.Contains(p.stderr.String(), "does not open store") {
		t.Errorf("run with another key: exit %d\n%s", code, p.stderr)
	}
	none := writeConfig(t, dir, store, "")
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", none}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "is encrypted") {
		t.Errorf("check without the key: exit %d\n%s", code, errb.String())
	}

	if err := os.Chmod(k1, 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", cfg}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "jetstream.encryption_key_file") || !strings.Contains(errb.String(), "chmod 600") {
		t.Errorf("check with a key others can read: exit %d\n%s", code, errb.String())
	}
}
