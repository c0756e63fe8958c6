//go:build linux

package orderstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

// hangFS is a FUSE loopback of a directory whose fsyncs and fdatasyncs,
// once hang is called, do not return until release: a hung disk or NFS
// server. (powerfs, internal/powerloss, is that package's test code, and
// the bound this test shortens is set through export_test.go here.)
type hangFS struct {
	held atomic.Pointer[chan struct{}]
}

func (h *hangFS) hang() {
	ch := make(chan struct{})
	h.held.Store(&ch)
}

func (h *hangFS) release() {
	if ch := h.held.Swap(nil); ch != nil {
		close(*ch)
	}
}

type hangNode struct {
	fs.LoopbackNode
	h *hangFS
}

func (n *hangNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if ch := n.h.held.Load(); ch != nil {
		<-*ch
	}
	if s, ok := f.(fs.FileFsyncer); ok {
		return s.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}

// mountHangFS serves a new directory through hangFS and returns the mount
// point; the test's cleanup releases the fsyncs and unmounts.
func mountHangFS(t *testing.T) (string, *hangFS) {
	t.Helper()
	testenv.Require(t, testenv.FUSE())
	dir, mnt, h := t.TempDir(), t.TempDir(), &hangFS{}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	root := &fs.LoopbackRoot{Path: dir, Dev: st.Dev, NewNode: func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &hangNode{LoopbackNode: fs.LoopbackNode{RootData: r}, h: h}
	}}
	root.RootNode = root.NewNode(root, nil, "", nil)
	srv, err := fs.Mount(mnt, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: dir, Name: "hangfs"}})
	if err != nil {
		t.Fatalf("mount hangfs at %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		h.release()
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt, h
}

// A sync that does not return (a hung disk or NFS server) leaves publishes
// waiting for their acks, and /readyz fails. With group commit the
// durability check names the stream, the store and what to check, and
// /metrics shows how long the sync has been in flight; with "always" nats
// syncs under the stream's lock, and every JetStream check times out.
// Once the sync returns, /readyz is ready again by itself and the publish
// gets its ack.
func TestHungSyncFailsReadiness(t *testing.T) {
	for _, tc := range []struct {
		durability, check string
		reason            []string // what the failed check's reason holds; %s: the store
	}{
		{orderstore.DurabilityGroupCommit, "durability", []string{"stream ORDER_EVENTS", "jetstream.store_dir %s", "in flight for", "dmesg"}},
		{orderstore.DurabilityAlways, "stream", []string{"context deadline exceeded"}},
	} {
		t.Run(tc.durability, func(t *testing.T) {
			mnt, disk := mountHangFS(t)
			store := filepath.Join(mnt, "store")
			app := orderstoretest.Start(t, func(c *orderstore.Config) {
				c.JetStream.StoreDir, c.JetStream.Durability = store, tc.durability
				c.Admin.Listen = "127.0.0.1:0"
				orderstore.SetSyncHungAfter(c, 500*time.Millisecond)
			})
			t.Cleanup(disk.release) // before the appliance's Close: it syncs
			ctx := context.Background()
			embeddedtest.WaitFor(t, 30*time.Second, func() error { return app.Ready(ctx) })
			nc, err := nats.Connect(app.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)

			disk.hang()
			f, err := js.PublishAsync("orders.created", []byte(`{"order_id":"h-1"}`))
			if err != nil {
				t.Fatal(err)
			}
			var failed status.Check
			embeddedtest.WaitFor(t, 30*time.Second, func() error {
				var ready struct{ Checks []status.Check }
				code := adminJSON(t, app, "/readyz", &ready)
				for _, c := range ready.Checks {
					if c.Name == tc.check && !c.OK {
						if failed = c; code != http.StatusServiceUnavailable {
							t.Fatalf("/readyz answered %d with the %s check failed", code, c.Name)
						}
						return nil
					}
				}
				return fmt.Errorf("/readyz %d, checks %+v: the %s check has not failed", code, ready.Checks, tc.check)
			})
			for _, want := range tc.reason {
				if want = strings.ReplaceAll(want, "%s", store); !strings.Contains(failed.Reason, want) {
					t.Errorf("%s check's reason %q lacks %q", failed.Name, failed.Reason, want)
				}
			}
			if tc.durability == orderstore.DurabilityGroupCommit {
				if got := inFlightMetric(t, app); got <= 0.5 {
					t.Errorf("orderstore_group_commit_sync_inflight_seconds %v while /readyz reports the sync hung, want over 0.5", got)
				}
			}
			select {
			case a := <-f.Ok():
				t.Fatalf("publish acked (%+v) while its sync hangs", a)
			case err := <-f.Err():
				t.Fatalf("publish failed while its sync hangs: %v", err)
			default:
			}

			disk.release()
			embeddedtest.WaitFor(t, 30*time.Second, func() error { return app.Ready(ctx) })
			select {
			case a := <-f.Ok():
				if a.Stream != "ORDER_EVENTS" {
					t.Errorf("ack %+v", a)
				}
			case err := <-f.Err():
				t.Fatalf("publish after the sync returned: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("no ack 30 s after the sync returned")
			}
		})
	}
}

// inFlightMetric is orderstore_group_commit_sync_inflight_seconds in app's /metrics.
func inFlightMetric(t *testing.T, app *orderstore.Appliance) float64 {
	t.Helper()
	resp, err := http.Get("http://" + app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^orderstore_group_commit_sync_inflight_seconds (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics lacks orderstore_group_commit_sync_inflight_seconds:\n%s", b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
