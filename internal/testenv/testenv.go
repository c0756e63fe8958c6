// Package testenv says what a test needs from the machine beyond Go: a browser, FUSE, loop devices
// and mkfs.ext4, root. A test calls Require with what is missing; on a machine without it the test
// is skipped with a message naming what to install, so that the README's test command passes on a
// fresh machine. With ORDERSTORE_TEST_ALL set (.ci/run sets it, after installing everything) a
// missing tool fails the test instead: CI always runs every test.
package testenv

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// AllEnv names the environment variable that makes a missing tool a failure instead of a skip.
const AllEnv = "ORDERSTORE_TEST_ALL"

// Require skips t (or, with AllEnv set, fails it) when missing is not
// empty; missing says what is missing and how to get it.
func Require(t testing.TB, missing string) {
	t.Helper()
	if missing == "" {
		return
	}
	if os.Getenv(AllEnv) != "" {
		t.Fatalf("this test needs %s (%s is set: every test must run)", missing, AllEnv)
	}
	t.Skipf("skipped: this test needs %s (.ci/run installs what the tests need; set %s=1 to make this a failure)", missing, AllEnv)
}

// Root is what a test that mounts file systems or runs a child as another user lacks: "" as root.
func Root() string {
	if os.Geteuid() != 0 {
		return "root (it mounts file systems, or starts a child as uid 65534): run the tests as root, e.g. in a container"
	}
	return ""
}

// FUSE is what a test that mounts the power-loss file system lacks.
func FUSE() string {
	if m := Root(); m != "" {
		return m
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return "/dev/fuse (" + err.Error() + "): load the fuse module (modprobe fuse), or give the container the device (--device /dev/fuse --cap-add SYS_ADMIN)"
	}
	f.Close()
	return ""
}

// Ext4 is what a test that makes an ext4 file system on a loop device
// lacks (FUSE too: the image lives on the power-loss file system).
func Ext4() string {
	if m := FUSE(); m != "" {
		return m
	}
	if Sbin("mkfs.ext4") == "" {
		return "mkfs.ext4: apt-get install -y e2fsprogs"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "loop devices (/dev/loop-control: " + err.Error() + "): load the loop module (modprobe loop), or give the container the devices"
	}
	return ""
}

// Browser is the path of a headless-capable Chromium, and what is missing when there is none.
func Browser() (path, missing string) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, ""
		}
	}
	return "", "chromium on PATH (the dashboard test drives a real browser): apt-get install -y chromium"
}

// Sbin is the path of an administration command found in $PATH, /usr/sbin or /sbin; "" if none.
func Sbin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if fi, err := os.Stat(dir + "/" + name); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return dir + "/" + name
		}
	}
	return ""
}

// Curl is what a test that runs the README's shell commands lacks.
func Curl() string {
	if _, err := exec.LookPath("curl"); err != nil {
		return "curl on PATH (the README's quick start uses it): apt-get install -y curl"
	}
	return ""
}

// Goroutines returns the stack of every goroutine of the process, one per element, for a test that
// looks for what is still running.
func Goroutines() []string {
	for size := 1 << 20; ; size *= 2 {
		buf := make([]byte, size)
		if n := runtime.Stack(buf, true); n < size {
			return strings.Split(string(buf[:n]), "\n\n")
		}
	}
}
