//go:build linux

package powerloss_test

import (
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// fileState is what is durable of one backing inode: its first synced
// bytes, and the pre-images of those that were changed since. Rolling
// back writes the pre-images newest first (so the oldest, the synced
// bytes, win) and truncates to synced.
type fileState struct {
	mu     sync.Mutex
	synced int64    // size at the last fsync
	undo   []extent // pre-images of bytes below synced, oldest first
	noKeep bool     // it was removed before it could be linked into keep/
}

type extent struct {
	off  int64
	data []byte
}

// save keeps the current content of [off, off+n) below synced; the
// caller holds mu. Bytes past the current end of file have none: they
// were cut off by a truncate whose pre-image is already saved.
func (s *fileState) save(fd int, off, n int64) syscall.Errno {
	if n <= 0 || off >= s.synced {
		return 0
	}
	end := min(off+n, s.synced)
	buf := make([]byte, end-off)
	got := 0
	for got < len(buf) {
		k, err := syscall.Pread(fd, buf[got:], off+int64(got))
		if err != nil {
			return fs.ToErrno(err)
		}
		if k == 0 {
			break
		}
		got += k
	}
	if got > 0 {
		s.undo = append(s.undo, extent{off, buf[:got]})
	}
	return 0
}

func (s *fileState) write(fd int, data []byte, off int64, sync bool) (int, syscall.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errno := s.save(fd, off, int64(len(data))); errno != 0 {
		return 0, errno
	}
	n, err := syscall.Pwrite(fd, data, off)
	if err != nil {
		return n, fs.ToErrno(err)
	}
	if sync {
		return n, s.syncLocked(fd)
	}
	return n, 0
}

func (s *fileState) truncate(fd int, size int64) syscall.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	if size < st.Size {
		if errno := s.save(fd, size, st.Size-size); errno != 0 {
			return errno
		}
	}
	return fs.ToErrno(syscall.Ftruncate(fd, size))
}

// allocate is fallocate(2). Punching a hole or zeroing a range changes
// bytes, so their pre-image is kept; collapsing or inserting a range
// shifts the file and is refused.
func (s *fileState) allocate(fd int, off, n int64, mode uint32) syscall.Errno {
	if mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0 {
		return syscall.EOPNOTSUPP
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		if errno := s.save(fd, off, n); errno != 0 {
			return errno
		}
	}
	return fs.ToErrno(unix.Fallocate(fd, mode, off, n))
}

func (s *fileState) sync(fd int) syscall.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(fd)
}

func (s *fileState) syncLocked(fd int) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	s.synced, s.undo = st.Size, nil
	return 0
}

// rollback restores the durable content of the file at path. It returns
// how many bytes that discarded and whether anything changed.
func (s *fileState) rollback(path string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	discarded := max(fi.Size()-s.synced, 0)
	for i := len(s.undo) - 1; i >= 0; i-- {
		e := s.undo[i]
		if _, err := f.WriteAt(e.data, e.off); err != nil {
			return 0, false, err
		}
		discarded += int64(len(e.data))
	}
	changed := len(s.undo) > 0 || fi.Size() != s.synced
	if err := f.Truncate(s.synced); err != nil {
		return 0, false, err
	}
	s.undo = nil
	return discarded, changed, nil
}
