package orderstore_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// Test 5: a backup taken while producers publish, restored into a fresh
// store: every event acknowledged before the backup began is there, with
// its dedupe state, and the projection is the fold of the restored
// stream.
func TestBackupWhilePublishingRestore(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	var n atomic.Int64
	publish := func(i int64) error {
		_, err := js.Publish(ctx, "orders.created", []byte(fmt.Sprintf(`{"order_id":"b-%d","status":"s-%d"}`, i%97, i)),
			jetstream.WithMsgID(fmt.Sprint("bm-", i)))
		return err
	}
	// More than 256 KiB of snapshot: a restore with an fsync per
	// message stalled there (nats-server gives up after 5 s per chunk).
	for range 15 {
		for range 1000 {
			i := n.Add(1)
			if _, err := js.PublishAsync("orders.created", []byte(fmt.Sprintf(`{"order_id":"b-%d","status":"s-%d"}`, i%97, i)),
				jetstream.WithMsgID(fmt.Sprint("bm-", i))); err != nil {
				t.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
	}
	for range 2000 {
		if err := publish(n.Add(1)); err != nil {
			t.Fatal(err)
		}
	}
	ackedBefore := n.Load()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // publishing goes on during the backup
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := publish(n.Add(1)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dir := filepath.Join(t.TempDir(), "backup")
	progressed := 0
	m, err := app.Backup(ctx, dir, func(orderstore.BackupProgress) { progressed++ })
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Streams) != 4 || m.Streams[3].Name != "ORDER_EVENTS" || m.Streams[3].LastSeq < uint64(ackedBefore) {
		t.Fatalf("manifest = %+v", m)
	}
	if _, err := orderstore.ReadBackupManifest(dir); err != nil {
		t.Fatalf("checksums: %v", err)
	}

	cfg := orderstoretest.Config(t)
	if _, err := orderstore.Restore(ctx, cfg, dir, nil); err != nil {
		t.Fatalf("restore: %v", err)
	}
	restored := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	rjs := embeddedtest.JetStream(t, restored)
	st, err := rjs.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq
	if last < m.Streams[3].LastSeq || last < uint64(ackedBefore) {
		t.Fatalf("restored stream ends at %d, backup at %d, acked before the backup %d", last, m.Streams[3].LastSeq, ackedBefore)
	}
	// Dedupe state: an event acked before the backup comes back a duplicate.
	if ack, err := rjs.Publish(ctx, "orders.created", []byte(`{"order_id":"b-1"}`), jetstream.WithMsgID("bm-16999")); err != nil || !ack.Duplicate {
		t.Errorf("republished bm-1999 after restore: %+v, %v; want a duplicate", ack, err)
	}
	// The projection equals the fold of the restored stream.
	fold := map[string]string{}
	for seq := uint64(1); seq <= last; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var ev struct{ OrderID, Status string }
		json.Unmarshal(msg.Data, &struct {
			OrderID *string `json:"order_id"`
			Status  *string `json:"status"`
		}{&ev.OrderID, &ev.Status})
		fold[ev.OrderID] = ev.Status
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for id, status := range fold {
			o, err := restored.Order(ctx, id)
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if o.Status != status {
				return fmt.Errorf("order %s: %q, fold %q", id, o.Status, status)
			}
		}
		return nil
	})
	if err := restored.Ready(ctx); err != nil {
		t.Errorf("restored appliance not ready: %v", err)
	}
	for _, n := range restored.Recovery() {
		// A bucket snapshotted in the middle of an atomic batch commit
		// comes back with nats' note on the partial batch; the events of
		// that batch are applied again from the stream (checked above).
		if !strings.Contains(n, "partial batch") {
			t.Errorf("restore left a recovery note: %q", n)
		}
	}
	if progressed == 0 {
		t.Error("no progress reported")
	}
}

// A backup whose copy could fill the store's disk is refused before it
// begins, with the reason, and leaves nothing behind.
func TestBackupRefusedWithoutRoom(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.JetStream.AllowLowDisk = true
		c.JetStream.DiskHeadroom = 1 << 50 // more than any disk here
	})
	code, body := postBackup(app)
	if code != 503 || !strings.Contains(body.Error, "not enough free disk") || !strings.Contains(body.Hint, "free disk under jetstream.store_dir") {
		t.Errorf("POST /v1/backup with no room = %d %s, want 503 naming the free disk, with the hint to free some", code, body)
	}
	entries, _ := os.ReadDir(app.StoreDir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "backup-") {
			t.Errorf("a refused backup left %s in the store", e.Name())
		}
	}
}

// A second backup while one runs is refused at once, with what to do.
// The refusal is a warning in the log, not a failure.
func TestBackupRefusedWhileOneRuns(t *testing.T) {
	var logs testkit.LockedBuffer
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	release := orderstore.HoldBackup(app)
	defer release()
	code, body := postBackup(app)
	if code != 503 || body.Error != "a backup is already running" || !strings.Contains(body.Hint, "wait for the other backup") {
		t.Errorf("POST /v1/backup while one runs = %d %s, want 503 saying so, with the hint to wait", code, body)
	}
	if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"backup refused"`) || strings.Contains(l, "backup failed") {
		t.Errorf("log after a refused backup, want a warning \"backup refused\" and no \"backup failed\":\n%s", l)
	}
}

// postBackup asks app for a backup and decodes a refusal.
func postBackup(app *orderstore.Appliance) (int, struct{ Error, Hint string }) {
	req := httptest.NewRequest("POST", "http://127.0.0.1/v1/backup", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	var body struct{ Error, Hint string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body
}

// A restore does not dead-letter again what the backed-up instance
// settled: its processor starts over on the restored stream, and the
// events it had dead-lettered (one replayed since, one not) stay as the
// backup holds them.
func TestRestoreDoesNotDeadLetterAgain(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	for i, body := range []string{`{"order_id":"r-1"}`, `[1]`, `{"order_id":"r-2"}`, `"x"`, `{"order_id":"r-3"}`} {
		if _, err := app.Publish(ctx, "orders.created", []byte(body), jetstream.WithMsgID(fmt.Sprint("r-", i))); err != nil {
			t.Fatal(err)
		}
	}
	deadLetters := func(app *orderstore.Appliance, want int) []orderstore.DeadLetter {
		t.Helper()
		var dls []orderstore.DeadLetter
		embeddedtest.WaitFor(t, time.Minute, func() error {
			var err error
			if dls, _, err = app.DeadLetters(ctx, 0, 100); err != nil {
				return err
			}
			if len(dls) != want {
				return fmt.Errorf("%d dead letters, want %d", len(dls), want)
			}
			return nil
		})
		return dls
	}
	dls := deadLetters(app, 2)
	// A replay of a poison event is dead-lettered again: still 2.
	if _, err := app.ReplayDeadLetter(ctx, dls[0].Sequence); err != nil {
		t.Fatal(err)
	}
	before := deadLetters(app, 2)
	embeddedtest.WaitFor(t, time.Minute, func() error {
		lag, err := app.Lag(ctx)
		if err != nil {
			return err
		}
		if lag.AckFloor != lag.LastSeq {
			return fmt.Errorf("ack floor %d, stream's last %d", lag.AckFloor, lag.LastSeq)
		}
		return nil
	})
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := app.Backup(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	cfg := orderstoretest.Config(t)
	if _, err := orderstore.Restore(ctx, cfg, dir, nil); err != nil {
		t.Fatal(err)
	}
	restored := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if _, err := restored.Publish(ctx, "orders.created", []byte(`{"order_id":"r-4"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error { // caught up: past the last event
		_, err := restored.Order(ctx, "r-4")
		return err
	})
	after, _, err := restored.DeadLetters(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("%d dead letters after the restore, %d before it:\nbefore %+v\nafter  %+v", len(after), len(before), before, after)
	}
	// The restore's note goes at the next start, the processor being past it.
	marker := filepath.Join(cfg.JetStream.StoreDir, "restored.json")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		lag, err := restored.Lag(ctx)
		if err == nil && lag.AckFloor != lag.LastSeq {
			err = fmt.Errorf("ack floor %d, stream's last %d", lag.AckFloor, lag.LastSeq)
		}
		return err
	})
	if err := restored.Close(ctx); err != nil {
		t.Fatal(err)
	}
	orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("%s after the processor passed it and a restart: %v", marker, err)
	}
}

// `sudo orderstore restore` into the service user's store (the packaged
// install: /var/lib/orderstore, orderstore:orderstore) leaves every file it
// made that user's: root-owned ones the service (User=orderstore, no
// capabilities) could not open, and systemd's StateDirectory= does not
// chown a tree whose top directory is already the service user's.
func TestRestoreByRootKeepsStoreOwner(t *testing.T) {
	testenv.Require(t, testenv.Root())
	app := orderstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	if _, err := app.Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := app.Backup(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	cfg := orderstoretest.Config(t)
	if err := os.Chown(cfg.JetStream.StoreDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := orderstore.Restore(ctx, cfg, dir, nil); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(cfg.JetStream.StoreDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s: owner %d:%d after root's restore, want the store's 65534:65534", p, st.Uid, st.Gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A backup's copy staged under store_dir, that a crash (or a stop that
// did not wait for the backup) left there, is removed at the next start:
// it is as large as the store, and nothing else ever removes it. An
// operator's own directory there is kept.
func TestBackupStagingLeftByCrashRemoved(t *testing.T) {
	cfg := orderstoretest.Config(t)
	staged := filepath.Join(cfg.JetStream.StoreDir, orderstore.BackupStaging+"1234")
	mine := filepath.Join(cfg.JetStream.StoreDir, "backup-1")
	for _, d := range []string{filepath.Join(staged, "b", "ORDER_EVENTS"), mine} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "stream.arc.s2"), make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("a backup's staged copy left by a crash is still in the store after a start: %q (%v)", staged, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("an operator's own directory in the store: %v", err)
	}
}

// A restore that did not finish (interrupted, or refused by nats half-way
// through the stream) leaves a store that holds part of the backup: the
// appliance refuses to start on it, saying so, rather than serve a stream
// that lacks acknowledged events the backup holds.
func TestRestoreInterruptedRefusesStart(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	for i := range 30000 {
		if _, err := js.PublishAsync("orders.created", []byte(fmt.Sprintf(`{"order_id":"i-%d","status":"%x"}`, i%97, rand.Text()+rand.Text()+rand.Text()))); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := app.Backup(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	cfg := orderstoretest.Config(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err := orderstore.Restore(rctx, cfg, dir, func(p orderstore.BackupProgress) {
		if p.Stream == "ORDER_EVENTS" && p.BytesReceived > 1<<20 {
			cancel() // part of the way through the stream
		}
	})
	if err == nil {
		t.Fatal("a restore canceled in the stream's first chunk succeeded")
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	restored, err := orderstore.Start(sctx, cfg)
	if err == nil {
		var last uint64
		if st, err := embeddedtest.JetStream(t, restored).Stream(ctx, "ORDER_EVENTS"); err == nil {
			last = st.CachedInfo().State.LastSeq
		}
		restored.Close(ctx)
		t.Fatalf("the appliance started on a store whose restore did not finish (its stream ends at %d of 30000; notes %q)", last, restored.Recovery())
	}
	var h orderstore.Hinted
	if !strings.Contains(err.Error(), "restore") || !errors.As(err, &h) || !strings.Contains(h.Hint(), "orderstore restore") {
		t.Errorf("start on an unfinished restore: %v, want one saying so, with the hint to restore again", err)
	}
}

// A backup being sent through the admin API when the appliance stops is cut at once (the client
// gets a truncated tar without its manifest, and the copy staged under store_dir is removed): it
// used to be waited for, and took the stop's budget from the stream's last sync and the acks.
func TestStopCancelsBackup(t *testing.T) {
	var logs testkit.LockedBuffer
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Admin.Listen = "127.0.0.1:0"
		c.Processor.Enabled = false // random bytes: no dead letters of them
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	payload := make([]byte, 64<<10)
	for range 512 { // 32 MiB that does not compress: far more than the sockets buffer
		rand.Read(payload)
		if _, err := js.PublishAsync("orders.created", payload); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	resp, err := http.Post("http://"+app.AdminAddr()+"/v1/backup", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/backup = %d, %v", resp.StatusCode, err)
	}
	// The tar is being sent: stop, and read on once the stop began.
	closed := make(chan error, 1)
	go func() { closed <- app.Close(ctx) }()
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if !orderstore.Stopping(app) {
			return errors.New("Close has not begun")
		}
		return nil
	})
	if n, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Errorf("the whole backup (%d bytes more) was sent after the stop began; want it cut", n)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "orderstore is stopping: the backup was canceled") {
		t.Errorf("the log does not say why the backup failed:\n%s", l)
	}
	entries, _ := os.ReadDir(app.StoreDir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), orderstore.BackupStaging) {
			t.Errorf("the canceled backup left %s in the store", e.Name())
		}
	}
}

// A program's own Appliance.Backup under way when it calls Close ends at once with the reason,
// rather than wait on a snapshot whose connection the stop drains.
func TestStopCancelsLibraryBackup(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Processor.Enabled = false })
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	payload := make([]byte, 64<<10)
	for range 256 { // 16 MiB: the stream's snapshot reports progress after 8 MiB
		rand.Read(payload)
		if _, err := js.PublishAsync("orders.created", payload); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	closed := make(chan error, 1)
	var once sync.Once
	_, err := app.Backup(ctx, filepath.Join(t.TempDir(), "b"), func(p orderstore.BackupProgress) {
		if p.Stream != "ORDER_EVENTS" {
			return
		}
		once.Do(func() {
			go func() { closed <- app.Close(ctx) }()
			embeddedtest.WaitFor(t, 10*time.Second, func() error {
				if !orderstore.Stopping(app) {
					return errors.New("Close has not begun")
				}
				return nil
			})
		})
	})
	if err == nil || !strings.Contains(err.Error(), "orderstore is stopping: the backup was canceled") {
		t.Errorf("Backup during Close: %v, want it canceled, saying why", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A backup restored with a config that names other streams (the stream, the projection bucket, the
// dead letters), or whose manifest lacks one of the config's, is refused, naming both sides and
// the keys, and the store is left as it was: the processor used to start on the config's stream
// with the backup's settled_through, acking new orders it never applied.
func TestRestoreRefusesOtherStreams(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	if _, err := app.Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := app.Backup(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	// The same backup, its manifest without the stream.
	lacking := filepath.Join(t.TempDir(), "lacking")
	if err := os.CopyFS(lacking, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	m, err := orderstore.ReadBackupManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Streams = m.Streams[:len(m.Streams)-1]
	if b, _ := json.Marshal(m); os.WriteFile(filepath.Join(lacking, orderstore.BackupManifestFile), b, 0o600) != nil {
		t.Fatal("cannot write the manifest")
	}
	for _, tc := range []struct {
		name, dir, says string
		change          func(*orderstore.Config)
	}{
		{"another stream.name", dir, `"OTHER_EVENTS"`, func(c *orderstore.Config) { c.Stream.Name = "OTHER_EVENTS" }},
		{"another processor.projection_bucket", dir, `"KV_OTHER"`, func(c *orderstore.Config) { c.Processor.ProjectionBucket = "OTHER" }},
		{"another processor.dead_letter_stream", dir, `"OTHER_DLQ"`, func(c *orderstore.Config) { c.Processor.DeadLetterStream = "OTHER_DLQ" }},
		{"a manifest without the stream", lacking, `"ORDER_EVENTS"]`, func(*orderstore.Config) {}},
	} {
		cfg := orderstoretest.Config(t)
		tc.change(&cfg)
		before := storeState(t, cfg.JetStream.StoreDir)
		_, err := orderstore.Restore(ctx, cfg, tc.dir, nil)
		if err == nil || !strings.Contains(err.Error(), "holds the streams") || !strings.Contains(err.Error(), tc.says) ||
			!strings.Contains(hintOf(err), "stream.name, processor.projection_bucket, processor.dead_letter_stream") {
			t.Errorf("%s: restore: %v (hint %q), want a refusal naming both sides (%s) and the keys", tc.name, err, hintOf(err), tc.says)
		}
		if after := storeState(t, cfg.JetStream.StoreDir); len(after) != len(before) {
			t.Errorf("%s: the refused restore changed the store: %d files, %d before", tc.name, len(after), len(before))
		}
	}
}

// A store whose server.max_payload is less than a restore's chunks (a valid config) is restored:
// every backup of it used to fail to restore, nats refusing the first chunk ("maximum payload
// exceeded").
func TestRestoreWithSmallMaxPayload(t *testing.T) {
	small := func(c *orderstore.Config) { c.Server.MaxPayload, c.Stream.MaxMsgSize = 16<<10, 16<<10 }
	app := orderstoretest.Start(t, small)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	js := embeddedtest.JetStream(t, app)
	for i := range 200 { // about 1 MiB that compresses little: many chunks
		var status strings.Builder
		for range 150 {
			status.WriteString(rand.Text())
		}
		if _, err := js.PublishAsync("orders.created", []byte(fmt.Sprintf(`{"order_id":"p-%d","status":"%s"}`, i, status.String()))); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := app.Backup(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := orderstoretest.Config(t)
	small(&cfg)
	if _, err := orderstore.Restore(ctx, cfg, dir, nil); err != nil {
		t.Fatalf("restore with server.max_payload %d: %v", cfg.Server.MaxPayload, err)
	}
	restored := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	st, err := embeddedtest.JetStream(t, restored).Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().State.LastSeq, m.Streams[len(m.Streams)-1].LastSeq; got != want || want != 200 {
		t.Errorf("restored stream ends at %d, the backup's at %d, want 200", got, want)
	}
}

// A restore keeps the version of the fold that built the backed-up projection (projection.json):
// it used to be labelled with the running fold's, and a projection an older fold built was never
// rebuilt. A backup of a projection built by "orders/0" is rebuilt at the restored store's start.
func TestRestoreKeepsProjectionVersion(t *testing.T) {
	app := orderstoretest.Start(t, roomyConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	publishOrders(t, embeddedtest.JetStream(t, app), []string{"v-1", "v-2"}, 0, 12)
	waitProjected(t, app)
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := app.Backup(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.ProjectionVersion != processor.ProjectionVersion {
		t.Errorf("the manifest's projection version %q, want %q", m.ProjectionVersion, processor.ProjectionVersion)
	}
	m.ProjectionVersion = "orders/0" // as an older fold built it
	if b, _ := json.Marshal(m); os.WriteFile(filepath.Join(dir, orderstore.BackupManifestFile), b, 0o600) != nil {
		t.Fatal("cannot write the manifest")
	}
	cfg := orderstoretest.Config(t)
	roomyConfig(&cfg)
	if _, err := orderstore.Restore(ctx, cfg, dir, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.JetStream.StoreDir, "projection.json")); !strings.Contains(string(b), `"orders/0"`) {
		t.Fatalf("projection.json after the restore: %q, want the backup's version orders/0", b)
	}
	restored := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	var end *orderstore.Rebuild
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if end = restored.RebuildStatus(); end == nil || end.State != status.RebuildDone {
			return fmt.Errorf("rebuild: %+v", end)
		}
		return nil
	})
	if !strings.Contains(end.Reason, `"orders/0" to "`+processor.ProjectionVersion+`"`) {
		t.Errorf("the rebuild after the restore: %+v, want one for the fold's change", end)
	}
	checkProjectionIsTheFold(t, restored)
}
