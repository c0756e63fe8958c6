// Command orders benchmarks listing orders by status through the admin API (GET /v1/orders), among
// 10,000 and 1,000,000 orders (goal: p50 of the largest at most 1.5 times the smallest's).
// bench/README.md, "The order index", holds the figures.
//
//	go run ./bench/orders                         # 10k and 1M orders
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

const goal = 1.5

func main() {
	sizes := flag.String("orders", "10000,1000000", "comma-separated numbers of orders")
	statuses := flag.Int("statuses", 10, "statuses the orders are spread over")
	reqs := flag.Int("reqs", 1000, "requests of each kind, per size")
	dir := flag.String("dir", "", "parent of the stores (default: the system temp dir)")
	flag.Parse()
	ns, err := benchkit.Ints("orders", *sizes)
	if err == nil && slices.Min(ns) < 200**statuses {
		err = fmt.Errorf("-orders %q: want numbers of at least 200 × -statuses", *sizes)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(2)
	}
	fmt.Printf("order listings: %s; %s\n\n", benchkit.Machine(orderstore.NATSServerVersion), benchkit.Command("./bench/orders"))
	fmt.Println("| orders | start until indexed | query | p50 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	p50s := map[int]time.Duration{}
	for _, n := range ns {
		res, load, err := run(n, *statuses, *reqs, *dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "orders:", err)
			os.Exit(1)
		}
		for _, r := range res {
			fmt.Printf("| %s | %s | %s | %s | %s |\n", benchkit.Num(n), benchkit.Secs(load), r.name, benchkit.Ms(r.p50), benchkit.Ms(r.p99))
		}
		p50s[n] = res[0].p50
	}
	lo, hi := slices.Min(ns), slices.Max(ns)
	ratio := float64(p50s[hi]) / float64(p50s[lo])
	fmt.Printf("\np50 of the 100 oldest of one status, %s ÷ %s orders: %.2f (goal ≤ %.1f: %s)\n", benchkit.Num(hi), benchkit.Num(lo), ratio, goal, benchkit.PassFail(ratio <= goal))
}

type result struct {
	name     string
	p50, p99 time.Duration
}

// run loads n orders into a fresh appliance and times the listings.
func run(n, statuses, reqs int, parent string) ([]result, time.Duration, error) {
	store, err := os.MkdirTemp(parent, "orders-bench-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(store)
	cfg := benchkit.Config(store)
	cfg.Processor.Enabled = false // the bench writes the records
	cfg.Processor.ProjectionMaxBytes = max(cfg.Processor.ProjectionMaxBytes, int64(n)*400)
	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	defer app.Close(ctx)
	nc, err := nats.Connect("", nats.InProcessServer(app))
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	benchkit.Logf("%s orders: writing their records", benchkit.Num(n))
	start := time.Now()
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano)
		// No stream sequences: the recovery check at the restart below
		// compares those with the stream, which the bench leaves empty.
		rec := fmt.Sprintf(`{"order_id":"order-%08d","status":"s%d","last_event":"e","events":1,"last_event_at":%q,"first_event_at":%q}`,
			i, i%statuses, at, at)
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.order-%08d", cfg.Processor.ProjectionBucket, i), []byte(rec)); err != nil {
			return nil, 0, err
		}
		if i%4000 == 3999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	benchkit.Logf("%s orders written in %s; waiting for the index", benchkit.Num(n), benchkit.Secs(time.Since(start)))
	// The index follows the writes: wait until it counts them all. Then
	// load it again from scratch, timed: a restart.
	if err := waitIndexed(app, n); err != nil {
		return nil, 0, err
	}
	if err := app.Close(ctx); err != nil {
		return nil, 0, err
	}
	start = time.Now()
	if app, err = orderstore.Start(ctx, cfg); err != nil {
		return nil, 0, err
	}
	defer app.Close(ctx)
	if err := waitIndexed(app, n); err != nil {
		return nil, 0, err
	}
	load := time.Since(start)

	get := func(path string) (time.Duration, []byte, error) {
		rec := httptest.NewRecorder()
		t := time.Now()
		app.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1"+path, nil))
		d := time.Since(t)
		if rec.Code != 200 {
			return d, nil, fmt.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return d, rec.Body.Bytes(), nil
	}
	var page struct {
		Orders []json.RawMessage `json:"orders"`
		Next   string            `json:"next"`
	}
	_, body, err := get("/v1/orders?status=s3&limit=100")
	if err != nil {
		return nil, 0, err
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Orders) != 100 || page.Next == "" {
		return nil, 0, fmt.Errorf("a page of s3: %d orders, next %q (%v)", len(page.Orders), page.Next, err)
	}
	kinds := []struct{ name, path string }{
		{"100 oldest of one status", "/v1/orders?status=s3&limit=100"},
		{"100 newest of one status, no event for a day", "/v1/orders?status=s3&limit=100&order=newest&older_than=1d"},
		{"the next page of the first", "/v1/orders?status=s3&limit=100&cursor=" + page.Next},
	}
	var out []result
	for _, k := range kinds {
		var ds []time.Duration
		for range reqs {
			d, _, err := get(k.path)
			if err != nil {
				return nil, 0, err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		out = append(out, result{k.name, ds[len(ds)/2], ds[len(ds)*99/100]})
	}
	return out, load, nil
}

// waitIndexed waits until the order index has loaded and counts n orders.
func waitIndexed(app *orderstore.Appliance, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if _, total, err := app.OrderCounts(ctx); err == nil && total == n {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the order index did not count %d orders within 10 minutes", n)
}
