package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// A key rotation done as docs/security.md says: the events orderstore acknowledged after the last
// online backup survive it, because the backup is taken offline, after the stop. An offline backup
// is refused while orderstore runs on the store, and on a store that did not stop cleanly.
func TestRotationByOfflineBackupKeepsLateEvents(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	k1, k2 := filepath.Join(dir, "k1"), filepath.Join(dir, "k2")
	var out, errb strings.Builder
	cmd := func(args ...string) int {
		out.Reset()
		errb.Reset()
		return run(ctx, args, &out, &errb)
	}
	for _, k := range []string{k1, k2} {
		if code := cmd("key", "generate", k); code != 0 {
			t.Fatalf("key generate = %d\n%s", code, errb.String())
		}
	}
	withKey := func(k string) string {
		return writeConfig(t, dir, store, "[admin]\nlisten = \"127.0.0.1:0\"\n[jetstream]\nencryption_key_file = "+strconv.Quote(k)+"\n")
	}
	old := withKey(k1)
	p := start(t, nil, "run", "-config", old)
	nc, err := nats.Connect(p.waitReady())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	publish := func(from, to int) {
		for i := from; i <= to; i++ {
			if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o%d","status":"new"}`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(1, 20)
	if code := cmd("backup", "-admin", p.adminURL(t), filepath.Join(dir, "online")); code != 0 {
		t.Fatalf("backup = %d\n%s", code, errb.String())
	}
	publish(21, 25) // acknowledged after the online backup
	nc.Close()

	offline := filepath.Join(dir, "offline")
	if code := cmd("backup", "-offline", "-config", old, offline); code != exitFailure ||
		!strings.Contains(errb.String(), "locked by another server") || !strings.Contains(errb.String(), "hint: orderstore runs on this store: stop it first") {
		t.Errorf("backup -offline while orderstore runs = %d\n%s", code, errb.String())
	}
	if entries, _ := os.ReadDir(offline); len(entries) > 0 {
		t.Errorf("the refused offline backup wrote %v", entries)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error { // applied, so the processor's ack floor is past 0
		if code := cmd("order", "-admin", p.adminURL(t), "o25"); code != 0 {
			return errors.New(errb.String())
		}
		return nil
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, p.stderr)
	}

	// The documented steps: stop (done), offline backup, move store_dir away, restore, start.
	if code := cmd("backup", "-offline", "-config", old, offline); code != 0 || !strings.Contains(out.String(), "ORDER_EVENTS\t25 messages") ||
		!strings.Contains(errb.String(), "checksums verified") {
		t.Fatalf("backup -offline = %d\n%s\n%s", code, out.String(), errb.String())
	}
	if err := os.Rename(store, store+".old"); err != nil {
		t.Fatal(err)
	}
	rotated := withKey(k2)
	if code := cmd("restore", "-config", rotated, "-backup-key-file", k1, offline); code != 0 {
		t.Fatalf("restore = %d\n%s", code, errb.String())
	}
	// Restored, not started since (no consumer yet): backed up again with what the restore
	// found settled.
	if code := cmd("backup", "-offline", "-config", rotated, filepath.Join(dir, "again")); code != 0 {
		t.Fatalf("backup -offline of a restored store = %d\n%s", code, errb.String())
	}
	m1, err1 := orderstore.ReadBackupManifest(offline)
	m2, err2 := orderstore.ReadBackupManifest(filepath.Join(dir, "again"))
	if err := errors.Join(err1, err2); err != nil || m1.SettledThrough == 0 || m2.SettledThrough != m1.SettledThrough || m2.Sealed == "" {
		t.Fatalf("manifests: %v; settled_through %d then %d, sealed %q", err, m1.SettledThrough, m2.SettledThrough, m2.Sealed)
	}
	p = start(t, nil, "run", "-config", rotated)
	p.waitReady()
	admin := p.adminURL(t)
	for i := 1; i <= 25; i++ {
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if code := cmd("order", "-admin", admin, fmt.Sprintf("o%d", i)); code != 0 {
				return fmt.Errorf("order o%d = %d: %s", i, code, errb.String())
			}
			return nil
		})
	}

	p.signal(syscall.SIGKILL)
	p.wait(30 * time.Second)
	if code := cmd("backup", "-offline", "-config", rotated, filepath.Join(dir, "after-a-kill")); code != exitFailure ||
		!strings.Contains(errb.String(), "did not stop cleanly") {
		t.Errorf("backup -offline of a store that did not stop cleanly = %d\n%s", code, errb.String())
	}
	if entries, err := os.ReadDir(filepath.Join(dir, "after-a-kill")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused offline backup made its directory: %v %v", entries, err)
	}
}
