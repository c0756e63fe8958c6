package orderstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/orderstoretest"
)

// BenchmarkPublishLayout prices orderstore's account layout (issue 38,
// docs/security.md "How replies stay private") on the ingest path:
// sync_interval 2m, processor off, events of about 128 B, one producer with one
// publish in flight and 64 producers with 16 each, publishing into
//
//   - stock: the standalone nats-server (the upstream module, not our
//     copy), one account: the ceiling;
//   - anonymous: orderstore on its defaults, anonymous loopback clients,
//     which a single node with no users has in the stream's account
//     (docs/security.md);
//   - producer: orderstore with users, a producer in an account of its
//     own reaching the stream through imports, as every configured user
//     does;
//   - stream-account: the first orderstore, its producers' connections
//     signed in as orderstore's own (the stream's account, no permissions):
//     the ceiling of the layout.
//
// Compare msgs/s between the sub-benchmarks of one run:
//
//	go test -run '^$' -bench PublishLayout -benchtime 300000x -count 3 .
func BenchmarkPublishLayout(b *testing.B) {
	ctx := context.Background()
	sopts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.TempDir(), NoSigs: true, SyncInterval: 2 * time.Minute}
	s, err := server.NewServer(sopts)
	if err != nil {
		b.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDER_EVENTS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	cfg := orderstoretest.Config(b)
	cfg.JetStream.Durability = orderstore.DurabilityInterval
	cfg.JetStream.SyncInterval = 2 * time.Minute
	cfg.Processor.Enabled = false
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer app.Close(ctx)
	ucfg := orderstoretest.Config(b)
	ucfg.JetStream.Durability, ucfg.JetStream.SyncInterval = cfg.JetStream.Durability, cfg.JetStream.SyncInterval
	ucfg.Processor.Enabled = false
	ucfg.Server.Users = []orderstore.User{{Name: "p", Password: "bench-producer-password", Role: orderstore.RoleProducer}}
	users, err := orderstore.Start(ctx, ucfg)
	if err != nil {
		b.Fatal(err)
	}
	defer users.Close(ctx)

	targets := []struct {
		name string
		url  string
		opts []nats.Option
	}{
		{"stock", s.ClientURL(), nil},
		{"anonymous", app.ClientURL(), nil},
		{"producer", users.ClientURL(), []nats.Option{nats.UserInfo("p", "bench-producer-password")}},
		{"stream-account", app.ClientURL(), orderstore.OwnConnectionOptions(app)},
	}
	for _, load := range []struct{ p, w int }{{1, 1}, {64, 16}} {
		for _, t := range targets {
			b.Run(fmt.Sprintf("%dx%d/%s", load.p, load.w, t.name), func(b *testing.B) {
				publishLoad(b, t.url, t.opts, load.p, load.w)
			})
		}
	}
}

// publishLoad publishes b.N events of about 128 B from p connections, each with w
// acked publishes in flight, and reports msgs/s.
func publishLoad(b *testing.B, url string, opts []nats.Option, p, w int) {
	payload := []byte(`{"order_id":"o-1","notes":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	jss := make([]jetstream.JetStream, p)
	for i := range p {
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		jss[i], _ = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(w))
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range p {
		n := b.N / p
		if i < b.N%p {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inflight []jetstream.PubAckFuture
			for sent := 0; sent < n || len(inflight) > 0; {
				for sent < n && len(inflight) < w {
					f, err := jss[i].PublishAsync("orders.created", payload)
					if err != nil {
						b.Error(err)
						return
					}
					inflight = append(inflight, f)
					sent++
				}
				select {
				case <-inflight[0].Ok():
				case err := <-inflight[0].Err():
					b.Error(err)
					return
				}
				inflight = inflight[1:]
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
