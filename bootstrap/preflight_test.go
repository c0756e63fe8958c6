package bootstrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
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

	// A second preflight on the same dir fails at once, naming the lock and its holder: this
	// process, not its PID as if another's.
	_, _, err = Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Preflight error = %v, want ErrLocked", err)
	}
	for _, want := range []string{LockFileName, "this process (another Appliance", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	var be interface{ Hint() string }
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
	if h := err.(interface{ Hint() string }).Hint(); !strings.Contains(h, "file") {
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
	if h := err.(interface{ Hint() string }).Hint(); !strings.Contains(h, "allow_low_disk") {
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

// Root running `orderstore check` on the service user's store must not
// leave a lock file the service cannot open. The decision is checked for
// root and other callers alike, whoever runs the tests; as root (CI) the
// hand-over itself is checked too: the lock file then belongs to the
// store's owner, and a child running as that user (uid 65534) takes the
// lock after root released it.
func TestLockFileKeepsStoreOwner(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		// The re-executed child, as the service user.
		lock, _, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
		if err != nil {
			t.Fatalf("Preflight as uid %d after root: %v", os.Geteuid(), err)
		}
		lock.Release()
		return
	}

	t.Run("decision", func(t *testing.T) {
		tests := []struct {
			name           string
			euid           int
			dirUID, dirGID uint32
			uid, gid       int
			chown          bool
		}{
			{"root in the service user's store", 0, 65534, 65534, 65534, 65534, true},
			{"root in a store of uid 1000, gid 50", 0, 1000, 50, 1000, 50, true},
			{"root in root's own store", 0, 0, 0, 0, 0, false},
			{"service user in its own store", 65534, 65534, 65534, 0, 0, false},
			{"non-root in another user's store (may not chown)", 1000, 65534, 65534, 0, 0, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				uid, gid, chown := lockOwner(tt.euid, tt.dirUID, tt.dirGID)
				if chown != tt.chown || (chown && (uid != tt.uid || gid != tt.gid)) {
					t.Errorf("lockOwner(euid %d, dir %d:%d) = %d:%d, chown %v; want %d:%d, chown %v",
						tt.euid, tt.dirUID, tt.dirGID, uid, gid, chown, tt.uid, tt.gid, tt.chown)
				}
			})
		}
	})

	t.Run("hand-over", func(t *testing.T) {
		root := os.Geteuid() == 0
		dir := t.TempDir()
		want := uint32(os.Geteuid()) // not root: the file stays the caller's
		if root {
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			// The service user must reach the store: t.TempDir's parent is 0700.
			if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
				t.Fatal(err)
			}
			want = 65534
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
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != want || (root && sys.Gid != want) {
			t.Errorf("lock file owner %d:%d, want uid %d (the store's owner)", sys.Uid, sys.Gid, want)
		}
		if !root {
			return
		}
		cmd := exec.Command(copyTestBinary(t), "-test.run=^TestLockFileKeepsStoreOwner$")
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the service user (uid 65534) cannot take the lock root left: %v\n%s", err, out)
		}
	})
}

// lockChildEnv makes the test binary, re-executed as the service user, take
// the lock on the store dir it names.
const lockChildEnv = "ORDERSTORE_TEST_LOCK_CHILD_DIR"

// copyTestBinary copies the test binary where any user may run it: the go
// build cache is private to root.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "bootstrap.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// nats stores a source declared with a domain as an API prefix: the two
// spellings are one source, not a change to apply at every restart.
func TestSourcesStrSpellsDomainsOneWay(t *testing.T) {
	declared := []*jetstream.StreamSource{{Name: "ORDER_EVENTS"}, {Name: "ORDER_EVENTS", Domain: "edge1"}}
	stored := []*jetstream.StreamSource{{Name: "ORDER_EVENTS"}, {Name: "ORDER_EVENTS", External: &jetstream.ExternalStream{APIPrefix: "$JS.edge1.API"}}}
	if a, b := sourcesStr(declared), sourcesStr(stored); a != b {
		t.Fatalf("declared %s, stored %s: the same sources", a, b)
	}
	other := []*jetstream.StreamSource{{Name: "ORDER_EVENTS"}, {Name: "ORDER_EVENTS", External: &jetstream.ExternalStream{APIPrefix: "$JS.edge2.API"}}}
	if sourcesStr(declared) == sourcesStr(other) {
		t.Fatal("edge1 and edge2 spelled alike")
	}
	// A hub's sources now ask each edge to deliver on subjects naming it: one stored by an older
	// hub, without, is a change to apply.
	prefixed := []*jetstream.StreamSource{{Name: "ORDER_EVENTS"}, {Name: "ORDER_EVENTS", External: &jetstream.ExternalStream{APIPrefix: "$JS.edge1.API", DeliverPrefix: "$JS.S.edge1"}}}
	if sourcesStr(prefixed) == sourcesStr(stored) {
		t.Fatal("a source with and without a deliver prefix spelled alike")
	}
}

// Two appliances started at once in one process (two tests, a program running two) probed the
// store with the same file, named by the PID, and one removed it under the other: "is not
// writable" instead of the lock's error. Each probe has a name of its own.
func TestPreflightsAtOnceInOneProcess(t *testing.T) {
	const n = 8
	for round := range 20 {
		dir := t.TempDir()
		errs := make(chan error, n)
		var locks []*Lock
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lock, _, err := Preflight(PreflightConfig{StoreDir: dir, MaxFileStore: 1 << 20})
				if err == nil {
					mu.Lock()
					locks = append(locks, lock)
					mu.Unlock()
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for _, l := range locks {
			l.Release()
		}
		for err := range errs {
			if err != nil && !errors.Is(err, ErrLocked) {
				t.Fatalf("round %d: %d Preflights at once on one store: %v, want ErrLocked", round, n, err)
			}
		}
		if len(locks) != 1 {
			t.Fatalf("round %d: %d Preflights at once on one store took %d locks, want 1", round, n, len(locks))
		}
	}
}
