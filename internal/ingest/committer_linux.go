package ingest

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/orderstore/orderstore/internal/durable"
)

// storeSyncer returns one group-commit round for the store in dir:
// syncfs(2) of its file system, which writes back every dirty page and
// commits the journal (the blocks nats appended, the metadata it renamed
// into place without fsync, new directories). A FUSE file system is never
// sent syncfs by the kernel, so there every file and directory under
// jetstream/ is fsynced instead.
func storeSyncer(dir string) (sync func() error, closeFn func(), how string, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, nil, "", err
	}
	// Before Linux 5.8 syncfs did not report write-back errors: a failed
	// write would pass for durable. There, fsync every file instead.
	if st.Type == unix.FUSE_SUPER_MAGIC || !syncfsReportsErrors() {
		js := filepath.Join(dir, "jetstream")
		return func() error { return durable.SyncTree(js) }, func() {}, "fsync of every file", nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, "", err
	}
	return func() error { return unix.Syncfs(int(f.Fd())) }, func() { f.Close() }, "syncfs", nil
}

// fdatasync writes f's data (and the metadata needed to read it back).
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// syncfsReportsErrors reports whether the kernel is Linux 5.8 or newer,
// where syncfs returns the write-back errors of the file system.
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 8
}
