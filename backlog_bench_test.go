package orderstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// peakRSS is the process's peak resident set (VmHWM) in MiB.
func peakRSS(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// BenchmarkBacklogMemory measures the memory a backlog of large events
// costs: 1,800 events of 1,000 KiB (1.8 GB) are stored with the processor
// off, then the processor catches up. It reports the peak RSS of the
// whole process (broker and processor) before and after.
// Run: go test -run '^$' -bench BacklogMemory -benchtime 1x .
func BenchmarkBacklogMemory(b *testing.B) {
	const n = 1800
	for b.Loop() {
		cfg := orderstoretest.Config(b)
		cfg.Processor.Enabled = false
		cfg.JetStream.MaxFileStore = 3 << 30
		cfg.Stream.MaxBytes = 2 << 30
		ctx := context.Background()
		app, err := orderstore.Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		nc, err := nats.Connect(app.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		pad := strings.Repeat("x", 1000<<10)
		for i := range n {
			if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d","pad":"%s"}`, i, pad)); err != nil {
				b.Fatal(err)
			}
		}
		nc.Close()
		if err := app.Close(ctx); err != nil {
			b.Fatal(err)
		}
		before := peakRSS(b)
		cfg.Processor.Enabled = true
		app = orderstoretest.Start(b, func(c *orderstore.Config) { *c = cfg })
		embeddedtest.WaitFor(b, 5*time.Minute, func() error {
			if got := app.Stats().Processed; got < n {
				return fmt.Errorf("processed %d of %d", got, n)
			}
			return nil
		})
		b.ReportMetric(before, "peak-MiB-after-publish")
		b.ReportMetric(peakRSS(b), "peak-MiB-after-catch-up")
	}
}
