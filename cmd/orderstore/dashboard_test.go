package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
)

// The dashboard in a real headless browser (Debian's chromium): the numbers
// on the page change as events are published, without a reload.
func TestDashboardInBrowser(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	a := startInProcess(t, "")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	// Chromium occasionally dies while it starts on a loaded machine (seen
	// twice under go test -race ./..., with nothing but crashpad noise on
	// its stderr): starting the browser is retried, the page never is.
	var bctx context.Context
	for attempt := 1; ; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		c, cancelCtx := chromedp.NewContext(actx)
		err := chromedp.Do(c) // starts the browser
		if err == nil {
			defer cancelAlloc()
			defer cancelCtx()
			bctx = c
			break
		}
		cancelCtx()
		cancelAlloc()
		if attempt == 3 {
			t.Fatalf("chromium did not start in 3 attempts: %v", err)
		}
		t.Logf("chromium did not start (attempt %d), retrying: %v", attempt, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	num := func(sel string) int {
		s := strings.ReplaceAll(text(sel), ",", "")
		n, err := strconv.Atoi(s)
		if err != nil {
			return -1
		}
		return n
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(a.adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#stream-messages")),
	); err != nil {
		t.Fatal(err)
	}
	// A marker that a reload would wipe out.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__noReload = "still here"`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 15*time.Second, func() error {
		if s := text("#status"); s != "ready" {
			return fmt.Errorf("status badge %q", s)
		}
		if n := num("#stream-messages"); n != 0 {
			return fmt.Errorf("stream-messages %d, want 0", n)
		}
		return nil
	})

	for i := range 25 {
		if _, err := js.Publish(context.Background(), "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	js.Publish(context.Background(), "orders.created", []byte(`not json`))

	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if n := num("#stream-messages"); n != 26 {
			return fmt.Errorf("stream-messages %d, want 26", n)
		}
		if n := num("#processed"); n != 25 {
			return fmt.Errorf("processed %d, want 25", n)
		}
		if n := num("#dlq-depth"); n != 1 {
			return fmt.Errorf("dlq-depth %d, want 1", n)
		}
		if s := text("#dlq-rows"); !strings.Contains(s, "orders.created") {
			return fmt.Errorf("latest dead letters %q", s)
		}
		// Group commit (the default): the 26 acks came after syncs.
		if n := num("#ingest-acked"); n != 26 {
			return fmt.Errorf("group commit acked %d, want 26", n)
		}
		if s := text("#ingest-sync"); s != "(syncfs)" && s != "(fsync of every file)" {
			return fmt.Errorf("group commit sync %q", s)
		}
		if s := text("#sync-p99"); s == "–" || s == "" {
			return fmt.Errorf("sync p99 %q", s)
		}
		return nil
	})
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__noReload || "reloaded"`))
	if err != nil {
		t.Fatal(err)
	}
	if marker != "still here" {
		t.Fatalf("the page reloaded (marker %q): it must update in place", marker)
	}
	if d := text("#durability"); !strings.Contains(d, "durability: group-commit") || !strings.Contains(d, "survives power loss") {
		t.Errorf("durability line %q", d)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ORDERSTORE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
