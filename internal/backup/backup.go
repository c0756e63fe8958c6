// Package backup writes and restores orderstore's backups: JetStream snapshots, one directory per
// stream in the layout `nats backup` (natscli) writes and `nats backup validate` reads:
// <dir>/<stream>/backup.json (the stream's configuration and state) and
// <dir>/<stream>/stream.arc.s2 (the snapshot), plus <dir>/manifest.json with counts and SHA-256
// checksums. Which streams, in what order, is for the appliance to say (Appliance.Backup).
package backup

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
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/hint"
)

// ErrRunning and ErrNoRoom refuse a backup before it begins: another runs, or the copy would fill
// the store's disk (orderstore's ErrBackupRunning and ErrBackupNoRoom).
var (
	ErrRunning = errors.New("a backup is already running")
	ErrNoRoom  = errors.New("not enough free disk for the backup's copy")
)

// Manifest is manifest.json.
type Manifest struct {
	Format     int       `json:"format"`
	Created    time.Time `json:"created"`
	Server     string    `json:"server"`
	NATSServer string    `json:"nats_server"`
	Streams    []Stream  `json:"streams"`
	// Sealed names the cipher the stream files are sealed with (the
	// store's key: seal.go); "" for a backup of a plain store.
	Sealed string `json:"sealed,omitempty"`
	// SettledThrough is the processor's ack floor as the backup began (before the projection's
	// snapshot): every event up to it is in the projection or the dead letters. Zero: no processor.
	SettledThrough uint64 `json:"settled_through,omitempty"`
	// ProjectionVersion is the fold version that built the projection (projection.json); "":
	// unknown, and the restored store's first start rebuilds the projection.
	ProjectionVersion string `json:"projection_version,omitempty"`
}

// Stream is one stream's snapshot in a backup. The counts are the stream's as its snapshot began.
type Stream struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Files maps each file of the stream's directory to its SHA-256.
	Files map[string]string `json:"files"`
}

const (
	metaFile = "backup.json"
	dataFile = "stream.arc.s2"
	// ManifestFile is the manifest's name in a backup directory.
	ManifestFile = "manifest.json"
)

// Progress is reported while a backup runs.
type Progress struct {
	Stream        string
	BytesReceived int64
	BytesTotal    uint64 // the stream's size (the snapshot is compressed: usually less arrives)
}

// Seal is the key and cipher a backup's data files are sealed with; a zero Seal writes them plain.
type Seal struct{ Key, Cipher string }

// Snapshot saves one stream's snapshot (without its consumers)
// through JetStream's snapshot API into dir, sealed with seal's key if set.
func Snapshot(ctx context.Context, nc *nats.Conn, name, dir string, seal Seal, progress func(Progress)) (*Stream, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, dataFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	var w io.Writer = io.MultiWriter(f, h) // the checksum is of the file as stored
	var sealer io.WriteCloser
	if seal.Key != "" {
		if sealer, err = NewSealWriter(w, seal.Key, seal.Cipher); err != nil {
			return nil, err
		}
		w = sealer
	}

	inbox := nc.NewRespInbox()
	// The first outcome is kept: a later one (after a failed write) must not block the callback.
	done := make(chan error, 1)
	finish := func(err error) {
		select {
		case done <- err:
		default:
		}
	}
	var received int64
	var total atomic.Uint64 // set once the snapshot's answer came: chunks may come before it
	chunks := 0
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		if len(m.Data) == 0 {
			if st := m.Header.Get("Status"); st != "" && st != "204" {
				finish(fmt.Errorf("snapshot ended with status %s %s", st, m.Header.Get("Description")))
			} else {
				finish(nil)
			}
			return
		}
		if _, err := w.Write(m.Data); err != nil {
			finish(err)
			return
		}
		received += int64(len(m.Data))
		chunks++
		if m.Reply != "" {
			m.Respond(nil) // flow control: the next window
		}
		if progress != nil && chunks%64 == 0 {
			progress(Progress{Stream: name, BytesReceived: received, BytesTotal: total.Load()})
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)

	req, _ := json.Marshal(map[string]any{"deliver_subject": inbox, "no_consumers": true, "chunk_size": 128 << 10})
	var sr struct {
		Config json.RawMessage       `json:"config"`
		State  jetstream.StreamState `json:"state"`
	}
	if err := request(ctx, nc, 30*time.Second, "snapshot", "$JS.API.STREAM.SNAPSHOT."+name, req, &sr); err != nil {
		return nil, err
	}
	total.Store(sr.State.Bytes)
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if sealer != nil {
		if err := sealer.Close(); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	meta, _ := json.MarshalIndent(map[string]any{"config": sr.Config, "state": sr.State}, "", "  ")
	if err := durable.WriteFile(filepath.Join(dir, metaFile), meta, 0o600); err != nil {
		return nil, err
	}
	// The data file's name, and the stream's directory in the backup's.
	if err := errors.Join(durable.SyncDir(dir), durable.SyncDir(filepath.Dir(dir))); err != nil {
		return nil, err
	}
	ms := sha256.Sum256(meta)
	if progress != nil {
		progress(Progress{Stream: name, BytesReceived: received, BytesTotal: total.Load()})
	}
	return &Stream{Name: name, Messages: sr.State.Msgs, Bytes: sr.State.Bytes, FirstSeq: sr.State.FirstSeq, LastSeq: sr.State.LastSeq,
		Files: map[string]string{dataFile: hex.EncodeToString(h.Sum(nil)), metaFile: hex.EncodeToString(ms[:])}}, nil
}

// ReadManifest reads dir's manifest and checks every file against its checksum.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, hint.Wrap(fmt.Errorf("backup %q: %w", dir, err), "pass the directory `orderstore backup` wrote")
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("backup %q: manifest: %w", dir, err)
	}
	if m.Format != 1 {
		return nil, hint.Wrap(fmt.Errorf("backup %q: manifest format %d, this orderstore reads format 1", dir, m.Format),
			"restore it with the orderstore release that made it")
	}
	for _, s := range m.Streams {
		if s.Name == "" || strings.ContainsAny(s.Name, "./\\*> \t\n") || len(s.Files) != 2 || s.Files[metaFile] == "" || s.Files[dataFile] == "" {
			return nil, hint.Wrap(fmt.Errorf("backup %q: manifest: stream %q, files %d: want a stream's name and its files %s and %s",
				dir, s.Name, len(s.Files), metaFile, dataFile), "the manifest is not one orderstore backup wrote: use another backup")
		}
		for file, sum := range s.Files {
			p := filepath.Join(dir, s.Name, file)
			if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
				return nil, hint.Wrap(fmt.Errorf("backup %q: %s is not a regular file (%s)", dir, p, fi.Mode()), "copy the backup's files themselves, not links to them")
			}
			h := sha256.New()
			f, err := os.Open(p)
			if err == nil {
				_, err = io.Copy(h, f)
				f.Close()
			}
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

// RestoreChunk is the size of the chunks RestoreStream sends: the restore's server takes them.
const RestoreChunk = 64 << 10

// RestoreStream restores one stream's snapshot, saved in dir, through JetStream's restore API on
// nc, and checks that the restored stream ends where the manifest says. key opens a sealed snapshot
// ("" for a plain one).
func RestoreStream(ctx context.Context, nc *nats.Conn, dir string, s Stream, key string, progress func(Progress)) error {
	meta, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(meta, new(map[string]json.RawMessage)); err != nil {
		return fmt.Errorf("%s: %w", metaFile, err)
	}
	var rr struct {
		DeliverSubject string `json:"deliver_subject"`
	}
	if err := request(ctx, nc, 30*time.Second, "restore", "$JS.API.STREAM.RESTORE."+s.Name, meta, &rr); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(dir, dataFile))
	if err != nil {
		return err
	}
	defer f.Close()
	var data io.Reader = f
	if key != "" {
		if data, err = NewOpenReader(f, key); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, dataFile), err)
		}
	}
	buf := make([]byte, RestoreChunk)
	var sent int64
	for n := 0; ; n++ {
		k, err := io.ReadFull(data, buf)
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
				progress(Progress{Stream: s.Name, BytesReceived: sent, BytesTotal: s.Bytes})
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break // the last chunk was short, or there is none after it
		}
		if err != nil {
			return err
		}
	}
	var fin struct {
		State *jetstream.StreamState `json:"state"`
	}
	if err := request(ctx, nc, time.Hour, "finish", rr.DeliverSubject, nil, &fin); err != nil {
		return err
	}
	// The manifest's counts are the stream's as its snapshot began; a live stream may have moved on
	// a little while it was taken (a bucket replaces revisions), never back.
	if fin.State == nil || fin.State.LastSeq < s.LastSeq {
		return fmt.Errorf("restored state %+v ends before the manifest's last sequence %d", fin.State, s.LastSeq)
	}
	if progress != nil {
		progress(Progress{Stream: s.Name, BytesReceived: sent, BytesTotal: s.Bytes})
	}
	return nil
}

// request sends req to subj, waits up to timeout for the answer and
// decodes it into v; the answer's JetStream API error is the error.
func request(ctx context.Context, nc *nats.Conn, timeout time.Duration, what, subj string, req []byte, v any) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := nc.RequestWithContext(rctx, subj, req)
	if err != nil {
		return fmt.Errorf("%s request: %w", what, err)
	}
	var e struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := errors.Join(json.Unmarshal(resp.Data, v), json.Unmarshal(resp.Data, &e)); err != nil {
		return fmt.Errorf("%s response: %w", what, err)
	}
	if e.Error != nil {
		return e.Error
	}
	return nil
}

// EmptyDir creates dir, or checks that it is empty.
func EmptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("backup %q: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("backup %q: %w", dir, err)
	}
	if len(entries) > 0 {
		return hint.Wrap(fmt.Errorf("backup %q is not empty", dir), "pass a new or empty directory")
	}
	return nil
}

// WriteManifest writes m as manifest.json at path.
func WriteManifest(path string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	// The manifest says the backup is complete: written last, atomically
	// and durably, so that a crash never leaves a torn one.
	return durable.WriteFile(path, b, 0o600)
}

// WriteTar writes the backup in dir to w as a tar stream, the manifest
// last: a reader that has it has every file before it.
func WriteTar(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != ManifestFile {
			files = append(files, p)
		}
		return err
	}); err != nil {
		return err
	}
	files = append(files, filepath.Join(dir, ManifestFile))
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
