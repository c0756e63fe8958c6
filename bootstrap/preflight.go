package bootstrap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/bytesize"
)

// LockFileName is the lock file Preflight holds inside store_dir, the one embedded.Start takes.
const LockFileName = embedded.LockFileName

// PreflightConfig is what Preflight checks.
type PreflightConfig struct {
	// StoreDir is the JetStream storage directory (jetstream.store_dir).
	StoreDir string
	// MaxFileStore is the disk JetStream may use, in bytes.
	MaxFileStore int64
	// Headroom is the free disk wanted beyond what JetStream may still grow into, in bytes.
	Headroom int64
	// AllowLowDisk turns a failed free-disk check into a warning.
	AllowLowDisk bool
}

// Report is what Preflight found.
type Report struct {
	StoreDir  string   // absolute path
	FreeBytes uint64   // free disk for an unprivileged user
	UsedBytes int64    // bytes already under StoreDir/jetstream
	Warnings  []string // problems let through by AllowLowDisk
}

// Lock is the exclusive lock on a store directory. Release it after the server has shut down.
type Lock = embedded.StoreLock

// ErrLocked is matched (errors.Is) when another live server holds the store directory.
var ErrLocked = embedded.ErrLocked

// Preflight runs before nats-server starts: store_dir exists (created if missing) and is a
// directory, a probe file can be created, written, fsynced and removed, nobody else holds it, and
// the disk has room for MaxFileStore plus Headroom. On success the caller owns the returned Lock.
func Preflight(cfg PreflightConfig) (_ *Lock, _ Report, err error) {
	var rep Report
	dir := cfg.StoreDir
	what := fmt.Sprintf("store_dir %q", dir)
	if dir == "" {
		return nil, rep, errorf("preflight", "store_dir", "set jetstream.store_dir", errors.New("is empty"))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, rep, errorf("preflight", what, "", err)
	}
	rep.StoreDir = abs

	if st, err := os.Stat(abs); err == nil && !st.IsDir() {
		return nil, rep, errorf("preflight", what, "point jetstream.store_dir at a directory", errors.New("is not a directory"))
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, rep, errorf("preflight", what, dirHint(abs, err), fmt.Errorf("cannot be created: %w", unwrapPath(err)))
	}
	if err := probe(abs); err != nil {
		return nil, rep, errorf("preflight", what, dirHint(abs, err), fmt.Errorf("is not writable: %w", err))
	}

	lock, err := embedded.LockStoreDir(abs)
	if errors.Is(err, ErrLocked) {
		return nil, rep, errorf("preflight", fmt.Sprintf("store_dir %q", abs),
			"another orderstore is running on this store_dir; stop it, or give this instance its own jetstream.store_dir (two servers on one store corrupt it)", err)
	} else if err != nil {
		return nil, rep, errorf("preflight", "lock", dirHint(abs, err), unwrapPath(err))
	}
	ChownLikeDir(lock.Path(), abs) // made by `sudo orderstore check`: still the service user's to open
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()

	if rep.FreeBytes, err = FreeBytes(abs); err != nil {
		return nil, rep, errorf("preflight", what, "", fmt.Errorf("cannot read free disk space: %w", err))
	}
	rep.UsedBytes = duBytes(filepath.Join(abs, "jetstream"))
	need := uint64(max(cfg.MaxFileStore-rep.UsedBytes, 0)) + uint64(max(cfg.Headroom, 0))
	if rep.FreeBytes < need {
		msg := fmt.Errorf("free disk %s is less than jetstream.max_file_store %s (of which %s already used) plus disk_headroom %s",
			bytesize.Format(int64(rep.FreeBytes)), bytesize.Format(cfg.MaxFileStore), bytesize.Format(rep.UsedBytes), bytesize.Format(cfg.Headroom))
		if !cfg.AllowLowDisk {
			return nil, rep, errorf("preflight", what,
				"free disk space, lower jetstream.max_file_store (and stream.max_bytes), or set jetstream.allow_low_disk = true to start anyway", msg)
		}
		rep.Warnings = append(rep.Warnings, msg.Error()+" (allow_low_disk = true: starting anyway)")
	}
	return lock, rep, nil
}

// probe creates, writes, fsyncs and removes a file in dir, named at random: two preflights at once,
// in one process too, each probe their own.
func probe(dir string) error {
	f, err := os.CreateTemp(dir, ".orderstore-probe-*")
	if err != nil {
		return unwrapPath(err)
	}
	_, werr := f.Write([]byte("orderstore preflight probe\n"))
	// The calls run left to right: sync, close, remove.
	if err := errors.Join(werr, f.Sync(), f.Close(), os.Remove(f.Name())); err != nil {
		return fmt.Errorf("probe %q: %w", filepath.Base(f.Name()), err)
	}
	return nil
}

func duBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func dirHint(dir string, err error) string {
	switch {
	case errors.Is(err, fs.ErrPermission):
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			// Nothing to chown yet: the service user may not create it in its parent.
			return fmt.Sprintf("create it for the service user (e.g. install -d -o orderstore %s) or set jetstream.store_dir to a directory it owns", dir)
		}
		return fmt.Sprintf("give the service user write access (e.g. chown -R orderstore: %s) or set jetstream.store_dir to a directory it owns", dir)
	case isNotDir(err):
		return "a parent of jetstream.store_dir is a file, not a directory: fix the path"
	}
	return "check jetstream.store_dir"
}

// unwrapPath drops *PathError's repeated path: the message already names it.
func unwrapPath(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return fmt.Errorf("%s %q: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}
