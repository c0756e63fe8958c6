package orderindex

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

func bucket(t testing.TB) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "ORDERS", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

func record(status string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"order_id":"x","status":%q,"last_event":"t","events":1,"last_event_at":%q,"applied":[1,2,3]}`, status, at.Format(time.RFC3339Nano))
}

// run starts the index's watch and waits until it has loaded.
func run(t testing.TB, x *Index, kv jetstream.KeyValue, skipped func(string, error)) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, kv, skipped) }()
	select {
	case <-x.Loaded():
	case err := <-done:
		t.Fatalf("the watch ended before loading: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the index did not load")
	}
	return func() error { cancel(); return <-done }
}

// The watch loads what the bucket holds, then follows puts, deletes and
// purges; a record that is not an order's is skipped and reported.
func TestWatchFollowsTheBucket(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	for i, s := range []string{"created", "paid", "paid"} {
		if _, err := kv.Put(ctx, fmt.Sprintf("o-%d", i), record(s, t0.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var skipped []string
	x := New(nil)
	stop := run(t, x, kv, func(key string, err error) {
		mu.Lock()
		skipped = append(skipped, key)
		mu.Unlock()
	})
	if got := x.Len(); got != 3 {
		t.Fatalf("loaded %d orders, want 3", got)
	}
	mu.Lock()
	if !slices.Equal(skipped, []string{"junk"}) {
		t.Errorf("skipped %v, want [junk]", skipped)
	}
	mu.Unlock()
	kv.Put(ctx, "o-0", record("paid", t0.Add(time.Hour)))
	kv.Delete(ctx, "o-1")
	kv.Purge(ctx, "o-2")
	kv.Put(ctx, "o-3", record("shipped", t0))
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		p, _ := x.List(Query{})
		var got []string
		for _, e := range p.Orders {
			got = append(got, e.OrderID+":"+e.Status)
		}
		if want := []string{"o-3:shipped", "o-0:paid"}; !slices.Equal(got, want) {
			return fmt.Errorf("listed %v, want %v", got, want)
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Errorf("Run returned %v after its context ended, want nil", err)
	}
}

// A watch whose bucket goes away ends with an error (the appliance then
// fails), never silently.
func TestWatchOfADeletedBucketFails(t *testing.T) {
	js, kv := bucket(t)
	x := New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx, kv, nil) }()
	<-x.Loaded()
	if err := js.DeleteKeyValue(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its bucket was deleted")
		}
	case <-time.After(time.Minute):
		t.Fatal("Run goes on after its bucket was deleted")
	}
}

// BenchmarkLoad loads a bucket of 100,000 orders into the index, and
// reports the index's memory per order.
//
//	go test -run '^$' -bench BenchmarkLoad -benchtime 3x ./internal/orderindex
func BenchmarkLoad(b *testing.B) {
	const n = 100_000
	js, kv := bucket(b)
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.ORDERS.order-%07d", i), record(fmt.Sprintf("s%d", i%10), t0.Add(time.Duration(i)*time.Second))); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	var heap float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		x := New(nil)
		stop := run(b, x, kv, nil)
		stop()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if x.Len() != n {
			b.Fatalf("loaded %d, want %d", x.Len(), n)
		}
		heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		runtime.KeepAlive(x)
	}
	b.ReportMetric(heap/n, "bytes/order")
}

// A record the bucket's TTL removes leaves a marker (LimitMarkerTTL, as
// orderstore declares the projection bucket): the index forgets the order
// as the projection does.
func TestWatchForgetsExpiredRecords(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS", Storage: jetstream.FileStorage, TTL: time.Second, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	x := New(nil)
	stop := run(t, x, kv, nil)
	defer stop()
	if _, err := kv.Put(ctx, "o-1", record("paid", t0)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if x.Len() != 1 {
			return fmt.Errorf("%d orders indexed, want o-1", x.Len())
		}
		return nil
	})
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, err := kv.Get(ctx, "o-1"); err == nil {
			return fmt.Errorf("o-1 has not expired yet")
		}
		if n := x.Len(); n != 0 {
			return fmt.Errorf("o-1 expired from the bucket, but the index still holds %d orders", n)
		}
		return nil
	})
}

// A watch stopped while its updates are backed up (a load under way, a
// burst of writes) leaves no goroutine behind: the watcher's delivery,
// blocked on a full channel nobody reads any more, would hold the
// subscription and its pending records for the life of the connection.
func TestWatchStoppedWhileBackedUpLeavesNoGoroutine(t *testing.T) {
	js, kv := bucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := kv.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.ORDERS.o-%d", i), record("paid", t0)); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	// The first record's report holds Run until ctx ends: meanwhile the
	// watcher fills its channel and blocks.
	held := make(chan struct{})
	skipped := func(string, error) { close(held); <-ctx.Done() }
	done := make(chan error, 1)
	go func() { done <- New(nil).Run(ctx, kv, skipped) }()
	<-held
	delivering := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "jetstream.(*kvs).WatchFiltered.func")
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if !delivering() {
			return errors.New("the watcher is not blocked delivering yet")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if delivering() {
			return errors.New("the stopped watch's delivery goroutine is still blocked on its updates")
		}
		return nil
	})
}

// Loaded, the index is at the bucket's last sequence even when the write there is gone (an order
// expired, and its marker too): the watch never reads it, and a lag must not stay.
func TestLoadedIndexIsAtTheBucketsLastSequence(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS", Storage: jetstream.FileStorage, TTL: time.Second, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "o-1", record("paid", t0)); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		i, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if i.State.Msgs > 0 || i.State.LastSeq < 2 {
			return fmt.Errorf("o-1 and its expiry marker not both gone yet: %+v", i.State)
		}
		last = i.State.LastSeq
		return nil
	})
	x := New(nil)
	defer run(t, x, kv, nil)()
	if got := x.Applied(); got != last || x.Len() != 0 {
		t.Errorf("loaded: applied %d with %d orders, want %d (the bucket's last sequence) with none", got, x.Len(), last)
	}
}
