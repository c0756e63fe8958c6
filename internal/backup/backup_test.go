package backup_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/backup"
)

// A snapshot of many chunks reports its progress while chunks arrive,
// before and after the snapshot's answer (with its total) comes back, and
// ends with every byte and the total.
func TestSnapshotProgress(t *testing.T) {
	srv := embeddedtest.Start(t)
	nc := embeddedtest.Connect(t, srv)
	js := embeddedtest.JetStream(t, srv)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	for range 200 { // 12.5 MiB of random data: about 100 chunks of 128 KiB
		rand.Read(payload)
		if _, err := js.Publish(ctx, "s.x", payload); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var seen []backup.Progress
	st, err := backup.Snapshot(ctx, nc, "S", filepath.Join(t.TempDir(), "S"), backup.Seal{}, func(p backup.Progress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 200 {
		t.Errorf("snapshot of %d messages, want 200", st.Messages)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("progress reported %d times, want during the snapshot and at its end", len(seen))
	}
	if last := seen[len(seen)-1]; last.BytesTotal == 0 || last.BytesReceived == 0 {
		t.Errorf("last progress %+v, want the bytes received and the total", last)
	}
}

// A snapshot whose file cannot be written (here: past the process's file
// size limit, as a full disk would) fails, and leaves no goroutine behind:
// the chunks still in flight after the failed write used to block the
// subscription's goroutine for good, one per failed backup.
func TestSnapshotWriteErrorLeaksNothing(t *testing.T) {
	srv := embeddedtest.Start(t)
	nc := embeddedtest.Connect(t, srv)
	js := embeddedtest.JetStream(t, srv)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	for range 320 { // 20 MiB of random data: 160 chunks, of which the last 80 fail
		rand.Read(payload)
		if _, err := js.Publish(ctx, "s.x", payload); err != nil {
			t.Fatal(err)
		}
	}
	// nats' blocks (8 MiB at most) stay below the limit; the snapshot's file passes it.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 10 << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
	for i := range 3 {
		_, err := backup.Snapshot(ctx, nc, "S", filepath.Join(t.TempDir(), "S"), backup.Seal{}, nil)
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("snapshot %d past the file size limit: %v, want %v", i, err, syscall.EFBIG)
		}
	}
	syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
	stuck := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "internal/backup.Snapshot.func")
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if stuck() {
			return errors.New("a failed snapshot's subscription goroutine is still blocked in its callback")
		}
		return nil
	})
}

// A manifest is read only as `orderstore backup` writes it: its format, each stream's name and its
// two files, each a regular file. A manifest of another format, a stream without files or with a
// name out of the backup, and a file that is a link (to a copy with the same checksum, to
// /dev/zero, on which the checksum never ended) are refused, naming what is wrong.
func TestReadManifestRefusesOthers(t *testing.T) {
	srv := embeddedtest.Start(t)
	nc := embeddedtest.Connect(t, srv)
	js := embeddedtest.JetStream(t, srv)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := backup.Snapshot(ctx, nc, "S", filepath.Join(dir, "S"), backup.Seal{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	manifest := func(m backup.Manifest) {
		t.Helper()
		if err := backup.WriteManifest(filepath.Join(dir, backup.ManifestFile), &m); err != nil {
			t.Fatal(err)
		}
	}
	manifest(backup.Manifest{Format: 1, Streams: []backup.Stream{*st}})
	if _, err := backup.ReadManifest(dir); err != nil {
		t.Fatalf("the manifest as written: %v", err)
	}
	data := filepath.Join(dir, "S", "stream.arc.s2")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	link := func(to string) func() {
		return func() {
			if err := errors.Join(os.Remove(data), os.Symlink(to, data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(copied, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, says string
		change     func()
	}{
		{"format 2", "manifest format 2", func() { manifest(backup.Manifest{Format: 2, Streams: []backup.Stream{*st}}) }},
		{"no format", "manifest format 0", func() { manifest(backup.Manifest{Streams: []backup.Stream{*st}}) }},
		{"no files", `stream "S", files 0`, func() {
			manifest(backup.Manifest{Format: 1, Streams: []backup.Stream{{Name: "S", Files: map[string]string{}}}})
		}},
		{"a name out of the backup", `stream "..", files 0`, func() { manifest(backup.Manifest{Format: 1, Streams: []backup.Stream{{Name: ".."}}}) }},
		{"a link to a copy", data + " is not a regular file", func() {
			manifest(backup.Manifest{Format: 1, Streams: []backup.Stream{*st}})
			link(copied)()
		}},
		{"a link to /dev/zero", data + " is not a regular file", link("/dev/zero")},
	} {
		tc.change()
		_, err := backup.ReadManifest(dir)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.says)
		}
	}
}
