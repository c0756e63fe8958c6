//go:build linux

package powerloss_test

import (
	"bytes"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/orderstore/orderstore/internal/testenv"
)

// mount mounts a power-loss file system on a temporary directory; it is
// unmounted when the test ends, whatever happened.
func mount(t testing.TB, mode Mode) *FS {
	t.Helper()
	testenv.Require(t, testenv.FUSE())
	dir := t.TempDir()
	p, err := Mount(filepath.Join(dir, "mnt"), filepath.Join(dir, "backing"), Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("unmount the power-loss file system: %v", err)
		}
	})
	return p
}

func restore(t testing.TB, p *FS) {
	t.Helper()
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
}

// write writes data at off in the file at path (created if missing) and
// fsyncs it if sync.
func write(t testing.TB, path string, off int64, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func fsync(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// durableFile makes a file whose content and name are durable.
func durableFile(t testing.TB, path, data string) {
	t.Helper()
	write(t, path, 0, data, true)
	fsync(t, filepath.Dir(path))
}

// content returns the file's content, or "<missing>".
func content(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantContent(t testing.TB, path, want string) {
	t.Helper()
	if got := content(t, path); got != want {
		t.Errorf("after the cut, %s = %q, want %q", filepath.Base(path), got, want)
	}
}

var namespaceModes = []Mode{Journal, Strict}

func TestPowerFSData(t *testing.T) {
	tests := []struct {
		name   string
		change func(t testing.TB, path string)
		want   string
	}{
		{"append without fsync is lost", func(t testing.TB, path string) { write(t, path, 5, " world", false) }, "hello"},
		{"append with fsync survives", func(t testing.TB, path string) { write(t, path, 5, " world", true) }, "hello world"},
		{"overwrite without fsync is undone", func(t testing.TB, path string) { write(t, path, 1, "ELL", false) }, "hello"},
		{"overwrite with fsync survives", func(t testing.TB, path string) { write(t, path, 1, "ELL", true) }, "hELLo"},
		{"overwrites and truncates without fsync are undone", func(t testing.TB, path string) {
			write(t, path, 3, "LO and more", false)
			if err := os.Truncate(path, 2); err != nil {
				t.Fatal(err)
			}
			write(t, path, 4, "xyz", false)
			if err := os.Truncate(path, 1); err != nil {
				t.Fatal(err)
			}
		}, "hello"},
		{"truncate with fsync survives", func(t testing.TB, path string) {
			if err := os.Truncate(path, 2); err != nil {
				t.Fatal(err)
			}
			fsync(t, path)
		}, "he"},
		{"O_TRUNC without fsync is undone", func(t testing.TB, path string) {
			if err := os.WriteFile(path, []byte("new"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "hello"},
		{"only the bytes up to the fsync survive", func(t testing.TB, path string) {
			write(t, path, 5, "1", true)
			write(t, path, 0, "H", false)
			write(t, path, 6, "2", false)
		}, "hello1"},
		{"a write through O_DSYNC survives", func(t testing.TB, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_DSYNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("J"), 0); err != nil {
				t.Fatal(err)
			}
		}, "Jello"},
		{"a punched hole without fsync is undone", func(t testing.TB, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Fallocate(int(f.Fd()), 0x01|0x02, 0, 4096); err != nil { // KEEP_SIZE|PUNCH_HOLE
				t.Fatal(err)
			}
			if got := content(t, path); got != "\x00\x00\x00\x00\x00" {
				t.Fatalf("after punching, content = %q", got)
			}
		}, "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mount(t, Journal)
			path := filepath.Join(p.Mountpoint(), "f")
			durableFile(t, path, "hello")
			tt.change(t, path)
			restore(t, p)
			wantContent(t, path, tt.want)
		})
	}
}

func TestPowerFSNamespace(t *testing.T) {
	type want struct{ journal, strict map[string]string }
	tests := []struct {
		name   string
		change func(t testing.TB, dir string)
		want   want
	}{
		{
			"new file, fsync of the file",
			func(t testing.TB, dir string) { write(t, filepath.Join(dir, "new"), 0, "data", true) },
			want{map[string]string{"new": "data"}, map[string]string{"new": "<missing>"}},
		},
		{
			"new file, fsync of the file and the directory",
			func(t testing.TB, dir string) {
				write(t, filepath.Join(dir, "new"), 0, "data", true)
				fsync(t, dir)
			},
			want{map[string]string{"new": "data"}, map[string]string{"new": "data"}},
		},
		{
			"new file, fsync of the directory only",
			func(t testing.TB, dir string) {
				write(t, filepath.Join(dir, "new"), 0, "data", false)
				fsync(t, dir)
			},
			want{map[string]string{"new": ""}, map[string]string{"new": ""}},
		},
		{
			"rename without fsync",
			func(t testing.TB, dir string) { rename(t, filepath.Join(dir, "a"), filepath.Join(dir, "b")) },
			want{map[string]string{"a": "A", "b": "<missing>"}, map[string]string{"a": "A", "b": "<missing>"}},
		},
		{
			"rename, fsync of the directory",
			func(t testing.TB, dir string) {
				rename(t, filepath.Join(dir, "a"), filepath.Join(dir, "b"))
				fsync(t, dir)
			},
			want{map[string]string{"a": "<missing>", "b": "A"}, map[string]string{"a": "<missing>", "b": "A"}},
		},
		{
			"rename, fsync of another file",
			func(t testing.TB, dir string) {
				rename(t, filepath.Join(dir, "a"), filepath.Join(dir, "b"))
				write(t, filepath.Join(dir, "other"), 0, "O", true)
			},
			want{map[string]string{"a": "<missing>", "b": "A"}, map[string]string{"a": "A", "b": "<missing>"}},
		},
		{
			"rename over an existing file without fsync",
			func(t testing.TB, dir string) {
				durableFile(t, filepath.Join(dir, "b"), "B")
				write(t, filepath.Join(dir, "tmp"), 0, "new", true)
				rename(t, filepath.Join(dir, "tmp"), filepath.Join(dir, "b"))
			},
			// journal: the fsync of tmp committed its name
			want{map[string]string{"b": "B", "tmp": "new"}, map[string]string{"b": "B", "tmp": "<missing>"}},
		},
		{
			"unlink without fsync",
			func(t testing.TB, dir string) {
				if err := os.Remove(filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
			},
			want{map[string]string{"a": "A"}, map[string]string{"a": "A"}},
		},
		{
			"unlink, fsync of the directory",
			func(t testing.TB, dir string) {
				if err := os.Remove(filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
				fsync(t, dir)
			},
			want{map[string]string{"a": "<missing>"}, map[string]string{"a": "<missing>"}},
		},
		{
			"mkdir and a file in it, fsync of the file and the parent",
			func(t testing.TB, dir string) {
				if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(dir, "sub", "f"), 0, "S", true)
				fsync(t, dir)
			},
			// strict: sub's own entries were never fsynced
			want{map[string]string{"sub/f": "S"}, map[string]string{"sub/f": "<missing>"}},
		},
		{
			"rmdir without fsync",
			func(t testing.TB, dir string) {
				if err := os.Remove(filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(dir, "d", "x")); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(dir, "d")); err != nil {
					t.Fatal(err)
				}
			},
			want{map[string]string{"d/x": "X", "a": "A"}, map[string]string{"d/x": "X", "a": "A"}},
		},
	}
	for _, mode := range namespaceModes {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				p := mount(t, mode)
				dir := filepath.Join(p.Mountpoint(), "dir")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				durableFile(t, filepath.Join(dir, "d", "x"), "X")
				durableFile(t, filepath.Join(dir, "a"), "A")
				fsync(t, p.Mountpoint())
				tt.change(t, dir)
				restore(t, p)
				want := tt.want.journal
				if mode == Strict {
					want = tt.want.strict
				}
				for name, w := range want {
					wantContent(t, filepath.Join(dir, name), w)
				}
				// What survived is durable now: a second cut changes nothing.
				restore(t, p)
				for name, w := range want {
					wantContent(t, filepath.Join(dir, name), w)
				}
			})
		}
	}
}

func rename(t testing.TB, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// From the cut on, every operation fails; after Restore all works again.
func TestPowerFSCutFailsEveryOperation(t *testing.T) {
	p := mount(t, Journal)
	path := filepath.Join(p.Mountpoint(), "f")
	durableFile(t, path, "hello")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	ops := []struct {
		name string
		op   func() error
	}{
		{"stat", func() error { _, err := os.Stat(filepath.Join(p.Mountpoint(), "g")); return err }},
		{"open", func() error { _, err := os.Open(filepath.Join(p.Mountpoint(), "f2")); return err }},
		{"create", func() error { return os.WriteFile(filepath.Join(p.Mountpoint(), "new"), nil, 0o644) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(p.Mountpoint(), "d"), 0o755) }},
		{"readdir", func() error { _, err := os.ReadDir(p.Mountpoint()); return err }},
		{"write", func() error { _, err := f.WriteAt([]byte("x"), 0); return err }},
		{"fsync", f.Sync},
		{"truncate", func() error { return f.Truncate(0) }},
	}
	for _, o := range ops {
		if err := o.op(); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s after the cut: %v, want EIO", o.name, err)
		}
	}
	f.Close()
	restore(t, p)
	wantContent(t, path, "hello")
	write(t, path, 5, "!", true)
	wantContent(t, path, "hello!")
	if s := p.Stats(); s.Cuts != 1 {
		t.Errorf("Stats().Cuts = %d, want 1", s.Cuts)
	}
}

// No child the tests start (mkfs.ext4) inherits the daemon's /dev/fuse descriptor, after a mount or
// a remount: one killed mid-mkfs would keep the mount wedged, and with it every later mkfs.
func TestPowerFSNotInheritedByChildren(t *testing.T) {
	p := mount(t, Journal)
	for _, step := range []string{"mount", "restore"} {
		if step == "restore" {
			restore(t, p)
		}
		own, err := exec.Command("sh", "-c", "ls -l /proc/$PPID/fd").CombinedOutput() // this process's
		if err != nil || !bytes.Contains(own, []byte("/dev/fuse")) {
			t.Fatalf("after the %s, this process holds no /dev/fuse (%v):\n%s", step, err, own)
		}
		child, err := exec.Command("ls", "-l", "/proc/self/fd").CombinedOutput()
		if err != nil || bytes.Contains(child, []byte("/dev/fuse")) {
			t.Errorf("after the %s, a child holds /dev/fuse (%v):\n%s", step, err, child)
		}
	}
}

// A file system on a loop device whose image lives on the power-loss file
// system: what ext4 synced survives a cut, the journal replays, and e2fsck
// finds the result clean.
func TestPowerFSExt4OnLoop(t *testing.T) {
	testenv.Require(t, testenv.Ext4())
	p := mount(t, Journal)
	image := filepath.Join(p.Mountpoint(), "disk.img")
	if err := MkfsExt4(image, 256<<20); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "ext4")
	var loop *Loop
	attach := func() {
		t.Helper()
		var err error
		if loop, err = AttachLoop(image); err != nil {
			t.Fatal(err)
		}
		if err := MountExt4(loop.Path(), mnt); err != nil {
			t.Fatal(err)
		}
	}
	detach := func() error {
		return errors.Join(Unmount(mnt), loop.Detach())
	}
	attach()
	t.Cleanup(func() {
		if err := detach(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	durableFile(t, filepath.Join(mnt, "synced"), "durable")
	for i := range 20 {
		write(t, filepath.Join(mnt, "unsynced"), int64(i)*4096, "maybe", false)
	}
	p.Cut()
	if err := detach(); err != nil {
		t.Fatal(err)
	}
	restore(t, p)
	attach() // replays the journal
	wantContent(t, filepath.Join(mnt, "synced"), "durable")
	t.Logf("unsynced file after the cut: %d bytes", len(content(t, filepath.Join(mnt, "unsynced"))))
	if err := detach(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testenv.Sbin("e2fsck"), "-fn", image).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn after the cut and the replay: %v\n%s", err, out)
	}
	t.Logf("stats: %+v", p.Stats())
}

// Random operations on a few files in one directory, checked against an
// in-memory model of the durability rules: after every cut the directory
// holds exactly the model's durable names and contents.
func TestPowerFSRandomOperationsAgainstModel(t *testing.T) {
	type inode struct{ live, durable []byte }
	for _, mode := range namespaceModes {
		t.Run(mode.String(), func(t *testing.T) {
			p := mount(t, mode)
			dir := filepath.Join(p.Mountpoint(), "dir")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fsync(t, p.Mountpoint())
			live, durable := map[string]*inode{}, map[string]*inode{}
			commit := func() { durable = maps.Clone(live) }
			names := []string{"a", "b", "c", "d"}
			r := rand.New(rand.NewPCG(1, uint64(mode)))
			cuts := 0
			for op := 0; op < 600; op++ {
				name := names[r.IntN(len(names))]
				path := filepath.Join(dir, name)
				ino := live[name]
				switch k := r.IntN(100); {
				case k < 40: // write, creating the file if need be
					off, data := int64(r.IntN(64<<10)), make([]byte, 1+r.IntN(8<<10))
					for i := range data {
						data[i] = byte(r.Uint32())
					}
					if ino == nil {
						ino = &inode{durable: []byte{}}
						live[name] = ino
					}
					write(t, path, off, string(data), false)
					if n := off + int64(len(data)); int64(len(ino.live)) < n {
						ino.live = append(ino.live, make([]byte, n-int64(len(ino.live)))...)
					}
					copy(ino.live[off:], data)
				case k < 50 && ino != nil: // truncate
					size := r.IntN(len(ino.live) + 4096)
					if err := os.Truncate(path, int64(size)); err != nil {
						t.Fatal(err)
					}
					if size < len(ino.live) {
						ino.live = ino.live[:size]
					} else {
						ino.live = append(ino.live, make([]byte, size-len(ino.live))...)
					}
				case k < 65 && ino != nil: // fsync the file
					fsync(t, path)
					ino.durable = slices.Clone(ino.live)
					if mode == Journal {
						commit()
					}
				case k < 72: // fsync the directory
					fsync(t, dir)
					commit()
				case k < 82 && ino != nil: // rename
					to := names[r.IntN(len(names))]
					if to == name {
						continue
					}
					rename(t, path, filepath.Join(dir, to))
					live[to] = ino
					delete(live, name)
				case k < 90 && ino != nil: // unlink
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
					delete(live, name)
				case k >= 95: // power cut
					cuts++
					restore(t, p)
					live = map[string]*inode{}
					for n, ino := range durable {
						ino.live = slices.Clone(ino.durable)
						live[n] = ino
					}
					got, err := os.ReadDir(dir)
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(durable) {
						t.Fatalf("op %d, cut %d: %d files, want %d (%v)", op, cuts, len(got), len(durable), slices.Sorted(maps.Keys(durable)))
					}
					for n, ino := range durable {
						b, err := os.ReadFile(filepath.Join(dir, n))
						if err != nil {
							t.Fatalf("op %d, cut %d: %v", op, cuts, err)
						}
						if !bytes.Equal(b, ino.durable) {
							t.Fatalf("op %d, cut %d: %s has %d bytes, want %d (first difference at %d)", op, cuts, n, len(b), len(ino.durable), firstDiff(b, ino.durable))
						}
					}
				}
			}
			if cuts < 10 {
				t.Fatalf("only %d cuts", cuts)
			}
			t.Logf("%d cuts, %+v", cuts, p.Stats())
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
