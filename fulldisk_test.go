package orderstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/orderstoretest"
)

// tmpfs mounts a tmpfs of size bytes (the test runs as root, as CI does)
// and unmounts it when the test ends.
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	testenv.Require(t, testenv.Root())
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// The disk fills under a publishing load: publishers get an error (not a
// hang), /readyz says why, and once space is freed publishing resumes
// without a restart of orderstore. Every acknowledged event is there
// after a restart.
func TestFullDisk(t *testing.T) {
	disk := tmpfs(t, 48<<20)
	cfg := orderstoretest.Config(t)
	cfg.JetStream.StoreDir = filepath.Join(disk, "store")
	cfg.JetStream.AllowLowDisk = true // the disk is smaller than max_file_store on purpose
	cfg.JetStream.DiskHeadroom = 1 << 20
	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(app.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	acked := map[uint64]bool{}
	publish := func(i int) (uint64, error) {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ack, err := js.Publish(pctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d","pad":"%01000d"}`, i%100, i))
		if err != nil {
			return 0, err
		}
		acked[ack.Sequence] = true
		return ack.Sequence, nil
	}
	var refusal error
	i := 0
	timeouts := 0
	for ; i < 100_000 && refusal == nil && timeouts < 5; i++ {
		_, err := publish(i)
		if errors.Is(err, context.DeadlineExceeded) {
			timeouts++ // those in flight when the store failed get no reply
		}
		var api *jetstream.APIError
		if errors.As(err, &api) && strings.Contains(api.Description, "store cannot write") {
			refusal = err
		}
	}
	if refusal == nil {
		t.Fatalf("no publish was refused after %d (%d timed out): want an error, not a hang", i, timeouts)
	}
	t.Logf("refused after %d publishes, %d acked: %v", i, len(acked), refusal)
	if err := app.Ready(ctx); err == nil || !strings.Contains(err.Error(), "store_writes") {
		t.Errorf("Ready with a full disk = %v, want not ready naming store_writes", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error { return app.Ready(ctx) })
	resumed := 0
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		if _, err := publish(i); err != nil {
			return fmt.Errorf("publish after space was freed: %w", err)
		}
		i++
		resumed++
		return nil
	})
	select {
	case <-app.Done():
		t.Fatalf("orderstore stopped: %v", app.Wait())
	default:
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		_, err := app.Order(ctx, fmt.Sprintf("o-%d", (i-1)%100))
		return err
	})
	nc.Close()

	// Every acknowledged event is in the stream after a restart.
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app2 := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	js2 := embeddedtest.JetStream(t, app2)
	s, err := js2.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for seq := range acked {
		if _, err := s.GetMsg(ctx, seq); err != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged events lost", lost, len(acked))
	}
	t.Logf("%d acked events all present after the restart (%d published after space was freed)", len(acked), resumed)
}

// The projection's writes hit a full disk: the processor's events fail
// while it lasts, and once space is freed (nats restarted by the store
// guard) every event is projected; none is dead-lettered for the disk.
func TestFullDiskDeadLettersNothing(t *testing.T) {
	disk := tmpfs(t, 48<<20)
	cfg := orderstoretest.Config(t)
	cfg.JetStream.StoreDir = filepath.Join(disk, "store")
	cfg.JetStream.AllowLowDisk = true
	cfg.JetStream.DiskHeadroom = 1 << 20
	// Two deliveries, 50 ms apart: the disk's failures alone would spend them. ack_wait is
	// well above a delivery's handling, even under -race: a delivery without a result
	// (the processor stopped on it, or exceeded ack_wait) counts, rightly.
	cfg.Processor.AckWait = 10 * time.Second
	cfg.Processor.MaxDeliver = 2
	cfg.Processor.Backoff = []time.Duration{50 * time.Millisecond}
	ctx := context.Background()
	const n = 2000
	{ // the events, stored with the processor off
		off := cfg
		off.Processor.Enabled = false
		app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = off })
		js := embeddedtest.JetStream(t, app)
		for i := range n {
			if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d","pad":"%0200d"}`, i, i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(disk, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-(256<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		if st := app.Stats(); st.Failed < 2*n/10 {
			return fmt.Errorf("stats %+v: want the projection's writes failing on the full disk", st)
		}
		return nil
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 120*time.Second, func() error {
		for i := range n {
			if _, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil {
				return fmt.Errorf("order o-%d: %v (stats %+v)", i, err, app.Stats())
			}
		}
		return nil
	})
	if st := app.Stats(); st.DeadLettered != 0 {
		t.Errorf("stats %+v: %d events dead-lettered for a full disk, want every one projected", st, st.DeadLettered)
	}
}
