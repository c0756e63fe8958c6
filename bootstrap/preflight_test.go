package bootstrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPreflightCreatesAndLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	lock, rep, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("store_dir not created: %v", err)
	}
	if rep.FreeBytes == 0 || rep.StoreDir != dir {
		t.Errorf("report = %+v", rep)
	}
	b, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want our pid %d", b, err, os.Getpid())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "probe") {
			t.Errorf("probe file %s left behind", e.Name())
		}
	}

	// A second preflight on the same dir fails at once, naming lock and pid.
	_, _, err = Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Preflight error = %v, want ErrLocked", err)
	}
	for _, want := range []string{LockFileName, fmt.Sprintf("process %d", os.Getpid()), dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	var be *Error
	if !errors.As(err, &be) || be.Hint() == "" {
		t.Errorf("error %v has no hint", err)
	}

	// Released: it can be taken again.
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	lock2, _, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
	if err != nil {
		t.Fatalf("Preflight after Release: %v", err)
	}
	lock2.Release()
	if err := lock2.Release(); err != nil {
		t.Errorf("second Release = %v", err)
	}
}

func TestPreflightParentIsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	_, _, err := Preflight(PreflightConfig{StoreDir: filepath.Join(file, "store")})
	if err == nil || !strings.Contains(err.Error(), `store_dir "`+filepath.Join(file, "store")+`"`) {
		t.Fatalf("error = %v, want one naming the store_dir", err)
	}
	if h := err.(*Error).Hint(); !strings.Contains(h, "file") {
		t.Errorf("hint %q does not explain the parent is a file", h)
	}
	_, _, err = Preflight(PreflightConfig{StoreDir: file})
	if err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("store_dir that is a file: error = %v", err)
	}
}

func TestPreflightFreeDisk(t *testing.T) {
	dir := t.TempDir()
	huge := int64(1) << 60 // 1EiB: more than any disk here
	_, _, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: huge, Headroom: 1 << 30})
	if err == nil {
		t.Fatal("Preflight with max_file_store 1EiB passed")
	}
	for _, want := range []string{"free disk", "jetstream.max_file_store", "1EiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if h := err.(*Error).Hint(); !strings.Contains(h, "allow_low_disk") {
		t.Errorf("hint %q does not name the override", h)
	}
	// The lock is not kept after a failed preflight.
	lock, rep, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: huge, AllowLowDisk: true})
	if err != nil {
		t.Fatalf("allow_low_disk: %v", err)
	}
	defer lock.Release()
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "allow_low_disk") {
		t.Errorf("warnings = %q", rep.Warnings)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 1536: "1.5KiB", 10 << 30: "10GiB", -1: "unlimited"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// Root running `orderstore check` on the service user's store must not
// leave a lock file the service cannot open.
func TestLockFileKeepsStoreOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: nothing to hand over; checking the lock is ours")
	}
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	lock, _, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	lock.Release()
	st, err := os.Stat(filepath.Join(dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	want := uint32(os.Geteuid())
	if os.Geteuid() == 0 {
		want = 65534
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != want {
		t.Errorf("lock file owner %d, want %d", uid, want)
	}
}
