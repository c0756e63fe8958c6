//go:build linux

package powerloss_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orderstore/orderstore/internal/testenv"
)

// Loop is a loop device attached to an image file.
type Loop struct {
	f    *os.File
	n    int
	path string
}

// AttachLoop attaches image to a free loop device (with autoclear: the
// kernel detaches it once the last user closed it, see [Loop.Detach]).
func AttachLoop(image string) (*Loop, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device for %q: %w", image, err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device for %q: %w", image, err)
	}
	defer img.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop device for %q: get free: %w", image, err)
		}
		path := "/dev/loop" + strconv.Itoa(n)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			// no devtmpfs: make the node
			if err := unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("attach loop device for %q: mknod %s: %w", image, path, err)
			}
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("attach loop device for %q: %w", image, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], image)
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) && try < 20 {
			f.Close() // another process took it first
			continue
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("attach loop device %s to %q: %w", path, image, err)
		}
		return &Loop{f: f, n: n, path: path}, nil
	}
}

// Path returns the device, e.g. "/dev/loop3".
func (l *Loop) Path() string { return l.path }

// Detach closes the device and waits (at most 10s) until the kernel has
// detached it, which it does once nothing else holds it: unmount first.
// After Detach the image file is closed.
func (l *Loop) Detach() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	backing := fmt.Sprintf("/sys/block/loop%d/loop/backing_file", l.n)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, serr := os.Stat(backing); errors.Is(serr, os.ErrNotExist) {
			return err
		}
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("detach %s: still attached after 10s (mounted?)", l.path))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MkfsExt4 makes image a sparse file of size bytes and an ext4 file system
// in it, made to be light on a slow device: few inodes, a small journal,
// every table written at once (no lazy initialization running later), no
// discard, no reserved blocks. mkfs.ext4 (e2fsprogs) must be installed.
func MkfsExt4(image string, size int64) error {
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	out, err := exec.Command(testenv.Sbin("mkfs.ext4"), "-q", "-F", "-m", "0", "-N", "4096", "-J", "size=16",
		"-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 %q: %w: %s", image, err, out)
	}
	return nil
}

// MountExt4 mounts the ext4 file system on dev at dir (replaying its
// journal). errors=remount-ro keeps an I/O error after a cut from doing
// anything worse than what the mount says.
func MountExt4(dev, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", 0, "errors=remount-ro"); err != nil {
		return fmt.Errorf("mount ext4 %s on %q: %w", dev, dir, err)
	}
	return nil
}

// Unmount unmounts dir, retrying while it is busy (at most 10s).
func Unmount(dir string) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) && !isMountpoint(dir) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("unmount %q: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isMountpoint(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(dir+"/..", &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}
