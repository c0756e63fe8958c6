//go:build !windows

package embedded

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive, non-blocking advisory lock on f: one per open file, so a second
// open of the same file, in the same process too, does not get it.
func tryLock(f *os.File) (held bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
		return true, nil
	}
	return false, err
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
