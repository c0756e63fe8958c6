//go:build windows

package bootstrap

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

func isNotDir(err error) bool { return errors.Is(err, syscall.ERROR_PATH_NOT_FOUND) }

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
