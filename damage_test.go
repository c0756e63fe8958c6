package orderstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
)

// damagedStore returns a config whose store holds n processed events (over
// 100 orders), with the appliance stopped.
func damagedStore(t *testing.T, n int, opts ...func(*orderstore.Config)) orderstore.Config {
	t.Helper()
	cfg := orderstoretest.Config(t)
	for _, o := range opts {
		o(&cfg)
	}
	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	js := embeddedtest.JetStream(t, app)
	for i := range n {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d","pad":"%0200d"}`, i%100, i)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if lag, err := app.Lag(ctx); err != nil || lag.AckFloor != uint64(n) {
			return fmt.Errorf("lag %+v %v", lag, err)
		}
		return nil
	})
	js.Conn().Close()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func streamDir(cfg orderstore.Config, name string) string {
	return filepath.Join(cfg.JetStream.StoreDir, "jetstream", orderstore.StreamAccount, "streams", name)
}

func firstBlock(t *testing.T, cfg orderstore.Config) string {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(streamDir(cfg, "ORDER_EVENTS"), "msgs", "*.blk"))
	if err != nil || len(blks) == 0 {
		t.Fatalf("no message block: %v", err)
	}
	// Without the index nats rebuilds the state from the blocks.
	os.Remove(filepath.Join(streamDir(cfg, "ORDER_EVENTS"), "msgs", "index.db"))
	return blks[0]
}

// newEventsProjected publishes events on fresh and on existing orders and
// waits until the projection holds them.
func newEventsProjected(t *testing.T, app *orderstore.Appliance) {
	t.Helper()
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	for i := range 20 {
		if _, err := js.Publish(ctx, "orders.shipped", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"after-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for i := range 20 {
			if o, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil || o.Status != "shipped" {
				return fmt.Errorf("order o-%d = %+v, %v; want shipped (the new event applied, not skipped)", i, o, err)
			}
			if _, err := app.Order(ctx, fmt.Sprintf("after-%d", i)); err != nil {
				return fmt.Errorf("order after-%d: %w", i, err)
			}
		}
		return nil
	})
	if err := app.Ready(ctx); err != nil {
		t.Errorf("not ready after recovery: %v", err)
	}
}

func hasNote(app *orderstore.Appliance, sub string) bool {
	for _, n := range app.Recovery() {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// A damaged block loses what follows the damage (nats-server truncates the
// block there and moves the consumer back). orderstore reports it, keeps
// the events before it, and the new events, which reuse the lost sequence
// numbers, are projected instead of skipped as duplicates.
func TestDamagedBlockIsReportedAndNewEventsProject(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, blk string)
	}{
		{"flipped bytes", func(t *testing.T, blk string) {
			b, err := os.ReadFile(blk)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 16 {
				b[len(b)/2+i] ^= 0xff
			}
			if err := os.WriteFile(blk, b, 0o640); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated block", func(t *testing.T, blk string) {
			st, err := os.Stat(blk)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(blk, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, enc := range []struct {
			name string
			key  string
		}{{"plain", ""}, {"encrypted", keyA}} {
			t.Run(tt.name+"/"+enc.name, func(t *testing.T) {
				const n = 2000
				cfg := damagedStore(t, n, withKey(enc.key))
				tt.damage(t, firstBlock(t, cfg))
				app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
				if !hasNote(app, "acknowledged events were lost") {
					t.Errorf("recovery notes %q lack the lost events", app.Recovery())
				}
				ctx := context.Background()
				js := embeddedtest.JetStream(t, app)
				s, err := js.Stream(ctx, "ORDER_EVENTS")
				if err != nil {
					t.Fatal(err)
				}
				last := s.CachedInfo().State.LastSeq
				if last >= n {
					t.Fatalf("stream ends at %d: the damage lost nothing, the test damaged nothing", last)
				}
				// What precedes the damage is intact.
				for seq := uint64(1); seq <= last; seq += max(last/10, 1) {
					if _, err := s.GetMsg(ctx, seq); err != nil {
						t.Errorf("event %d before the damage: %v", seq, err)
					}
				}
				newEventsProjected(t, app)
			})
		}
	}
}

// A damaged block of the projection's bucket, its state rebuilt from the blocks (as after a crash):
// nats truncates it at the damage without a word, and with the deletions after it lost, older
// revisions of the orders come back. orderstore finds the acknowledged events the projection lacks
// at start-up and says so, with the rebuild that repairs it, rather than serve them silently.
func TestDamagedProjectionBlockIsReported(t *testing.T) {
	for _, damage := range []string{"flipped bytes", "truncated block"} {
		t.Run(damage, func(t *testing.T) {
			const n = 2000 // 20 events each of o-0 ... o-99
			// Room for the rebuild's shadow within the test's max_file_store.
			cfg := damagedStore(t, n, func(c *orderstore.Config) { c.Processor.ProjectionMaxBytes = 64 << 20 })
			kv := filepath.Join(streamDir(cfg, "KV_ORDERS"), "msgs")
			os.Remove(filepath.Join(kv, "index.db")) // nats rebuilds the state from the block
			blk := filepath.Join(kv, "1.blk")
			b, err := os.ReadFile(blk)
			if err != nil {
				t.Fatal(err)
			}
			if damage == "truncated block" {
				b = b[:len(b)/2]
			} else {
				for i := range 16 {
					b[len(b)/2+i] ^= 0xff
				}
			}
			if err := os.WriteFile(blk, b, 0o640); err != nil {
				t.Fatal(err)
			}
			app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
			if !hasNote(app, "the bucket lost records") || !hasNote(app, "orderstore projection rebuild") {
				t.Fatalf("recovery notes %q lack the projection's lost records and the rebuild", app.Recovery())
			}
			ctx := context.Background()
			if _, err := app.RebuildProjection(ctx, orderstore.RebuildRequest{}); err != nil {
				t.Fatal(err)
			}
			embeddedtest.WaitFor(t, 60*time.Second, func() error {
				for i := range 100 {
					if o, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil || o.Events != n/100 {
						return fmt.Errorf("order o-%d = %+v, %v; want its %d events", i, o, err, n/100)
					}
				}
				return nil
			})
			newEventsProjected(t, app)
		})
	}
}

// A consumer state file nats cannot read: the consumer is moved aside and
// declared again, the projection does not apply anything twice, new events
// are projected.
func TestDamagedConsumerStateRecovers(t *testing.T) {
	cfg := damagedStore(t, 300)
	ctx := context.Background()
	state := filepath.Join(streamDir(cfg, "ORDER_EVENTS"), "obs", "order-processor", "o.dat")
	if err := os.WriteFile(state, []byte("not a consumer state"), 0o640); err != nil {
		t.Fatal(err)
	}
	app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if !hasNote(app, "nats did not load it") {
		t.Errorf("recovery notes %q lack the consumer", app.Recovery())
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if lag, err := app.Lag(ctx); err != nil || lag.AckFloor != 300 {
			return fmt.Errorf("lag %+v %v: the redelivered events are not all settled", lag, err)
		}
		return nil
	})
	// Each order of the 300 events (3 per order) was applied once.
	for i := range 100 {
		o, err := app.Order(ctx, fmt.Sprintf("o-%d", i))
		if err != nil || o.Events != 3 {
			t.Fatalf("order o-%d = %+v, %v; want 3 events, each applied once", i, o, err)
		}
	}
	if st := app.Stats(); st.Duplicates != 300 {
		t.Errorf("stats %+v: want the 300 redelivered events acked as duplicates", st)
	}
	newEventsProjected(t, app)
}

// A stream whose meta.inf nats cannot read is skipped by nats; orderstore
// declares it again with its configuration, nats reads its blocks, and no
// event is lost. It is reported.
// Both files emptied, or only the checksum (nats then rewrote neither,
// and skipped the stream again at every start).
func TestUnloadedStreamIsReloaded(t *testing.T) {
	for _, emptied := range [][]string{{"meta.inf", "meta.sum"}, {"meta.sum"}} {
		t.Run(strings.Join(emptied, "+"), func(t *testing.T) {
			cfg := damagedStore(t, 100)
			dir := streamDir(cfg, "ORDER_EVENTS")
			for _, f := range emptied {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
			if !hasNote(app, "declared it again") {
				t.Errorf("recovery notes %q lack the reloaded stream", app.Recovery())
			}
			js := embeddedtest.JetStream(t, app)
			s, err := js.Stream(context.Background(), "ORDER_EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			if st := s.CachedInfo().State; st.Msgs != 100 || st.LastSeq != 100 {
				t.Fatalf("stream after the reload: %+v, want the 100 events", st)
			}
			newEventsProjected(t, app)
			if err := app.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Its metadata was written again: the next start loads it.
			app = orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
			if n := app.Recovery(); len(n) != 0 {
				t.Errorf("recovery notes at the next start: %q, want none", n)
			}
		})
	}
}

// The stream's only block deleted: the stream comes back empty while the
// projection holds every order. orderstore refuses to start, at every
// start (systemd restarts it), rather than rebuild the projection from
// nothing; the projection is kept.
func TestEmptiedStreamIsRefusedAndTheProjectionKept(t *testing.T) {
	cfg := damagedStore(t, 300)
	if err := os.Remove(firstBlock(t, cfg)); err != nil {
		t.Fatal(err)
	}
	for start := 1; start <= 2; start++ {
		_, err := orderstore.Start(context.Background(), cfg)
		var h orderstore.Hinted
		if err == nil || !strings.Contains(err.Error(), "is empty but the projection") || !errors.As(err, &h) || !strings.Contains(h.Hint(), "backup") {
			t.Fatalf("start %d = %v, want a refusal with a hint", start, err)
		}
	}
	kv, err := filepath.Glob(filepath.Join(streamDir(cfg, "KV_ORDERS"), "msgs", "*.blk"))
	if err != nil || len(kv) == 0 {
		t.Fatalf("the projection's blocks are gone: %v", err)
	}
	if st, err := os.Stat(kv[0]); err != nil || st.Size() == 0 {
		t.Fatalf("the projection was emptied: %v %v", st, err)
	}
}

// A consumer whose meta.inf a power cut left empty (nats writes it without
// fsync in the relaxed modes) is not loaded by nats, and declaring it
// again over its directory kept the empty meta.inf (skipped again at
// every start) and the state file, which the same cut can leave ahead of
// the stream: the consumer then waited for ever on deliveries past the
// stream's end and skipped the new events that reuse those sequence
// numbers. orderstore moves the directory out of nats' tree and declares
// the consumer again from the start.
func TestUnloadedConsumerIsDeclaredAgain(t *testing.T) {
	cfg := damagedStore(t, 100)
	ctx := context.Background()
	// The store as it was at 100 events, and the consumer's state after
	// 50 more were delivered: the stream lost the 50, the consumer's state
	// did not.
	before := t.TempDir()
	if out, err := exec.Command("cp", "-a", cfg.JetStream.StoreDir+"/.", before).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	// The 50 are delivered, not acked (the handler holds them), as a
	// power cut leaves a consumer that delivered events it had not
	// settled yet.
	held := cfg
	held.Processor.Handler = processor.HandlerFunc(func(ctx context.Context, ev processor.Event) error {
		<-ctx.Done()
		return ctx.Err()
	})
	app, err := orderstore.Start(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	js := embeddedtest.JetStream(t, app)
	for i := range 50 {
		if _, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
		if err != nil {
			return err
		}
		if ci := c.CachedInfo(); ci.Delivered.Stream != 150 || ci.AckFloor.Stream != 100 {
			return fmt.Errorf("delivered %d, ack floor %d; want 150 and 100", ci.Delivered.Stream, ci.AckFloor.Stream)
		}
		return nil
	})
	js.Conn().Close()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ahead, err := os.ReadFile(filepath.Join(streamDir(cfg, "ORDER_EVENTS"), "obs", "order-processor", "o.dat"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.JetStream.StoreDir = before
	obs := filepath.Join(streamDir(cfg, "ORDER_EVENTS"), "obs", "order-processor")
	if err := os.WriteFile(filepath.Join(obs, "o.dat"), ahead, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(obs, "meta.inf"), nil, 0o640); err != nil {
		t.Fatal(err)
	}

	app = orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if !hasNote(app, "nats did not load it") {
		t.Errorf("recovery notes %q lack the consumer nats did not load", app.Recovery())
	}
	moved, err := filepath.Glob(filepath.Join(before, "damaged", "*order-processor*"))
	if err != nil || len(moved) != 1 {
		t.Errorf("the consumer's directory moved aside: %q, %v; want one under %q", moved, err, filepath.Join(before, "damaged"))
	}
	// Caught up with the stream as it is, nothing awaiting an ack.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if lag, err := app.Lag(ctx); err != nil || lag.AckFloor != 100 || lag.AckPending != 0 || lag.Pending != 0 {
			return fmt.Errorf("lag %+v %v: want every one of the 100 events settled", lag, err)
		}
		return nil
	})
	newEventsProjected(t, app)
	for i := range 20 {
		// The 50 paid events were lost with the stream's tail: the
		// projection is the fold of what the stream holds (o-0..o-19
		// shipped since).
		if o, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil || o.Status != "shipped" || o.Events != 2 {
			t.Fatalf("order o-%d = %+v, %v; want its stored event and the new one", i, o, err)
		}
	}
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Declared afresh: the next start loads it and notes nothing.
	app = orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if n := app.Recovery(); len(n) != 0 {
		t.Errorf("recovery notes at the next start: %q, want none", n)
	}
}

// A power cut in durability "interval" can lose the projection's last
// writes while the consumer's acks of those events survive; the start
// after it rebuilds the projection. It still must when that start runs in
// another durability mode (say the operator moved to group commit after
// the cut): the last run's mode is what the store went through.
func TestProjectionCheckedAfterRelaxedCutWhateverTheNewMode(t *testing.T) {
	interval := func(c *orderstore.Config) {
		c.JetStream.Durability, c.JetStream.SyncInterval = orderstore.DurabilityInterval, time.Second
	}
	cfg := damagedStore(t, 100, interval)
	ctx := context.Background()
	// The projection as it was at 100 events.
	kvDir, kvBefore := streamDir(cfg, "KV_ORDERS"), t.TempDir()
	if err := os.CopyFS(kvBefore, os.DirFS(kvDir)); err != nil {
		t.Fatal(err)
	}
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	js := embeddedtest.JetStream(t, app)
	for i := range 50 {
		if _, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if lag, err := app.Lag(ctx); err != nil || lag.AckFloor != 150 {
			return fmt.Errorf("lag %+v %v", lag, err)
		}
		return nil
	})
	marker := filepath.Join(cfg.JetStream.StoreDir, "orderstore.running")
	running, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	js.Conn().Close()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The cut: the bucket lost the 50 writes, the consumer's acks stayed,
	// and the run marker says the run did not stop.
	if err := os.RemoveAll(kvDir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(kvDir, os.DirFS(kvBefore)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, running, 0o640); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, func(c *orderstore.Config) {
		*c = cfg
		c.JetStream.Durability, c.JetStream.SyncInterval = orderstore.DurabilityGroupCommit, 0
	})
	if !hasNote(app, "the projection lacks event") {
		t.Errorf("recovery notes %q lack the projection's lost writes", app.Recovery())
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for i := range 50 {
			if o, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil || o.Status != "paid" {
				return fmt.Errorf("order o-%d = %+v, %v; want paid (the acknowledged event applied)", i, o, err)
			}
		}
		return nil
	})
}

// An encrypted stream whose key file (meta.key) a power cut left empty
// (nats writes it without fsync in the relaxed modes): nats skips the
// stream, and declaring it again made nats-server panic on the short key,
// taking the appliance down at every start. Start-up now refuses with a
// hint, and the stream's blocks are left as they were.
func TestLostStreamKeyIsRefused(t *testing.T) {
	cfg := damagedStore(t, 100, withKey(keyA))
	blk := firstBlock(t, cfg)
	before, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	refusedWithKeyLost(t, cfg, "ORDER_EVENTS", "backup")
	if after, err := os.ReadFile(blk); err != nil || string(after) != string(before) {
		t.Errorf("the stream's block changed (%v)", err)
	}
}

// A projection bucket made after the processor's consumer (processor.projection_bucket renamed,
// or the bucket's directory moved away) held none of the orders the consumer had acknowledged,
// and the consumer never delivered them again: /v1/orders answered 404 for orders that exist.
// orderstore notices the new bucket at start and rebuilds the projection from the stream.
func TestNewProjectionBucketIsRebuilt(t *testing.T) {
	cfg := damagedStore(t, 300) // 100 orders, 3 events each
	cfg.Processor.ProjectionBucket = "ORDERS_V2"
	// The old bucket keeps its reservation of max_file_store: no room for the new one.
	var h orderstore.Hinted
	if app, err := orderstore.Start(context.Background(), cfg); err == nil || !errors.As(err, &h) || !strings.Contains(h.Hint(), "projection_bucket") {
		if err == nil {
			app.Close(context.Background())
		}
		t.Fatalf("start with no room for the new bucket = %v, want a refusal with a hint", err)
	}
	cfg.Processor.ProjectionMaxBytes = 64 << 20
	for _, start := range []string{"bucket renamed", "bucket moved away"} {
		if start == "bucket moved away" {
			if err := os.RemoveAll(streamDir(cfg, "KV_ORDERS_V2")); err != nil {
				t.Fatal(err)
			}
		}
		app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
		ctx := context.Background()
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			for i := range 100 {
				if o, err := app.Order(ctx, fmt.Sprintf("o-%d", i)); err != nil || o.Events != 3 {
					return fmt.Errorf("%s: order o-%d = %+v, %v; want its 3 events", start, i, o, err)
				}
			}
			return nil
		})
		if !hasNote(app, "the projection is rebuilt") {
			t.Errorf("%s: recovery notes %q do not say the projection was rebuilt", start, app.Recovery())
		}
		if err := app.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A projection bucket nats cannot load (its key lost): start-up is refused with a hint, and
// following it (move the projection's directories away) brings every order back, rebuilt from the
// stream; the hint said to restore the bucket from a backup, which leaves it behind the consumer.
func TestLostProjectionKeyHintRebuilds(t *testing.T) {
	cfg := damagedStore(t, 300, withKey(keyA))
	dir := refusedWithKeyLost(t, cfg, "KV_ORDERS", "rebuilds the projection")
	for _, d := range []string{dir, streamDir(cfg, "KV_ORDERS_HISTORY")} {
		if err := os.Rename(d, d+".damaged"); err != nil {
			t.Fatal(err)
		}
	}
	app := orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		for i := range 100 {
			if o, err := app.Order(context.Background(), fmt.Sprintf("o-%d", i)); err != nil || o.Events != 3 {
				return fmt.Errorf("order o-%d = %+v, %v; want its 3 events", i, o, err)
			}
		}
		return nil
	})
}

// refusedWithKeyLost empties stream's meta.key and checks that a start is refused with a hint
// naming the stream's directory and saying want; it returns the directory.
func refusedWithKeyLost(t *testing.T, cfg orderstore.Config, stream, want string) string {
	t.Helper()
	dir := streamDir(cfg, stream)
	if err := os.WriteFile(filepath.Join(dir, "meta.key"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := orderstore.Start(ctx, cfg)
	if err == nil {
		app.Close(ctx)
		t.Fatalf("started over %s whose key is lost", stream)
	}
	var h orderstore.Hinted
	if !errors.As(err, &h) || !strings.Contains(h.Hint(), dir) || !strings.Contains(h.Hint(), want) {
		t.Fatalf("start = %v, want a refusal whose hint names %q and says %q", err, dir, want)
	}
	return dir
}
