//go:build windows

package bootstrap

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

func tryLock(f *os.File) (held bool, err error) {
	// Lock one byte far past the PID text, so other processes can still read who holds the lock.
	ol := &windows.Overlapped{OffsetHigh: 1}
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return true, nil
	}
	return false, err
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ERROR_PATH_NOT_FOUND) }

func unlock(f *os.File) error {
	ol := &windows.Overlapped{OffsetHigh: 1}
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
}

// FreeBytes returns the free disk under dir for an unprivileged user.
func FreeBytes(dir string) (uint64, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, err
	}
	var avail, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &free); err != nil {
		return 0, err
	}
	return avail, nil
}

func ChownLikeDir(string, string) {}
