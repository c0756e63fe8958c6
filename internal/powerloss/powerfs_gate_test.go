//go:build linux

package powerloss_test

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// gate wraps the node file system at the FUSE protocol: once cut, every
// request fails with EIO. Each request holds a read lock while it runs, so
// cut waits for the requests in flight and none runs half before, half
// after. Forget, Release and ReleaseDir pass: they only free the daemon's
// resources, and the kernel sends them for the processes killed after a
// cut.
type gate struct {
	fuse.RawFileSystem
	mu    sync.RWMutex
	isCut bool
}

func (g *gate) cut() {
	g.mu.Lock()
	g.isCut = true
	g.mu.Unlock()
}

// do runs the request f under the read lock, or fails it with EIO once cut.
func (g *gate) do(f func() fuse.Status) fuse.Status {
	_, st := gated(g, func() (struct{}, fuse.Status) { return struct{}{}, f() })
	return st
}

// gated is do for a request that returns a value besides its status (the
// zero value when cut).
func gated[T any](g *gate, f func() (T, fuse.Status)) (T, fuse.Status) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.isCut {
		var zero T
		return zero, fuse.EIO
	}
	return f()
}

func (g *gate) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Lookup(cancel, header, name, out) })
}

func (g *gate) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.GetAttr(cancel, input, out) })
}

func (g *gate) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.SetAttr(cancel, input, out) })
}

func (g *gate) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Mknod(cancel, input, name, out) })
}

func (g *gate) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Mkdir(cancel, input, name, out) })
}

func (g *gate) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Unlink(cancel, header, name) })
}

func (g *gate) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Rmdir(cancel, header, name) })
}

func (g *gate) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Rename(cancel, input, oldName, newName) })
}

func (g *gate) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Link(cancel, input, filename, out) })
}

func (g *gate) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out) })
}

func (g *gate) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	return gated(g, func() ([]byte, fuse.Status) { return g.RawFileSystem.Readlink(cancel, header) })
}

func (g *gate) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Access(cancel, input) })
}

func (g *gate) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	return gated(g, func() (uint32, fuse.Status) { return g.RawFileSystem.GetXAttr(cancel, header, attr, dest) })
}

func (g *gate) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	return gated(g, func() (uint32, fuse.Status) { return g.RawFileSystem.ListXAttr(cancel, header, dest) })
}

func (g *gate) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.SetXAttr(cancel, input, attr, data) })
}

func (g *gate) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.RemoveXAttr(cancel, header, attr) })
}

func (g *gate) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Create(cancel, input, name, out) })
}

func (g *gate) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Tmpfile(cancel, input, out) })
}

func (g *gate) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Open(cancel, input, out) })
}

func (g *gate) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return gated(g, func() (fuse.ReadResult, fuse.Status) { return g.RawFileSystem.Read(cancel, input, buf) })
}

func (g *gate) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Lseek(cancel, in, out) })
}

func (g *gate) GetLk(cancel <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.GetLk(cancel, input, out) })
}

func (g *gate) SetLk(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.SetLk(cancel, input) })
}

func (g *gate) SetLkw(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.SetLkw(cancel, input) })
}

func (g *gate) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return gated(g, func() (uint32, fuse.Status) { return g.RawFileSystem.Write(cancel, input, data) })
}

func (g *gate) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	return gated(g, func() (uint32, fuse.Status) { return g.RawFileSystem.Writev(cancel, input, data) })
}

func (g *gate) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return gated(g, func() (uint32, fuse.Status) { return g.RawFileSystem.CopyFileRange(cancel, input) })
}

func (g *gate) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf) })
}

func (g *gate) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Flush(cancel, input) })
}

func (g *gate) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Fsync(cancel, input) })
}

func (g *gate) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Fallocate(cancel, input) })
}

func (g *gate) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.OpenDir(cancel, input, out) })
}

func (g *gate) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.ReadDir(cancel, input, out) })
}

func (g *gate) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.ReadDirPlus(cancel, input, out) })
}

func (g *gate) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.FsyncDir(cancel, input) })
}

func (g *gate) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.StatFs(cancel, input, out) })
}

func (g *gate) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	return g.do(func() fuse.Status { return g.RawFileSystem.Statx(cancel, input, out) })
}
