package backup_test

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"sync"
	"testing"

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
