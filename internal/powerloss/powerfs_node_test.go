//go:build linux

package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose changes are tracked. It overrides every
// operation that creates nodes (so that inode numbers are the backing
// ones: keep/ holds every inode, so none is reused before the next cut),
// changes the namespace, opens files or syncs; reads of metadata are the
// loopback's.
type node struct {
	fs.LoopbackNode
	pfs *FS
}

var (
	_ fs.NodeLookuper        = (*node)(nil)
	_ fs.NodeCreater         = (*node)(nil)
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeMkdirer         = (*node)(nil)
	_ fs.NodeRmdirer         = (*node)(nil)
	_ fs.NodeUnlinker        = (*node)(nil)
	_ fs.NodeRenamer         = (*node)(nil)
	_ fs.NodeLinker          = (*node)(nil)
	_ fs.NodeSymlinker       = (*node)(nil)
	_ fs.NodeMknoder         = (*node)(nil)
	_ fs.NodeTmpfiler        = (*node)(nil)
	_ fs.NodeSetattrer       = (*node)(nil)
	_ fs.NodeFsyncer         = (*node)(nil)
	_ fs.NodeOpendirHandler  = (*node)(nil)
	_ fs.NodeCopyFileRanger  = (*node)(nil)
	_ fs.FileReader          = (*file)(nil)
	_ fs.FileWriter          = (*file)(nil)
	_ fs.FileGetattrer       = (*file)(nil)
	_ fs.FileReleaser        = (*file)(nil)
	_ fs.FileFlusher         = (*file)(nil)
	_ fs.FileAllocater       = (*file)(nil)
	_ fs.FileLseeker         = (*file)(nil)
	_ fs.FileReaddirenter    = dirHandle{}
	_ fs.FileReleasedirer    = dirHandle{}
	_ fs.FileSeekdirer       = dirHandle{}
	_ fs.FilePassthroughFder = (*fs.LoopbackFile)(nil) // what file must not be
)

// path is the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.pfs.live, n.Path(nil))
}

func (n *node) child(ctx context.Context, st *syscall.Stat_t, out *fuse.Attr) *fs.Inode {
	out.FromStat(st)
	c := &node{LoopbackNode: fs.LoopbackNode{RootData: n.RootData}, pfs: n.pfs}
	return n.NewInode(ctx, c, fs.StableAttr{Mode: st.Mode, Ino: st.Ino})
}

// preserveOwner gives path the caller's uid and gid, as the loopback does.
func preserveOwner(ctx context.Context, path string) {
	if os.Getuid() != 0 {
		return
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		_ = syscall.Lchown(path, int(caller.Uid), int(caller.Gid))
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(n.path(), name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.child(ctx, &st, &out.Attr), 0
}

// openFlags are the flags the backing file is opened with: O_APPEND is the
// kernel's (it sends writes at the end), O_DIRECT would need aligned
// buffers and changes nothing here, O_TRUNC is done as a tracked truncate,
// and a write-only file is opened for reading too, to save pre-images.
func openFlags(flags uint32) int {
	f := int(flags)&^(syscall.O_APPEND|syscall.O_DIRECT|syscall.O_TRUNC|fuse.FMODE_EXEC) | syscall.O_CLOEXEC
	if f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := n.pfs
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	path := filepath.Join(n.path(), name)
	fd, err := syscall.Open(path, openFlags(flags)|syscall.O_CREAT|syscall.O_EXCL, mode)
	existed := false
	if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
		existed = true
		fd, err = syscall.Open(path, openFlags(flags), mode)
	}
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	if !existed {
		preserveOwner(ctx, path)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	var s *fileState
	if existed {
		s = p.state(fd, st.Ino, st.Size)
		if flags&syscall.O_TRUNC != 0 {
			if errno := s.truncate(fd, 0); errno != 0 {
				syscall.Close(fd)
				return nil, nil, 0, errno
			}
			syscall.Fstat(fd, &st)
		}
	} else {
		if s, err = p.created(path, st.Ino); err != nil {
			syscall.Close(fd)
			syscall.Unlink(path)
			return nil, nil, 0, fs.ToErrno(err)
		}
		p.changed()
	}
	ch := n.child(ctx, &st, &out.Attr)
	return ch, newFile(p, fd, s, flags), 0, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(n.path(), openFlags(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, fs.ToErrno(err)
	}
	s := n.pfs.state(fd, st.Ino, st.Size)
	if flags&syscall.O_TRUNC != 0 {
		if errno := s.truncate(fd, 0); errno != 0 {
			syscall.Close(fd)
			return nil, 0, errno
		}
	}
	return newFile(n.pfs, fd, s, flags), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	mkdir := func(path string) error { return syscall.Mkdir(path, mode) }
	return n.addEntry(ctx, name, mkdir, true, syscall.Rmdir, out)
}

// addEntry makes the entry name with mk, under nsMu, gives it the caller's
// owner if own, and returns its node; if it cannot be stat'ed, undo removes
// it again.
func (n *node) addEntry(ctx context.Context, name string, mk func(path string) error, own bool, undo func(path string) error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := n.pfs
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	path := filepath.Join(n.path(), name)
	if err := mk(path); err != nil {
		return nil, fs.ToErrno(err)
	}
	if own {
		preserveOwner(ctx, path)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		undo(path)
		return nil, fs.ToErrno(err)
	}
	p.changed()
	return n.child(ctx, &st, &out.Attr), 0
}

// Rmdir moves the empty directory into keep/, so its inode number is not
// reused by a new directory while the durable tree may still name it.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := n.pfs
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if errno := p.retireDir(filepath.Join(n.path(), name)); errno != 0 {
		return errno
	}
	p.changed()
	return 0
}

// retireDir moves the empty directory at path into keep/; the caller holds
// nsMu.
func (p *FS) retireDir(path string) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	names, err := readDirNames(path)
	if err != nil {
		return fs.ToErrno(err)
	}
	if len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	return fs.ToErrno(syscall.Rename(path, p.keepDirPath(st.Ino)))
}

// Unlink removes the name; the inode lives on in keep/.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	p := n.pfs
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if err := syscall.Unlink(filepath.Join(n.path(), name)); err != nil {
		return fs.ToErrno(err)
	}
	p.changed()
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	p := n.pfs
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	from, to := filepath.Join(n.path(), name), filepath.Join(np.path(), newName)
	// A directory renamed over an empty one destroys it: retire it first,
	// and put it back if the rename fails.
	var retired string
	var fst, tst syscall.Stat_t
	if flags&(unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE) == 0 &&
		syscall.Lstat(from, &fst) == nil && fst.Mode&syscall.S_IFMT == syscall.S_IFDIR &&
		syscall.Lstat(to, &tst) == nil && tst.Mode&syscall.S_IFMT == syscall.S_IFDIR && fst.Ino != tst.Ino {
		if errno := p.retireDir(to); errno != 0 {
			return errno
		}
		retired = p.keepDirPath(tst.Ino)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, uint(flags)); err != nil {
		if retired != "" {
			_ = syscall.Rename(retired, to)
		}
		return fs.ToErrno(err)
	}
	p.changed()
	return 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if _, parent := t.EmbeddedInode().Parent(); parent == nil {
		return nil, syscall.EXDEV
	}
	link := func(path string) error { return syscall.Link(t.path(), path) }
	return n.addEntry(ctx, name, link, false, syscall.Unlink, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	symlink := func(path string) error { return syscall.Symlink(target, path) }
	return n.addEntry(ctx, name, symlink, true, syscall.Unlink, out)
}

// Mknod is refused: special files are not modelled.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Tmpfile is refused (the kernel then reports O_TMPFILE as unsupported):
// a file without a name is not modelled.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused, so the kernel copies through Read and Write.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Setattr tracks a size change and passes the rest to the loopback.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := n.truncate(f, int64(size)); errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	if fl, ok := f.(*file); ok {
		if errno := fl.setattr(in); errno != 0 {
			return errno
		}
		return fl.Getattr(ctx, out)
	}
	return n.LoopbackNode.Setattr(ctx, nil, in, out)
}

func (n *node) truncate(f fs.FileHandle, size int64) syscall.Errno {
	if fl, ok := f.(*file); ok {
		return fl.st.truncate(fl.fd, size)
	}
	fd, err := syscall.Open(n.path(), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	return n.pfs.state(fd, st.Ino, st.Size).truncate(fd, size)
}

// Fsync is fsync and fdatasync of a file (with its handle) or a directory.
// It makes the file's data durable, then commits the namespace as the Mode
// says. The backing file is not fsynced: durability here is the model's.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	p := n.pfs
	p.fsyncs.Add(1)
	dir := ""
	if fl, ok := f.(*file); ok {
		if errno := fl.st.sync(fl.fd); errno != 0 {
			return errno
		}
	} else if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		dir = n.path()
	} else {
		return syscall.EBADF
	}
	return fs.ToErrno(p.commit(dir))
}

// OpendirHandle returns the loopback's directory stream without its
// Fsyncdir, so that a directory fsync reaches Fsync above.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.path())
	if errno != 0 {
		return nil, 0, errno
	}
	d, ok := ds.(dirStream)
	if !ok {
		ds.Close()
		return nil, 0, syscall.ENOTSUP
	}
	return dirHandle{d}, 0, 0
}

type dirStream interface {
	fs.DirStream
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
}

type dirHandle struct{ dirStream }

// file is an open backing file. It has no PassthroughFd method: with one,
// the kernel would read and write the backing file itself, unseen.
type file struct {
	p    *FS
	fd   int
	st   *fileState
	sync bool // O_SYNC or O_DSYNC: every write is followed by an fsync

	mu     sync.RWMutex // fd against Release
	closed bool
}

func newFile(p *FS, fd int, s *fileState, flags uint32) *file {
	return &file{p: p, fd: fd, st: s, sync: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, err := syscall.Pread(f.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.p.writes.Add(1)
	n, errno := f.st.write(f.fd, data, off, f.sync)
	if errno == 0 && f.sync {
		f.p.fsyncs.Add(1)
		errno = fs.ToErrno(f.p.commit(""))
	}
	return uint32(n), errno
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.allocate(f.fd, int64(off), int64(size), mode)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, err := unix.Seek(f.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

// setattr applies mode, owner and times through the descriptor.
func (f *file) setattr(in *fuse.SetAttrIn) syscall.Errno {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if m, ok := in.GetMode(); ok {
		if err := syscall.Fchmod(f.fd, m); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := syscall.Fchown(f.fd, u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.fd), ts, 0); err != nil {
			return fs.ToErrno(err)
		}
	}
	return 0
}

// Flush (close(2) of a descriptor) makes nothing durable.
func (f *file) Flush(ctx context.Context) syscall.Errno { return 0 }

func (f *file) Release(ctx context.Context) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return syscall.EBADF
	}
	f.closed = true
	return fs.ToErrno(syscall.Close(f.fd))
}
