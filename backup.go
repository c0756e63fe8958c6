package orderstore

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"

	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/storedir"
)

// Backups are JetStream snapshots, one directory per stream in the layout
// `nats backup` (natscli) writes and `nats backup validate` reads:
// <dir>/<stream>/backup.json (the stream's configuration and state) and
// <dir>/<stream>/stream.arc.s2 (the snapshot), plus <dir>/manifest.json
// with counts and SHA-256 checksums.
//
// Consistency across the three streams: the projection bucket is
// snapshotted first, then the dead-letter stream, then ORDER_EVENTS, each
// consistent in itself. The projection therefore never holds an event the
// restored stream lacks. The processor's consumer is not in the backup:
// the first start after a restore declares it again from the start of
// the stream, and the projection skips every event it already applied
// (and the dead-letter stream's dedupe window, as long as its max_age,
// stores no dead letter twice), so the projection is again the fold of
// the stream, and events acknowledged after the projection's snapshot
// are applied.

// ErrBackupRunning and ErrBackupNoRoom are matched (errors.Is) by a backup
// refused before it began: another runs, or the copy would fill the
// store's disk.
var (
	ErrBackupRunning = errors.New("a backup is already running")
	ErrBackupNoRoom  = errors.New("not enough free disk for the backup's copy")
)

// BackupManifest is manifest.json.
type BackupManifest struct {
	Format     int            `json:"format"`
	Created    time.Time      `json:"created"`
	Server     string         `json:"server"`
	NATSServer string         `json:"nats_server"`
	Streams    []BackupStream `json:"streams"`
}

// BackupStream is one stream's snapshot in a backup. The counts are the
// stream's as its snapshot began.
type BackupStream struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Files maps each file of the stream's directory to its SHA-256.
	Files map[string]string `json:"files"`
}

const (
	backupMetaFile = "backup.json"
	backupDataFile = "stream.arc.s2"
	// BackupManifestFile is the manifest's name in a backup directory.
	BackupManifestFile = "manifest.json"
)

// BackupProgress is reported while a backup runs.
type BackupProgress struct {
	Stream        string
	BytesReceived int64
	BytesTotal    uint64 // the stream's size (the snapshot is compressed: usually less arrives)
}

// Backup writes a consistent backup of the projection bucket, its history
// index, the dead-letter stream and the stream into dir (created; it must be empty),
// while the appliance runs. progress, if set, is called every few
// chunks.
func (a *Appliance) Backup(ctx context.Context, dir string, progress func(BackupProgress)) (*BackupManifest, error) {
	if err := emptyDir(dir); err != nil {
		return nil, err
	}
	spec := a.cfg.DeclareSpec()
	m := &BackupManifest{Format: 1, Created: time.Now().UTC(), Server: a.cfg.Server.Name, NATSServer: NATSServerVersion}
	var names []string
	if spec.Projection != nil {
		names = append(names, "KV_"+spec.Projection.Bucket)
	}
	if spec.History != nil {
		// After the projection: a chunk a record counts is in the backup.
		names = append(names, spec.History.Name)
	}
	if spec.DeadLetter != nil {
		names = append(names, spec.DeadLetter.Name)
	}
	names = append(names, spec.Stream.Name)
	if spec.Aggregate != nil {
		names = append(names, spec.Aggregate.Name)
	}
	for _, name := range names {
		bs, err := snapshotStream(ctx, a.internal.Conn, a.js, name, filepath.Join(dir, name), progress)
		if err != nil {
			return nil, fmt.Errorf("backup %q: %w", name, err)
		}
		m.Streams = append(m.Streams, *bs)
		a.log.Info("backup: stream saved", "stream", name, "messages", bs.Messages, "bytes", bs.Bytes)
	}
	if err := writeJSONFile(filepath.Join(dir, BackupManifestFile), m); err != nil {
		return nil, err
	}
	return m, nil
}

// snapshotStream saves one stream's snapshot (without its consumers)
// through JetStream's snapshot API into dir.
func snapshotStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name, dir string, progress func(BackupProgress)) (*BackupStream, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, backupDataFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	w := io.MultiWriter(f, h)

	inbox := nc.NewRespInbox()
	done := make(chan error, 1)
	var received int64
	var total uint64
	chunks := 0
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		if len(m.Data) == 0 {
			if st := m.Header.Get("Status"); st != "" && st != "204" {
				done <- fmt.Errorf("snapshot ended with status %s %s", st, m.Header.Get("Description"))
			} else {
				done <- nil
			}
			return
		}
		if _, err := w.Write(m.Data); err != nil {
			done <- err
			return
		}
		received += int64(len(m.Data))
		chunks++
		if m.Reply != "" {
			m.Respond(nil) // flow control: the next window
		}
		if progress != nil && chunks%64 == 0 {
			progress(BackupProgress{Stream: name, BytesReceived: received, BytesTotal: total})
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)

	req, _ := json.Marshal(map[string]any{"deliver_subject": inbox, "no_consumers": true, "chunk_size": 128 << 10})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.SNAPSHOT."+name, req)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("snapshot request: %w", err)
	}
	var sr struct {
		Config json.RawMessage       `json:"config"`
		State  jetstream.StreamState `json:"state"`
		Error  *jetstream.APIError   `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &sr); err != nil {
		return nil, fmt.Errorf("snapshot response: %w", err)
	}
	if sr.Error != nil {
		return nil, sr.Error
	}
	total = sr.State.Bytes
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	var state map[string]any
	sb, _ := json.Marshal(sr.State)
	json.Unmarshal(sb, &state)
	meta, _ := json.MarshalIndent(map[string]any{"config": sr.Config, "state": state}, "", "  ")
	if err := durable.WriteFile(filepath.Join(dir, backupMetaFile), meta, 0o600); err != nil {
		return nil, err
	}
	// The data file's name, and the stream's directory in the backup's.
	if err := errors.Join(durable.SyncDir(dir), durable.SyncDir(filepath.Dir(dir))); err != nil {
		return nil, err
	}
	ms := sha256.Sum256(meta)
	if progress != nil {
		progress(BackupProgress{Stream: name, BytesReceived: received, BytesTotal: total})
	}
	return &BackupStream{Name: name, Messages: sr.State.Msgs, Bytes: sr.State.Bytes, FirstSeq: sr.State.FirstSeq, LastSeq: sr.State.LastSeq,
		Files: map[string]string{backupDataFile: hex.EncodeToString(h.Sum(nil)), backupMetaFile: hex.EncodeToString(ms[:])}}, nil
}

// ReadBackupManifest reads dir's manifest and checks every file against
// its checksum.
func ReadBackupManifest(dir string) (*BackupManifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, BackupManifestFile))
	if err != nil {
		return nil, withHint(fmt.Errorf("backup %q: %w", dir, err), "pass the directory `orderstore backup` wrote")
	}
	var m BackupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("backup %q: manifest: %w", dir, err)
	}
	for _, s := range m.Streams {
		for file, sum := range s.Files {
			p := filepath.Join(dir, s.Name, file)
			if strings.ContainsAny(s.Name, "/\\") || strings.Contains(s.Name, "..") || strings.ContainsAny(file, "/\\") {
				return nil, fmt.Errorf("backup %q: manifest names %q: not a stream file", dir, p)
			}
			f, err := os.Open(p)
			if err != nil {
				return nil, fmt.Errorf("backup %q: %w", dir, err)
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("backup %q: %w", dir, err)
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != sum {
				return nil, fmt.Errorf("backup %q: %s: checksum %s, manifest says %s: the file is damaged", dir, p, got, sum)
			}
		}
	}
	return &m, nil
}

// Restore restores the backup in dir into cfg's store, which must hold no
// streams, without starting the appliance: it takes the store's lock,
// starts nats on it (no listener), restores each stream through
// JetStream's restore API, and stops. Start the appliance afterwards.
func Restore(ctx context.Context, cfg Config, dir string, progress func(BackupProgress)) (*BackupManifest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := ReadBackupManifest(dir)
	if err != nil {
		return nil, err
	}
	lock, rep, err := bootstrap.Preflight(cfg.preflightConfig())
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	for _, acc := range []string{StreamAccount, legacyAccount} {
		if storedir.Dir(rep.StoreDir).HasStreams(acc) {
			return nil, withHint(fmt.Errorf("restore: store %q already holds streams", rep.StoreDir),
				"restore into an empty jetstream.store_dir (move the old one away first)")
		}
	}
	id, err := natsconf.NewIdentity()
	if err != nil {
		return nil, err
	}
	c := cfg
	c.Cluster, c.LeafNode = ClusterConfig{}, LeafNodeConfig{ReconnectInterval: time.Second}
	c.Stream.Replicas = 1
	// nats-server stores each restored message with the store's sync
	// policy, and gives up on a restore whose chunk takes 5 s: with an
	// fsync per message a restore of more than a few thousand events
	// stalls (measured: 256 KiB in, then "restore failed"). The restore
	// runs with relaxed syncing, and every file is fsynced once it is done.
	c.JetStream.SyncInterval = 2 * time.Minute
	ec, err := c.embeddedConfig(loggerOrDiscard(cfg.Logger), id)
	if err != nil {
		return nil, err
	}
	// A loopback port of its own, not an in-process connection: over the
	// in-process pipe, nats-server's restore stalled after 256 KiB (its
	// read loop blocks writing each chunk to the restore).
	ec.Host, ec.Port = "127.0.0.1", -1
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	nc, err := nats.Connect(srv.ClientURL(), id.Options(natsconf.InternalInbox)...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	for _, s := range m.Streams {
		if err := restoreStream(ctx, nc, filepath.Join(dir, s.Name), s, progress); err != nil {
			return nil, fmt.Errorf("restore %q: %w", s.Name, err)
		}
	}
	nc.Close()
	if err := srv.Close(); err != nil {
		return nil, err
	}
	if err := durable.SyncTree(storedir.Dir(rep.StoreDir).JetStream()); err != nil {
		return nil, fmt.Errorf("restore: sync the store: %w", err)
	}
	return m, nil
}

func restoreStream(ctx context.Context, nc *nats.Conn, dir string, s BackupStream, progress func(BackupProgress)) error {
	meta, err := os.ReadFile(filepath.Join(dir, backupMetaFile))
	if err != nil {
		return err
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(meta, &req); err != nil {
		return fmt.Errorf("%s: %w", backupMetaFile, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.RESTORE."+s.Name, meta)
	cancel()
	if err != nil {
		return fmt.Errorf("restore request: %w", err)
	}
	var rr struct {
		DeliverSubject string              `json:"deliver_subject"`
		Error          *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &rr); err != nil {
		return err
	}
	if rr.Error != nil {
		return rr.Error
	}
	f, err := os.Open(filepath.Join(dir, backupDataFile))
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var sent int64
	for n := 0; ; n++ {
		k, err := f.Read(buf)
		if k > 0 {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			r, err := nc.RequestWithContext(cctx, rr.DeliverSubject, buf[:k])
			cancel()
			if err != nil {
				return fmt.Errorf("chunk %d: %w", n, err)
			}
			if len(r.Data) > 0 && strings.Contains(string(r.Data), `"error"`) {
				return fmt.Errorf("chunk %d: %s", n, r.Data)
			}
			sent += int64(k)
			if progress != nil && n%64 == 0 {
				progress(BackupProgress{Stream: s.Name, BytesReceived: sent, BytesTotal: s.Bytes})
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	r, err := nc.RequestWithContext(fctx, rr.DeliverSubject, nil)
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	var fin struct {
		State *jetstream.StreamState `json:"state"`
		Error *jetstream.APIError    `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &fin); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if fin.Error != nil {
		return fin.Error
	}
	// The manifest's counts are the stream's as its snapshot began; a
	// live stream may have moved on a little while it was taken (a
	// bucket replaces revisions), never back.
	if fin.State == nil || fin.State.LastSeq < s.LastSeq {
		return fmt.Errorf("restored state %+v ends before the manifest's last sequence %d", fin.State, s.LastSeq)
	}
	if progress != nil {
		progress(BackupProgress{Stream: s.Name, BytesReceived: sent, BytesTotal: s.Bytes})
	}
	return nil
}

func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("backup %q: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("backup %q: %w", dir, err)
	}
	if len(entries) > 0 {
		return withHint(fmt.Errorf("backup %q is not empty", dir), "pass a new or empty directory")
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	// The manifest says the backup is complete: written last, atomically
	// and durably, so that a crash never leaves a torn one.
	return durable.WriteFile(path, b, 0o600)
}

// backupTar writes a backup as a tar stream: the backup is made in a
// directory under the store (same disk, no memory), then sent, then
// removed.
func (a *Appliance) backupTar(ctx context.Context, w io.Writer) error {
	// One backup at a time: each takes the store's size again on its disk.
	if !a.backupMu.TryLock() {
		return ErrBackupRunning
	}
	defer a.backupMu.Unlock()
	// The copy must not fill the store's disk (that would stop writes):
	// it needs what JetStream stores, on top of the headroom.
	if free, err := bootstrap.FreeBytes(a.report.StoreDir); err == nil {
		if ai, err := a.js.AccountInfo(ctx); err == nil && int64(free) < int64(ai.Store)+a.cfg.JetStream.DiskHeadroom {
			return fmt.Errorf("backup: %d bytes free under %q, the copy needs up to %d plus jetstream.disk_headroom %d: %w",
				free, a.report.StoreDir, ai.Store, a.cfg.JetStream.DiskHeadroom, ErrBackupNoRoom)
		}
	}
	tmp, err := os.MkdirTemp(a.report.StoreDir, "backup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "b")
	if _, err := a.Backup(ctx, dir, nil); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	// The manifest last: a client that has it has every file before it.
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != BackupManifestFile {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	files = append(files, filepath.Join(dir, BackupManifestFile))
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
