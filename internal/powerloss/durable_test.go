//go:build linux

package powerloss_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderstore/orderstore/internal/durable"
)

// On the power-loss file system in its strict mode (a name is durable
// only once its directory is fsynced): what durable.WriteFile wrote
// survives a power cut, as a whole; the same bytes written with
// os.WriteFile (no fsync) do not; a replaced file is the old or the new
// one, never torn, and no temporary file is left.
func TestDurableWriteFileSurvivesPowerCut(t *testing.T) {
	p := mount(t, Strict)
	d := filepath.Join(p.Mountpoint(), "store")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncDir(p.Mountpoint()); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(filepath.Join(d, "manifest.json"), []byte(`{"v":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "plain.json"), []byte(`{"v":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	restore(t, p)
	if b, err := os.ReadFile(filepath.Join(d, "manifest.json")); err != nil || string(b) != `{"v":1}` {
		t.Fatalf("after a power cut WriteFile's file reads %q, %v; want it whole", b, err)
	}
	if fi, err := os.Stat(filepath.Join(d, "manifest.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if _, err := os.Stat(filepath.Join(d, "plain.json")); err == nil {
		t.Error("a file written without any fsync survived the cut: this file system does not model power loss, the test proves nothing")
	}

	// Replacing: a cut right after leaves the new content; the old one is
	// never torn into a mix.
	if err := durable.WriteFile(filepath.Join(d, "manifest.json"), []byte(`{"v":2,"more":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	restore(t, p)
	if b, err := os.ReadFile(filepath.Join(d, "manifest.json")); err != nil || string(b) != `{"v":2,"more":"x"}` {
		t.Fatalf("after replacing and a cut: %q, %v", b, err)
	}
	entries, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
}
