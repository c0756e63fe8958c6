//go:build linux

package powerloss_test

// powerfs (the files powerfs_*_test.go) is a FUSE file system for the
// power-loss tests: it passes every operation through to a backing
// directory and can lose power.
//
// # Overview
//
// [Mount] serves a backing directory at a mount point (as root, with
// mount(2) directly: go-fuse's DirectMountStrict, no fusermount). Reads and
// writes go through the daemon, never through kernel passthrough, which
// would hide writes from it. While it runs, the file system keeps what a
// disk would have if the power failed now:
//
//   - Data: per file (by backing inode, so it follows renames and unlinks),
//     the size at its last fsync or fdatasync (or write through an O_SYNC
//     or O_DSYNC handle) and an undo log of the bytes below that size that
//     were overwritten, truncated, punched or zeroed since. Appends cost
//     nothing; an overwrite keeps the old bytes until the next fsync.
//   - Namespace (create, mkdir, unlink, rmdir, rename, link, symlink): a
//     durable copy of the directory tree, updated when a change is made
//     durable. With [Journal] (the default, ext4 and xfs in practice) any
//     fsync commits every namespace change made before it. With [Strict]
//     (POSIX at its word) only an fsync of a directory commits that
//     directory's entries; an fsync of a new file does not make its name
//     durable.
//
// Unlinked files and removed directories are kept (hard links in the
// backing directory's keep/ folder) until the next cut, so their durable
// content can come back and their inode numbers are not reused.
//
// # Lifecycle
//
// [FS.Cut] is the power failure: it waits for the requests in flight, then
// fails every request with EIO. [FS.Restore] unmounts (every user must have
// closed its files: kill the processes, unmount what was mounted on top),
// rewrites the backing directory to the durable state (pre-images newest
// first, truncation to the synced sizes, the durable tree rebuilt) and
// mounts again. [FS.Close] unmounts for good.
//
// The conservative reading is deliberate: whatever was not made durable is
// lost, the worst a real disk may do. Not modelled: torn or reordered
// writes inside what was synced, disks that ignore flushes, and mmap
// writes; xattrs are disabled and special files (mknod, O_TMPFILE) are
// refused.
//
// syncfs(2) never reaches a FUSE daemon (the kernel sends FUSE_SYNCFS to
// virtiofs only), so a program that relies on syncfs is tested with a real
// file system on top: [MkfsExt4] an image on the mount, [AttachLoop] it and
// mount ext4 from the loop device. Every flush or FUA write ext4 issues
// arrives here as an fsync of the image, so a cut loses exactly what the
// disk had not been told to keep, and the next mount replays the journal.

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Mode is when a namespace change (create, mkdir, unlink, rmdir, rename,
// link, symlink) becomes durable.
type Mode int

const (
	// Journal commits every earlier namespace change on any fsync or
	// fdatasync, of a file or a directory: one journal for the whole file
	// system, as ext4 and xfs behave.
	Journal Mode = iota
	// Strict commits a directory's entries only when that directory is
	// fsynced, as POSIX promises at the least.
	Strict
)

func (m Mode) String() string {
	if m == Strict {
		return "strict"
	}
	return "journal"
}

// Options configure [Mount].
type Options struct {
	// Mode is the namespace durability model; the zero value is Journal.
	Mode Mode
	// Debug logs every FUSE request (go-fuse's debug output) to stderr.
	Debug bool
}

// Stats count what the file system saw and what its cuts discarded.
type Stats struct {
	Writes, Fsyncs, NamespaceOps int64
	// Cuts counts the Restores; the fields below add up over all of them.
	Cuts int64
	// DiscardedBytes are the bytes a cut dropped past a file's synced
	// size plus those it restored below it from the undo log.
	DiscardedBytes int64
	// RolledBackFiles had data discarded.
	RolledBackFiles int64
	// UndoneEntries are directory entries that differed between the live
	// tree and the durable one: created, removed or renamed and not
	// committed.
	UndoneEntries int64
}

// FS is a mounted power-loss file system. Its methods are safe for
// concurrent use.
type FS struct {
	mountpoint string
	live, keep string // the files served; links that keep inodes alive
	opts       Options

	mu      sync.Mutex // serializes Cut, Restore and Close
	gate    *gate
	server  *fuse.Server
	mounted bool

	// nsMu serializes namespace operations with commits, so a commit
	// never sees half a rename.
	nsMu    sync.Mutex
	nsDirty bool               // Journal: a namespace change since the last commit
	durable map[uint64][]entry // durable entries per directory inode
	rootIno uint64

	filesMu sync.Mutex
	files   map[uint64]*fileState // by backing inode

	writes, fsyncs, nsOps                   atomic.Int64
	cuts, discarded, rolledBack, undoneEnts atomic.Int64
}

// entry is one durable directory entry.
type entry struct {
	name     string
	ino      uint64
	mode     uint32 // st_mode: type and permission bits
	uid, gid uint32
	target   string // a symlink's target
}

// Mount serves dir/live at mountpoint (both are created if missing) and
// returns once the mount is up. dir belongs to the file system: besides
// live/ it holds keep/, and whatever it finds there is taken as durable.
func Mount(mountpoint, dir string, opts Options) (*FS, error) {
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return nil, err
	}
	p := &FS{
		mountpoint: mountpoint,
		live:       filepath.Join(dir, "live"),
		keep:       filepath.Join(dir, "keep"),
		opts:       opts,
	}
	for _, d := range []string{p.live, p.keep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := p.load(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.mountLocked(); err != nil {
		return nil, err
	}
	return p, nil
}

// Mountpoint returns where the file system is mounted.
func (p *FS) Mountpoint() string { return p.mountpoint }

// Stats returns the counters so far.
func (p *FS) Stats() Stats {
	return Stats{
		Writes: p.writes.Load(), Fsyncs: p.fsyncs.Load(), NamespaceOps: p.nsOps.Load(),
		Cuts: p.cuts.Load(), DiscardedBytes: p.discarded.Load(), RolledBackFiles: p.rolledBack.Load(),
		UndoneEntries: p.undoneEnts.Load(),
	}
}

// mountLocked mounts; the caller holds mu.
func (p *FS) mountLocked() error {
	var st syscall.Stat_t
	if err := syscall.Stat(p.live, &st); err != nil {
		return err
	}
	root := &fs.LoopbackRoot{Path: p.live, Dev: uint64(st.Dev)}
	rootNode := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, pfs: p}
	root.RootNode = rootNode
	sec := time.Second
	raw := fs.NewNodeFS(rootNode, &fs.Options{EntryTimeout: &sec, AttrTimeout: &sec})
	g := &gate{RawFileSystem: raw}
	srv, err := newServer(g, p.mountpoint, &fuse.MountOptions{
		DirectMountStrict: true,
		AllowOther:        true,
		FsName:            p.live,
		Name:              "powerfs",
		MaxWrite:          1 << 20,
		DisableXAttrs:     true,
		Debug:             p.opts.Debug,
		Logger:            log.New(quietUnmount{}, "powerfs: ", log.LstdFlags),
	})
	if err != nil {
		return fmt.Errorf("powerfs: mount %q: %w", p.mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return fmt.Errorf("powerfs: mount %q: %w", p.mountpoint, err)
	}
	p.gate, p.server, p.mounted = g, srv, true
	return nil
}

// newServer is fuse.NewServer with close-on-exec set on the /dev/fuse descriptor, which go-fuse's
// direct mount leaves unset: every child (mkfs.ext4) would hold the mount, and one killed mid-mkfs
// keep it wedged, and with it every later mkfs. ForkLock keeps any fork from coming in between.
func newServer(raw fuse.RawFileSystem, mountpoint string, opts *fuse.MountOptions) (*fuse.Server, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	srv, err := fuse.NewServer(raw, mountpoint, opts)
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
	return srv, err
}

// Cut is the power failure: it waits for the requests in flight, and from
// then on every request fails with EIO until [FS.Restore]. Kill the
// processes that use the file system at once (they would see the errors).
func (p *FS) Cut() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	if g != nil {
		g.cut()
	}
}

// Restore cuts the power if [FS.Cut] did not, unmounts (retrying while
// the mount is busy, at most 10s: every process must have closed its files
// and every mount on top of it must be gone), rewrites the backing
// directory to the durable state and mounts again. Everything found after
// it is durable.
func (p *FS) Restore() error {
	p.Cut()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.unmountLocked(10 * time.Second); err != nil {
		return err
	}
	p.cuts.Add(1)
	if err := p.rollback(); err != nil {
		return fmt.Errorf("powerfs: restore %q: %w", p.live, err)
	}
	if err := p.load(); err != nil {
		return fmt.Errorf("powerfs: restore %q: %w", p.live, err)
	}
	return p.mountLocked()
}

// Close unmounts. When the mount stays busy for 5s it is detached lazily
// and the error says so.
func (p *FS) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mounted {
		return nil
	}
	err := p.unmountLocked(5 * time.Second)
	if err != nil {
		if derr := syscall.Unmount(p.mountpoint, syscall.MNT_DETACH); derr == nil {
			p.mounted = false
			err = fmt.Errorf("%w (detached lazily)", err)
		}
	}
	return err
}

func (p *FS) unmountLocked(timeout time.Duration) error {
	if !p.mounted {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		// Server.Unmount retries a few times for 0.3s and then waits for
		// the serve loops to end.
		err := p.server.Unmount()
		if err == nil {
			p.mounted = false
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("powerfs: unmount %q: %w", p.mountpoint, err)
		}
	}
}

// quietUnmount is go-fuse's log on stderr without the line every unmount
// writes ("Failed to read from fuse conn: 103=software caused connection
// abort").
type quietUnmount struct{}

func (quietUnmount) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("connection abort")) {
		return len(b), nil
	}
	return os.Stderr.Write(b)
}

// load takes the backing directory as it is for the durable state: every
// file at its full size, every entry committed, every regular file linked
// into keep/.
func (p *FS) load() error {
	if err := os.RemoveAll(p.keep); err != nil {
		return err
	}
	if err := os.Mkdir(p.keep, 0o755); err != nil {
		return err
	}
	tree, rootIno, err := scanTree(p.live)
	if err != nil {
		return err
	}
	files := map[uint64]*fileState{}
	var walk func(dir string, ino uint64) error
	walk = func(dir string, ino uint64) error {
		for _, e := range tree[ino] {
			path := filepath.Join(dir, e.name)
			switch e.mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				if err := walk(path, e.ino); err != nil {
					return err
				}
			case syscall.S_IFREG:
				if files[e.ino] != nil {
					continue
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(path, &st); err != nil {
					return err
				}
				if err := os.Link(path, p.keepPath(e.ino)); err != nil {
					return err
				}
				files[e.ino] = &fileState{synced: st.Size}
			}
		}
		return nil
	}
	if err := walk(p.live, rootIno); err != nil {
		return err
	}
	p.nsMu.Lock()
	p.durable, p.rootIno, p.nsDirty = tree, rootIno, false
	p.nsMu.Unlock()
	p.filesMu.Lock()
	p.files = files
	p.filesMu.Unlock()
	return nil
}

func (p *FS) keepPath(ino uint64) string {
	return filepath.Join(p.keep, strconv.FormatUint(ino, 10))
}

// keepDirPath is where a removed directory waits for the next cut.
func (p *FS) keepDirPath(ino uint64) string {
	return filepath.Join(p.keep, "d"+strconv.FormatUint(ino, 10))
}

// state returns the tracking state of the regular file at path (in the
// backing directory). A file unknown so far is taken as durable at its
// current size and linked into keep/: every file is found by load or made
// by Create, but another request may open a file Create has just made
// before Create registered it.
func (p *FS) state(fd int, ino uint64, size int64) *fileState {
	p.filesMu.Lock()
	defer p.filesMu.Unlock()
	s := p.files[ino]
	if s == nil {
		s = &fileState{synced: size}
		p.files[ino] = s
		// Through the descriptor: the name may have been renamed or
		// removed since the open. A removed file has nothing to roll back.
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, p.keepPath(ino), unix.AT_SYMLINK_FOLLOW)
		s.noKeep = err != nil && !errors.Is(err, os.ErrExist)
	}
	return s
}

// created registers a new regular file: nothing of it is durable yet. An
// open that raced with its Create may have registered it first.
func (p *FS) created(path string, ino uint64) (*fileState, error) {
	p.filesMu.Lock()
	defer p.filesMu.Unlock()
	if err := os.Link(path, p.keepPath(ino)); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if s := p.files[ino]; s != nil {
		return s, nil
	}
	s := &fileState{}
	p.files[ino] = s
	return s, nil
}

// changed records a namespace change; the caller holds nsMu.
func (p *FS) changed() {
	p.nsDirty = true
	p.nsOps.Add(1)
}

// commit makes the namespace durable after an fsync: in Journal mode the
// whole tree, in Strict mode only dir (when the fsync was of a directory;
// dir is "" for a file).
func (p *FS) commit(dir string) error {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.opts.Mode == Strict {
		if dir == "" {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(dir, &st); err != nil {
			return err
		}
		ents, err := scanDir(dir)
		if err != nil {
			return err
		}
		p.durable[st.Ino] = ents
		return nil
	}
	if !p.nsDirty {
		return nil
	}
	tree, rootIno, err := scanTree(p.live)
	if err != nil {
		return err
	}
	p.durable, p.rootIno, p.nsDirty = tree, rootIno, false
	return nil
}

// rollback rewrites the backing directory to the durable state. The file
// system is unmounted.
func (p *FS) rollback() error {
	// Data first, through the keep/ links: every file ever seen has one.
	for ino, s := range p.files {
		n, changed, err := s.rollback(p.keepPath(ino))
		if s.noKeep && errors.Is(err, os.ErrNotExist) {
			continue // removed before it was ever linked: nothing to restore
		}
		if err != nil {
			return fmt.Errorf("roll back inode %d: %w", ino, err)
		}
		p.discarded.Add(n)
		if changed {
			p.rolledBack.Add(1)
		}
	}
	// Then the tree, built afresh next to the live one and swapped in.
	liveTree, liveRoot, err := scanTree(p.live)
	if err != nil {
		return err
	}
	p.undoneEnts.Add(int64(diffTrees(liveTree, liveRoot, p.durable, p.rootIno)))
	var rootSt syscall.Stat_t
	if err := syscall.Lstat(p.live, &rootSt); err != nil {
		return err
	}
	next, old := p.live+".next", p.live+".old"
	for _, d := range []string{next, old} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	built := map[uint64]bool{}
	if err := p.build(next, entry{ino: p.rootIno, mode: rootSt.Mode, uid: rootSt.Uid, gid: rootSt.Gid}, built); err != nil {
		return err
	}
	if err := os.Rename(p.live, old); err != nil {
		return err
	}
	if err := os.Rename(next, p.live); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// build makes directory e at path with its durable entries, recursively.
// A directory durable under two names (Strict mode, a rename committed on
// one side only) is built once, under the first.
func (p *FS) build(path string, e entry, built map[uint64]bool) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	built[e.ino] = true
	for _, c := range p.durable[e.ino] {
		cp := filepath.Join(path, c.name)
		switch c.mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			if built[c.ino] {
				continue
			}
			if err := p.build(cp, c, built); err != nil {
				return err
			}
		case syscall.S_IFREG:
			if err := os.Link(p.keepPath(c.ino), cp); err != nil {
				return err
			}
		case syscall.S_IFLNK:
			if err := os.Symlink(c.target, cp); err != nil {
				return err
			}
			if err := os.Lchown(cp, int(c.uid), int(c.gid)); err != nil {
				return err
			}
		}
	}
	if err := os.Lchown(path, int(e.uid), int(e.gid)); err != nil {
		return err
	}
	return syscall.Chmod(path, e.mode&0o7777)
}

// scanDir lists dir's entries: regular files, directories and symlinks.
func scanDir(dir string) ([]entry, error) {
	names, err := readDirNames(dir)
	if err != nil {
		return nil, err
	}
	ents := make([]entry, 0, len(names))
	for _, name := range names {
		path := filepath.Join(dir, name)
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return nil, err
		}
		e := entry{name: name, ino: st.Ino, mode: st.Mode, uid: st.Uid, gid: st.Gid}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR, syscall.S_IFREG:
		case syscall.S_IFLNK:
			if e.target, err = os.Readlink(path); err != nil {
				return nil, err
			}
		default:
			continue
		}
		ents = append(ents, e)
	}
	return ents, nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// scanTree lists every directory under root by inode.
func scanTree(root string) (map[uint64][]entry, uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return nil, 0, err
	}
	tree := map[uint64][]entry{}
	var walk func(dir string, ino uint64) error
	walk = func(dir string, ino uint64) error {
		ents, err := scanDir(dir)
		if err != nil {
			return err
		}
		tree[ino] = ents
		for _, e := range ents {
			if e.mode&syscall.S_IFMT == syscall.S_IFDIR {
				if err := walk(filepath.Join(dir, e.name), e.ino); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, st.Ino); err != nil {
		return nil, 0, err
	}
	return tree, st.Ino, nil
}

// diffTrees counts the paths whose inode differs between two trees.
func diffTrees(a map[uint64][]entry, aRoot uint64, b map[uint64][]entry, bRoot uint64) int {
	flat := func(t map[uint64][]entry, root uint64) map[string]uint64 {
		out := map[string]uint64{}
		seen := map[uint64]bool{}
		var walk func(prefix string, ino uint64)
		walk = func(prefix string, ino uint64) {
			if seen[ino] {
				return
			}
			seen[ino] = true
			for _, e := range t[ino] {
				path := prefix + "/" + e.name
				out[path] = e.ino
				if e.mode&syscall.S_IFMT == syscall.S_IFDIR {
					walk(path, e.ino)
				}
			}
		}
		walk("", root)
		return out
	}
	fa, fb := flat(a, aRoot), flat(b, bRoot)
	n := 0
	for path, ino := range fa {
		if fb[path] != ino {
			n++
		}
	}
	for path := range fb {
		if _, ok := fa[path]; !ok {
			n++
		}
	}
	return n
}
