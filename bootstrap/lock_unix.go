//go:build !windows

package bootstrap

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// FreeBytes returns the free disk under dir for an unprivileged user.
func FreeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// ChownLikeDir gives path and all under it the owner of dir when run as root (lockOwner): what root
// leaves in the service user's store (a lock file, a restored store) the service can still open.
func ChownLikeDir(path, dir string) {
	st, err := os.Stat(dir)
	if err != nil {
		return
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	if uid, gid, ok := lockOwner(os.Geteuid(), sys.Uid, sys.Gid); ok {
		_ = filepath.Walk(path, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, gid) })
	}
}

// lockOwner says whether a lock file that euid created in a store dir owned by dirUID:dirGID goes
// to the dir's owner, and to which uid and gid. Only root can hand it over, and must when the store
// belongs to another user (say `sudo orderstore check` on the service user's store): a root-owned
// 0640 lock file could not be opened by the service any more.
func lockOwner(euid int, dirUID, dirGID uint32) (uid, gid int, chown bool) {
	if euid != 0 || dirUID == 0 {
		return 0, 0, false
	}
	return int(dirUID), int(dirGID), true
}
