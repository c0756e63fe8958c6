package orderstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/backup"
	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/storedir"
)

// Backups are JetStream snapshots in natscli's layout (internal/backup), the projection first
// and the stream after it, so the projection never holds an event the restored stream lacks:
// docs/operations.md, "Backup and restore".

// ErrBackupRunning and ErrBackupNoRoom are matched (errors.Is) by a backup refused before it began:
// another runs, or the copy would fill the store's disk.
var (
	ErrBackupRunning = backup.ErrRunning
	ErrBackupNoRoom  = backup.ErrNoRoom
)

// The shapes of a backup (internal/backup writes and reads them).
type (
	// BackupManifest is manifest.json.
	BackupManifest = backup.Manifest
	// BackupStream is one stream's snapshot in a backup, its counts as the snapshot began.
	BackupStream = backup.Stream
	// BackupProgress is reported while a backup or a restore runs.
	BackupProgress = backup.Progress
)

// errBackupStopped ends a backup under way at a stop, whose budget the stream's last sync needs.
var errBackupStopped = WithHint(errors.New("orderstore is stopping: the backup was canceled"), "run the backup again once orderstore runs")

// untilStop is ctx, also canceled with errBackupStopped once the appliance begins to stop.
func (a *Appliance) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-a.sup.closer:
			cancel(errBackupStopped)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// BackupManifestFile is the manifest's name in a backup directory.
const BackupManifestFile = backup.ManifestFile

// backupStaging names the directories under store_dir a backup through the admin API is staged in.
const backupStaging = "backup-staging-"

// Backup writes a consistent backup of the projection bucket, its history index, the dead-letter
// stream and the stream into dir (created; it must be empty), while the appliance runs; Close
// cancels it. progress, if set, is called every few chunks.
func (a *Appliance) Backup(ctx context.Context, dir string, progress func(BackupProgress)) (*BackupManifest, error) {
	ctx, cancel := a.untilStop(ctx)
	defer cancel()
	return backupStreams(ctx, a.cfg, a.spec, a.internal.Conn, a.report.StoreDir, dir, 0, progress)
}

// BackupOffline is Backup with the appliance stopped, so that the backup holds every event it
// acknowledged: it takes the store's lock (ErrLocked while orderstore runs), starts nats on the
// store as Restore does, takes the same backup into dir, and stops.
func BackupOffline(ctx context.Context, cfg Config, dir string, progress func(BackupProgress)) (*BackupManifest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lock, rep, err := cfg.lockStore()
	if errors.Is(err, ErrLocked) {
		err = WithHint(fmt.Errorf("backup -offline: %w", err), "orderstore runs on this store: stop it first, or take an online backup (without -offline)")
	}
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	d := storedir.Dir(rep.StoreDir)
	r, _, err := d.ReadRestored()
	_, marker := os.Stat(filepath.Join(rep.StoreDir, storedir.RunMarker))
	if err != nil || marker == nil || r.Restoring || d.HasStreams(legacyAccount) {
		return nil, cmp.Or(err, WithHint(fmt.Errorf("backup -offline: store %q did not stop cleanly, holds a restore that did not finish, or an older layout", rep.StoreDir),
			"start orderstore on it once (its start-up recovers the store), stop it, then back up again"))
	}
	defer bootstrap.ChownLikeDir(rep.StoreDir, rep.StoreDir) // once nats stopped: what it rewrote as root
	srv, nc, err := cfg.startOffline(ctx)
	if err != nil {
		return nil, err
	}
	m, err := backupStreams(ctx, cfg, cfg.DeclareSpec(), nc, rep.StoreDir, dir, r.SettledThrough, progress)
	nc.Close()
	// What nats rewrote at its start and stop, synced (it ran relaxed, as for a restore): the
	// store must not look stopped cleanly with a power cut's damage in it.
	return m, errors.Join(err, srv.Close(), durable.SyncTree(d.JetStream()))
}

// backupStreams backs spec's streams up on nc into dir (empty). restored is what a restore not
// started since found settled (storedir.Restored): the processor's consumer is not declared yet.
func backupStreams(ctx context.Context, cfg Config, spec bootstrap.Spec, nc *nats.Conn, storeDir, dir string, restored uint64,
	progress func(BackupProgress)) (*BackupManifest, error) {
	if err := backup.EmptyDir(dir); err != nil {
		return nil, err
	}
	m := &BackupManifest{Format: 1, Created: time.Now().UTC(), Server: cfg.Server.Name, NATSServer: NATSServerVersion}
	// A backup of an encrypted store is sealed with its key: a JetStream snapshot is plain text.
	seal := backup.Seal{Key: cfg.JetStream.EncryptionKey, Cipher: cipherOf(cfg.JetStream)}
	m.Sealed = seal.Cipher
	if c := spec.Consumer; c != nil && spec.Projection != nil && cfg.Processor.Enabled {
		// Read before the projection's snapshot: what the floor covers is
		// in it or in the dead letters, whose snapshot comes after.
		// Its info, as of now (jetstream.New with no option does not fail).
		js, _ := jetstream.New(nc)
		if cons, err := js.Consumer(ctx, spec.ConsumerStream(), c.Durable); err == nil {
			m.SettledThrough = max(restored, cons.CachedInfo().AckFloor.Stream)
		} else if m.SettledThrough = restored; restored == 0 || !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("backup: consumer %q: %w", c.Durable, err)
		}
	}
	// Before the projection's snapshot too: a takeover after it is rebuilt again, not mislabelled.
	var ps projectionState
	if b, err := os.ReadFile(filepath.Join(storeDir, projectionStateFile)); err == nil && json.Unmarshal(b, &ps) == nil {
		m.ProjectionVersion = ps.Version
	}
	for _, name := range spec.Streams() {
		bs, err := backup.Snapshot(ctx, nc, name, filepath.Join(dir, name), seal, progress)
		if err != nil {
			return nil, fmt.Errorf("backup %q: %w", name, cmp.Or(context.Cause(ctx), err))
		}
		m.Streams = append(m.Streams, *bs)
		loggerOrDiscard(cfg.Logger).Info("backup: stream saved", "stream", name, "messages", bs.Messages, "bytes", bs.Bytes)
	}
	if err := backup.WriteManifest(filepath.Join(dir, BackupManifestFile), m); err != nil {
		return nil, err
	}
	return m, nil
}

// ReadBackupManifest reads dir's manifest and checks every file against its checksum.
func ReadBackupManifest(dir string) (*BackupManifest, error) { return backup.ReadManifest(dir) }

// Restore restores the backup in dir into cfg's store, which must hold no streams, without starting
// the appliance: it takes the store's lock, starts nats on it (no listener), restores each stream
// through JetStream's restore API, and stops. Start the appliance afterwards.
func Restore(ctx context.Context, cfg Config, dir string, progress func(BackupProgress)) (*BackupManifest, error) {
	return RestoreWith(ctx, cfg, dir, RestoreOptions{Progress: progress})
}

// RestoreOptions are Restore's choices beyond the config.
type RestoreOptions struct {
	// BackupKey opens a sealed backup (one of an encrypted store) when it was sealed with another
	// key than cfg's: a restore into a store with a new key, or into a plain one. "" is cfg's key.
	BackupKey string
	// Decrypt allows a sealed backup into a store with no key (cfg's): every order plain on disk.
	Decrypt bool
	// Progress, if set, is called every few chunks.
	Progress func(BackupProgress)
}

// RestoreWith is Restore with opts. The restored store is encrypted with
// cfg's key, if set, whatever the backup was sealed with.
func RestoreWith(ctx context.Context, cfg Config, dir string, opts RestoreOptions) (*BackupManifest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := ReadBackupManifest(dir)
	if err != nil {
		return nil, err
	}
	// restored.json's settled_through is the backup's consumer stream's: applied to another
	// stream, the processor would ack new orders unapplied.
	names := make([]string, len(m.Streams))
	for i, s := range m.Streams {
		names[i] = s.Name
	}
	if want := cfg.DeclareSpec().Streams(); !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(want))) {
		return nil, WithHint(fmt.Errorf("restore: backup %q holds the streams %q, the config declares %q", dir, names, want),
			"restore with the config the backup was made with: stream.name, processor.projection_bucket, processor.dead_letter_stream "+
				"and hub.stream name the streams (processor.history_max_bytes and jetstream.max_file_store: whether a history index is kept)")
	}
	key := ""
	if m.Sealed != "" {
		if cfg.JetStream.EncryptionKey == "" && !opts.Decrypt {
			return nil, WithHint(fmt.Errorf("%w: backup %q is sealed (%s) and the config names no encryption key: the store would hold every order in plain text", ErrEncryption, dir, m.Sealed),
				"run restore with the store's key: jetstream.encryption_key_file, or systemd's credential (systemd-run --pipe --wait -p LoadCredentialEncrypted="+
					CredentialName+":/etc/credstore.encrypted/"+CredentialName+" orderstore restore ...); for a plain store, orderstore restore -decrypt")
		}
		if key = cmp.Or(opts.BackupKey, cfg.JetStream.EncryptionKey); key == "" {
			return nil, WithHint(fmt.Errorf("%w: backup %q is sealed (%s): restoring it needs the key of the store it came from", ErrEncryption, dir, m.Sealed),
				"give that key: jetstream.encryption_key_file in the config restored into, or orderstore restore -backup-key-file FILE")
		}
		if err := backup.CheckSealKey(dir, m, key); err != nil {
			return nil, WithHint(fmt.Errorf("%w: backup %q: %w", ErrEncryption, dir, err),
				"give the key of the store the backup came from (orderstore restore -backup-key-file FILE)")
		}
	}
	// A new key check is written only to a store that holds no stream.
	lock, rep, err := cfg.lockStore()
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if d := storedir.Dir(rep.StoreDir); d.HasStreams(StreamAccount) || d.HasStreams(legacyAccount) {
		return nil, WithHint(fmt.Errorf("restore: store %q already holds streams", rep.StoreDir),
			"restore into an empty jetstream.store_dir (move the old one away first)")
	}
	// Until it is done, start-up refuses the store (openStore).
	if err := storedir.Dir(rep.StoreDir).WriteRestored(storedir.Restored{Restoring: true}); err != nil {
		return nil, err
	}
	srv, nc, err := cfg.startOffline(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	defer nc.Close()
	for _, s := range m.Streams {
		if err := backup.RestoreStream(ctx, nc, filepath.Join(dir, s.Name), s, key, opts.Progress); err != nil {
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
	ps, _ := json.Marshal(projectionState{Version: m.ProjectionVersion}) // the backup's fold
	if err := durable.WriteFile(filepath.Join(rep.StoreDir, projectionStateFile), append(ps, '\n'), 0o640); err != nil {
		return nil, err
	}
	// The restore is done. The processor starts over on the restored
	// stream: what the backed-up one settled is not handled again.
	r := storedir.Restored{Stream: cfg.DeclareSpec().ConsumerStream(), SettledThrough: m.SettledThrough}
	if err := storedir.Dir(rep.StoreDir).WriteRestored(r); err != nil {
		return nil, err
	}
	bootstrap.ChownLikeDir(rep.StoreDir, rep.StoreDir) // restored by root: still the service user's to open
	return m, nil
}

// startOffline starts nats on cfg's store, locked, as Restore and BackupOffline run it
// (restoreConfig), and connects to it.
func (cfg Config) startOffline(ctx context.Context) (*embedded.Server, *nats.Conn, error) {
	id, err := natsconf.NewIdentity()
	if err != nil {
		return nil, nil, err
	}
	ec, err := cfg.restoreConfig().embeddedConfig(loggerOrDiscard(cfg.Logger), id)
	if err != nil {
		return nil, nil, err
	}
	// A loopback port of its own, not in-process: over the in-process pipe, nats-server's restore
	// stalled after 256 KiB (its read loop blocks writing each chunk to the restore).
	ec.Host, ec.Port = "127.0.0.1", -1
	srv, err := embedded.Start(ctx, ec)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(srv.ClientURL(), id.Options(natsconf.InternalInbox)...)
	if err != nil {
		return nil, nil, errors.Join(err, srv.Close())
	}
	return srv, nc, nil
}

// restoreConfig is cfg as Restore runs nats on it: one node, its chunks taken whatever
// server.max_payload, relaxed syncing whatever the durability (nats gives up on a chunk that takes
// 5 s: after 256 KiB with an fsync per event); every file is fsynced once the restore is done.
func (cfg Config) restoreConfig() Config {
	cfg.Cluster, cfg.LeafNode = ClusterConfig{}, LeafNodeConfig{ReconnectInterval: time.Second}
	cfg.Stream.Replicas = 1
	cfg.Server.MaxPayload = max(cfg.Server.MaxPayload, backup.RestoreChunk)
	cfg.JetStream.Durability, cfg.JetStream.SyncInterval = DurabilityInterval, 2*time.Minute
	return cfg
}

// backupTar writes a backup as a tar: the backup is made in a directory under the store (same disk,
// no memory), then sent, then removed; one a crash left is removed at the next start (openStore).
func (a *Appliance) backupTar(ctx context.Context, w io.Writer) error {
	// One backup at a time: each takes the store's size again on its disk.
	if !a.backupMu.TryLock() {
		return WithHint(ErrBackupRunning, "wait for the other backup to finish, then run this one again")
	}
	defer a.backupMu.Unlock()
	ctx, cancel := a.untilStop(ctx)
	defer cancel()
	// The copy must not fill the store's disk (that would stop writes):
	// it needs what JetStream stores, on top of the headroom.
	if free, err := bootstrap.FreeBytes(a.report.StoreDir); err == nil {
		if ai, err := a.js.AccountInfo(ctx); err == nil && int64(free) < int64(ai.Store)+a.cfg.JetStream.DiskHeadroom {
			return WithHint(fmt.Errorf("backup: %d bytes free under %q, the copy needs up to %d plus jetstream.disk_headroom %d: %w",
				free, a.report.StoreDir, ai.Store, a.cfg.JetStream.DiskHeadroom, ErrBackupNoRoom),
				"free disk under jetstream.store_dir: the copy is staged there before it is sent")
		}
	}
	tmp, err := os.MkdirTemp(a.report.StoreDir, backupStaging)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "b")
	if _, err := a.Backup(ctx, dir, nil); err != nil {
		return err
	}
	return backup.WriteTar(dir, stopWriter{ctx, w})
}

// stopWriter fails once ctx ends: a stop cuts the tar being sent.
type stopWriter struct {
	ctx context.Context
	w   io.Writer
}

func (s stopWriter) Write(p []byte) (int, error) {
	if err := context.Cause(s.ctx); err != nil {
		return 0, err
	}
	return s.w.Write(p)
}
