// Command encryption measures what encryption at rest costs a restart: the median time Start takes
// on a plain and an encrypted store with the same events (bench/README.md, "Encryption at rest").
//
//	go run ./bench/encryption                  # 1,000,000 events: a few minutes on 2 cores
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

var (
	dir    = flag.String("dir", "", "directory for the stores (default: a temporary one); its disk is what is measured")
	events = flag.Int("events", 1_000_000, "events in each store")
	size   = flag.Int("size", 128, "event size in bytes")
	reps   = flag.Int("reps", 3, "restarts of each store, alternating; the median is reported")
)

func start(cfg orderstore.Config) (*orderstore.Appliance, time.Duration) {
	t0 := time.Now()
	app, err := benchkit.Start(context.Background(), cfg)
	if err != nil {
		log.Fatalf("start %s: %v", cfg.JetStream.StoreDir, err)
	}
	return app, time.Since(t0)
}

func stop(app *orderstore.Appliance) {
	if err := benchkit.Stop(app); err != nil {
		log.Fatal(err)
	}
}

// fill publishes the events (1,000 orders) and waits until the processor has applied them all.
func fill(app *orderstore.Appliance) time.Duration {
	nc, err := nats.Connect(app.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	t0 := time.Now()
	pad := strings.Repeat("x", max(0, *size-40))
	for i := range *events {
		if _, err := js.PublishAsync("orders.created", fmt.Appendf(nil, `{"order_id":"o-%d","n":"%s"}`, i%1000, pad)); err != nil {
			log.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	benchkit.Poll(context.Background(), 100*time.Millisecond, func() (bool, error) {
		lag, err := app.Lag(context.Background())
		return err == nil && lag.AckFloor >= uint64(*events), nil
	})
	return time.Since(t0)
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	defer benchkit.TempDir(dir, "encryption-bench-")()
	names := []string{"plain", "encrypted"}
	cfgs := map[string]orderstore.Config{}
	for _, n := range names {
		cfg := benchkit.Config(filepath.Join(*dir, n))
		cfg.Logger = slog.New(slog.DiscardHandler)
		if n == "encrypted" {
			cfg.JetStream.EncryptionKey = "encryption-bench-key-0123456789abcdef"
		}
		cfgs[n] = cfg
		app, _ := start(cfg)
		took := fill(app)
		stop(app)
		fmt.Printf("%-9s filled with %d events of %d B in %s (%.0f events/s, published and projected)\n",
			n, *events, *size, took.Round(time.Millisecond), float64(*events)/took.Seconds())
	}
	times := map[string][]time.Duration{}
	for rep := range *reps {
		order := slices.Clone(names)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range order {
			app, took := start(cfgs[n])
			stop(app)
			times[n] = append(times[n], took)
			fmt.Printf("  rep %d %-9s restart %s\n", rep+1, n, took.Round(time.Millisecond))
		}
	}
	p, e := benchkit.Middle(times["plain"], cmp.Compare[time.Duration]), benchkit.Middle(times["encrypted"], cmp.Compare[time.Duration])
	fmt.Printf("\nrestart with %d events (median of %d): plain %s, encrypted %s: encrypted ÷ plain %.2f\n",
		*events, *reps, p.Round(time.Millisecond), e.Round(time.Millisecond), e.Seconds()/p.Seconds())
}
