package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/status"
)

// The dashboard in a real headless browser (Debian's chromium): the numbers
// on the page change as events are published, without a reload.
func TestDashboardInBrowser(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	a := startInProcess(t, "[processor.stale_after]\ncreated = \"1ms\"\n")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ctx, cancel := context.WithTimeout(startBrowser(t, browser), 90*time.Second)
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
		if s := text("#ingest-sync"); s != "(fdatasync in nats-server's file store)" {
			return fmt.Errorf("group commit sync %q", s)
		}
		if s := text("#sync-p99"); s == "–" || s == "" {
			return fmt.Errorf("sync p99 %q", s)
		}
		// How far the projection is: the ack floor, past the dead
		// letter too (the processor's own count says 25, and 0 after a
		// restart).
		if n := num("#last-applied"); n != 26 {
			return fmt.Errorf("processed through %d, want 26", n)
		}
		return nil
	})
	// Orders by status: 25 created, every one stale (created has a
	// stale_after of 1ms); the stale count lists them, a page at a time,
	// each a link to its timeline.
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#orders-rows tr")].map((tr) => [...tr.cells].map((c) => c.textContent).join("|")).join("\n")`))
		if err != nil || s != "created|25|25" || text("#orders-total") != "(25 orders)" {
			return fmt.Errorf("orders table %q (%v), want created|25|25", s, err)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#orders-rows button.stale"))); err != nil {
		t.Fatal(err)
	}
	rows := func() (int, error) {
		return chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#orders-list-rows a.stale").length`))
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if n, err := rows(); err != nil || n != 20 {
			return fmt.Errorf("%d stale orders listed (%v), want a page of 20", n, err)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#orders-list-more"))); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if n, err := rows(); err != nil || n != 25 {
			return fmt.Errorf("%d stale orders listed after load more (%v), want 25", n, err)
		}
		return nil
	})
	if s := text("#orders-list-title"); s != "Stale orders in created, oldest first" {
		t.Errorf("list title %q", s)
	}
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#orders-list-rows a").getAttribute("href")`))
	if err != nil || first != "#order=o-0" {
		t.Errorf("the oldest order's link %q (%v), want #order=o-0", first, err)
	}
	screenshot(t, ctx, "dashboard-orders.png")

	// No token: nothing to sign out of. A build from source says dev,
	// never "vdev".
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("logout").hidden`)); err != nil || !hidden {
		t.Errorf("sign-out hidden = %v (%v) without a token, want hidden", hidden, err)
	}
	if v := text("#version"); !strings.HasPrefix(v, "dev") || strings.Contains(v, "vdev") {
		t.Errorf("version %q, want dev (a test build)", v)
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__noReload || "reloaded"`))
	if err != nil {
		t.Fatal(err)
	}
	if marker != "still here" {
		t.Fatalf("the page reloaded (marker %q): it must update in place", marker)
	}
	if d := text("#durability"); !strings.Contains(d, "durability: group-commit") || !strings.Contains(d, "survives power loss") ||
		!strings.Contains(d, "not encrypted at rest") {
		t.Errorf("durability line %q", d)
	}
	// No [validation]: /v1/status has no "validation", and no card shows.
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("validation").hidden`)); err != nil || !hidden {
		t.Errorf("validation card hidden = %v (%v) without validation, want hidden", hidden, err)
	}

	screenshot(t, ctx, "dashboard.png")
}

// startBrowser starts headless chromium at path and returns its context,
// closed when the test ends.
func startBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	// Chromium occasionally dies while it starts on a loaded machine (seen
	// twice under go test -race ./..., with nothing but crashpad noise on
	// its stderr): starting the browser is retried, the page never is.
	for attempt := 1; ; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		c, cancelCtx := chromedp.NewContext(actx)
		err := chromedp.Do(c) // starts the browser
		if err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancelCtx)
			return c
		}
		cancelCtx()
		cancelAlloc()
		if attempt == 3 {
			t.Fatalf("chromium did not start in 3 attempts: %v", err)
		}
		t.Logf("chromium did not start (attempt %d), retrying: %v", attempt, err)
	}
}

// screenshot saves the page as name in $ORDERSTORE_ARTIFACTS (CI keeps
// it), else in a temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ORDERSTORE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// timelinePage is what the order page shows, read from the DOM.
type timelinePage struct {
	Loaded string `json:"loaded"` // the order whose page finished loading
	Title  string `json:"title"`
	Error  string `json:"error"`
	Count  string `json:"count"`
	More   bool   `json:"more"` // the "load more" button is shown
	Events []struct {
		Seq      uint64 `json:"seq"` // data-seq
		SeqText  string `json:"seq_text"`
		Type     string `json:"type"`
		Time     string `json:"time"`
		Payload  string `json:"payload"`
		Headers  string `json:"headers"`
		Status   string `json:"status"`   // of the state after the event
		NEvents  string `json:"n_events"` // of the state after the event
		State    string `json:"state"`    // the state's JSON
		Retained bool   `json:"retained"` // not shown as "no longer retained"
	} `json:"events"`
	DLQ []struct {
		Seq    uint64 `json:"seq"`
		Text   string `json:"text"`
		Replay bool   `json:"replay"` // has a Replay button
	} `json:"dlq"`
	DLQMsg string `json:"dlq_msg"`
	// What injected markup would leave behind: the page itself has no
	// image, one script (app.js) and no inline event handler.
	Images   int      `json:"images"`
	Scripts  []string `json:"scripts"`
	Handlers int      `json:"handlers"`
}

const readTimeline = `JSON.stringify((() => {
  const q = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent : ""; };
  return {
    loaded: document.getElementById("order").dataset.loaded || "",
    title: q(document, "#order-title"),
    error: document.getElementById("order-error").hidden ? "" : q(document, "#order-error"),
    count: q(document, "#timeline-count"),
    more: !document.getElementById("timeline-more").hidden,
    events: [...document.querySelectorAll("#timeline > li")].map((li) => ({
      seq: Number(li.dataset.seq), seq_text: q(li, ".ev-seq"), type: q(li, ".ev-type"), time: q(li, ".ev-time"),
      payload: q(li, ".ev-payload > pre"), headers: q(li, ".ev-headers pre"),
      status: q(li, ".ev-state-status"), n_events: q(li, ".ev-state-events"), state: q(li, ".ev-state-json"),
      retained: !li.classList.contains("gone"),
    })),
    dlq: [...document.querySelectorAll("#order-dlq-rows tr[data-seq]")].map((tr) => ({
      seq: Number(tr.dataset.seq), text: tr.textContent, replay: !!tr.querySelector("button.replay"),
    })),
    dlq_msg: document.getElementById("order-dlq-msg").hidden ? "" : q(document, "#order-dlq-msg"),
    images: document.querySelectorAll("img").length,
    scripts: [...document.querySelectorAll("script")].map((s) => s.getAttribute("src") || "inline"),
    handlers: document.querySelectorAll("[onerror], [onload], [onclick], [onmouseover]").length,
  };
})())`

// An order's page in a real headless browser, signed in with the admin
// token: opened by a deep link, its timeline lists exactly the events the
// API returns (seq, type, time, payload) with the state after each, in
// pages; its dead letter has a Replay button that replays it through the
// session; markup in payloads, headers and typed ids stays text.
func TestDashboardOrderTimeline(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	const token = "timeline-token-0123456789"
	a := startInProcess(t, "[admin]\ntoken = \""+token+"\"\n")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	const (
		id        = "A/b=c_d-e.f" // valid, with the characters a URL treats apart
		xssImg    = `<img src=x onerror=alert(1)>`
		xssScript = `</script><script>alert(1)</script>`
		fillers   = 50 // with the 3 other events, more than the page's 50
	)
	publish := func(subject string, v map[string]any, h nats.Header) {
		t.Helper()
		data, _ := json.Marshal(v)
		if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Data: data, Header: h}); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	publish("orders.created", map[string]any{"order_id": id, "customer": xssImg}, nats.Header{"X-Note": {xssScript}})
	publish("orders.created", map[string]any{"order_id": "other-1"}, nil)
	publish("orders.paid", map[string]any{"order_id": id, "status": "paid", "note": xssScript}, nil)
	for i := range fillers {
		publish("orders.noted", map[string]any{"order_id": id, "n": i}, nil)
	}
	// Poison: a status longer than 256 bytes, dead-lettered at once.
	publish("orders.updated", map[string]any{"order_id": id, "status": strings.Repeat("x", 300), "comment": xssImg}, nil)
	publish("orders.shipped", map[string]any{"order_id": id, "status": "shipped", "carrier": xssImg + xssScript}, nil)
	const want = 3 + fillers

	api := func(path string, v any) error {
		r := get(t, "GET", a.adminURL+path, token)
		if r.code != http.StatusOK {
			return fmt.Errorf("GET %s = %d: %s", path, r.code, r.body)
		}
		return json.Unmarshal(r.body, v)
	}
	orderPath := "/v1/orders/" + url.PathEscape(id)
	type deadLetters struct {
		Items []struct {
			Seq uint64 `json:"seq"`
		} `json:"items"`
	}
	var dlq deadLetters
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		var o struct {
			Events int `json:"events"`
		}
		if err := api(orderPath, &o); err != nil {
			return err
		}
		if o.Events != want {
			return fmt.Errorf("order has %d events, want %d", o.Events, want)
		}
		if err := api(orderPath+"/dlq", &dlq); err != nil {
			return err
		}
		if len(dlq.Items) != 1 {
			return fmt.Errorf("order has %d dead letters, want 1", len(dlq.Items))
		}
		return nil
	})
	type apiEvent struct {
		Seq      uint64          `json:"seq"`
		Retained bool            `json:"retained"`
		Type     string          `json:"type"`
		Time     time.Time       `json:"time"`
		Data     json.RawMessage `json:"data"`
		State    struct {
			Status string `json:"status"`
			Events int    `json:"events"`
		} `json:"state"`
	}
	var events struct {
		Total  int        `json:"total"`
		Events []apiEvent `json:"events"`
	}
	if err := api(orderPath+"/events?states=true&limit=1000", &events); err != nil {
		t.Fatal(err)
	}
	if events.Total != want || len(events.Events) != want {
		t.Fatalf("API: %d of %d events, want %d", len(events.Events), events.Total, want)
	}

	ctx, cancel := context.WithTimeout(startBrowser(t, browser), 120*time.Second)
	defer cancel()
	read := func() timelinePage {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](readTimeline))
		if err != nil {
			t.Fatalf("read the page: %v", err)
		}
		var p timelinePage
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatalf("read the page: %v\n%s", err, s)
		}
		return p
	}
	// noInjection checks that no markup of the data became elements.
	noInjection := func(p timelinePage) {
		t.Helper()
		if p.Images != 0 || p.Handlers != 0 || len(p.Scripts) != 1 || p.Scripts[0] != "/ui/app.js" {
			t.Errorf("markup from the data became elements: %d <img>, %d elements with event handlers, scripts %q",
				p.Images, p.Handlers, p.Scripts)
		}
	}
	// checkEvents compares the timeline with the API's events, in order.
	checkEvents := func(p timelinePage, apiEvents []apiEvent) {
		t.Helper()
		if len(p.Events) != len(apiEvents) {
			t.Fatalf("timeline lists %d events, want %d", len(p.Events), len(apiEvents))
		}
		for i, e := range apiEvents {
			got := p.Events[i]
			if got.Seq != e.Seq || got.SeqText != fmt.Sprintf("seq %d", e.Seq) || got.Type != e.Type || !got.Retained {
				t.Errorf("timeline entry %d: seq %d (%q), type %q, retained %v; want seq %d, type %q, retained",
					i, got.Seq, got.SeqText, got.Type, got.Retained, e.Seq, e.Type)
			}
			if wantTime := e.Time.UTC().Format("2006-01-02 15:04:05.000 UTC"); got.Time != wantTime {
				t.Errorf("timeline entry %d: time %q, want %q", i, got.Time, wantTime)
			}
			var gotData, wantData any
			if err := json.Unmarshal([]byte(got.Payload), &gotData); err != nil {
				t.Errorf("timeline entry %d: payload %q is not the event's JSON: %v", i, got.Payload, err)
			}
			json.Unmarshal(e.Data, &wantData)
			if !reflect.DeepEqual(gotData, wantData) {
				t.Errorf("timeline entry %d: payload %s, want %s", i, got.Payload, e.Data)
			}
			if got.Status != e.State.Status || !strings.HasPrefix(got.NEvents, strconv.Itoa(e.State.Events)+" event") {
				t.Errorf("timeline entry %d: state after %q, %q; want status %q, %d events", i, got.Status, got.NEvents, e.State.Status, e.State.Events)
			}
			var state struct {
				OrderID string `json:"order_id"`
				LastSeq uint64 `json:"last_seq"`
			}
			if err := json.Unmarshal([]byte(got.State), &state); err != nil || state.OrderID != id || state.LastSeq != e.Seq {
				t.Errorf("timeline entry %d: state JSON %q (%v), want order %q at last_seq %d", i, got.State, err, id, e.Seq)
			}
		}
	}
	waitLoaded := func(what string, cond func(p timelinePage) error) timelinePage {
		t.Helper()
		var p timelinePage
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			p = read()
			if p.Loaded != id {
				return fmt.Errorf("%s: order page not loaded (loaded %q, error %q)", what, p.Loaded, p.Error)
			}
			return cond(p)
		})
		return p
	}

	// Sign in through the login page's form, in the browser (under the
	// old Referrer-Policy no-referrer the browser posted it with
	// "Origin: null", and it was refused 403), then open the order.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(a.adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#order-search`)),
	); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("sign in through the login form: %v; the page says: %s", err, body)
	}
	if login, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('input[name="token"]')`)); err != nil || login {
		t.Fatalf("still on the login page after signing in (%v)", err)
	}
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("logout").hidden`)); err != nil || hidden {
		t.Errorf("sign-out hidden = %v (%v) with a token, want shown", hidden, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(a.adminURL+"/#order="+url.QueryEscape(id))); err != nil {
		t.Fatal(err)
	}

	// The first page: 50 events, and a button for the rest.
	p := waitLoaded("deep link", func(p timelinePage) error {
		if len(p.Events) != 50 {
			return fmt.Errorf("timeline lists %d events, want the first page of 50", len(p.Events))
		}
		return nil
	})
	if p.Title != id || p.Error != "" {
		t.Errorf("order page title %q, error %q; want %q and no error", p.Title, p.Error, id)
	}
	if !p.More || !strings.Contains(p.Count, fmt.Sprintf("50 of %d events", want)) {
		t.Errorf("first page: load more shown %v, count %q; want shown, \"50 of %d events\"", p.More, p.Count, want)
	}
	checkEvents(p, events.Events[:50])
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#timeline-more"))); err != nil {
		t.Fatal(err)
	}
	p = waitLoaded("load more", func(p timelinePage) error {
		if len(p.Events) != want {
			return fmt.Errorf("timeline lists %d events after load more, want %d", len(p.Events), want)
		}
		return nil
	})
	checkEvents(p, events.Events)
	if p.More || !strings.Contains(p.Count, fmt.Sprintf("%d of %d events", want, want)) {
		t.Errorf("all loaded: load more shown %v, count %q", p.More, p.Count)
	}
	// The markup is shown as text: in payloads and in headers.
	if first := p.Events[0]; !strings.Contains(first.Payload, xssImg) || !strings.Contains(first.Headers, "\nX-Note: "+xssScript) {
		t.Errorf("first event: payload %q, headers %q; want the markup as text", first.Payload, first.Headers)
	}
	if last := p.Events[len(p.Events)-1]; !strings.Contains(last.Payload, xssImg+xssScript) || last.Status != "shipped" {
		t.Errorf("last event: payload %q, status %q; want the markup as text, shipped", last.Payload, last.Status)
	}
	noInjection(p)

	// The state as of an event: the one after the timeline's second.
	second := events.Events[1]
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#asof-input"), strconv.FormatUint(second.Seq, 10)),
		chromedp.Click(chromedp.CSS(`#order-asof button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("asof-note").textContent + "\n" + document.getElementById("asof-state").textContent`))
		if err != nil {
			return err
		}
		note, state, _ := strings.Cut(s, "\n")
		var o struct {
			Status string `json:"status"`
			Events int    `json:"events"`
		}
		json.Unmarshal([]byte(state), &o)
		if wantNote := fmt.Sprintf("after 2 events, up to seq %d", second.Seq); note != wantNote || o.Status != second.State.Status || o.Events != 2 {
			return fmt.Errorf("as of seq %d: %q, state %q; want %q and status %q", second.Seq, note, state, wantNote, second.State.Status)
		}
		return nil
	})

	// The dead letter, with its payload as text and a Replay button.
	if len(p.DLQ) != 1 || p.DLQ[0].Seq != dlq.Items[0].Seq || !p.DLQ[0].Replay ||
		!strings.Contains(p.DLQ[0].Text, xssImg) || !strings.Contains(p.DLQ[0].Text, "poison") {
		t.Fatalf("order's dead letters on the page %+v, want seq %d with a Replay button and its payload as text", p.DLQ, dlq.Items[0].Seq)
	}
	screenshot(t, ctx, "dashboard-order.png")

	// From here on, a CSP violation would mean injected markup tried to run.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI)); true`)); err != nil {
		t.Fatal(err)
	}

	// Replay through the session (POST with the JSON Content-Type, from
	// the page's origin): the poison comes back as a new dead letter.
	old := dlq.Items[0].Seq
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#order-dlq-rows button.replay"))); err != nil {
		t.Fatal(err)
	}
	p = waitLoaded("replay", func(p timelinePage) error {
		if !strings.Contains(p.DLQMsg, fmt.Sprintf("dead letter %d replayed as event seq", old)) {
			return fmt.Errorf("replay message %q", p.DLQMsg)
		}
		if err := api(orderPath+"/dlq", &dlq); err != nil {
			return err
		}
		if len(dlq.Items) != 1 || dlq.Items[0].Seq == old {
			return fmt.Errorf("API: dead letters %+v, want one new one (the replayed poison again)", dlq.Items)
		}
		if len(p.DLQ) != 1 || p.DLQ[0].Seq != dlq.Items[0].Seq || !p.DLQ[0].Replay {
			return fmt.Errorf("page: dead letters %+v, want seq %d with a Replay button", p.DLQ, dlq.Items[0].Seq)
		}
		return nil
	})
	// The poison was not applied: the timeline is still the API's.
	if err := api(orderPath+"/events?states=true&limit=1000", &events); err != nil {
		t.Fatal(err)
	}
	checkEvents(p, events.Events)

	// Typed into the search box: markup is no order id, and says so as
	// text; an unknown id is not found; the order opens again.
	search := func(typed string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS("#order-id"), typed),
			chromedp.Click(chromedp.CSS(`#order-search button[type="submit"]`)),
		); err != nil {
			t.Fatal(err)
		}
	}
	search(xssImg)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if p = read(); !strings.Contains(p.Error, "not an order id: "+strconv.Quote(xssImg)) || p.Title != xssImg {
			return fmt.Errorf("searched %q: title %q, error %q", xssImg, p.Title, p.Error)
		}
		return nil
	})
	noInjection(p)
	search("no-such-order")
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if p = read(); p.Error != `order "no-such-order" not found` {
			return fmt.Errorf("searched an unknown order: error %q", p.Error)
		}
		return nil
	})
	search(id)
	p = waitLoaded("search", func(p timelinePage) error {
		if len(p.Events) != 50 || len(p.DLQ) != 1 {
			return fmt.Errorf("timeline lists %d events and %d dead letters, want 50 and 1", len(p.Events), len(p.DLQ))
		}
		return nil
	})
	checkEvents(p, events.Events[:50])
	noInjection(p)
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__csp`))
	if err != nil {
		t.Fatal(err)
	}
	if len(violations) != 0 {
		t.Errorf("the page broke its Content-Security-Policy (injected markup tried to run): %q", violations)
	}
}

// validationSchema is the schema of "created" events in the validation
// tests: an order id and a non-negative amount.
const validationSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "amount"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1},
    "amount": {"type": "number", "minimum": 0}
  }
}`

// validationCard is what the dashboard's validation card shows, read from
// the DOM.
type validationCard struct {
	Hidden   bool       `json:"hidden"`
	Summary  string     `json:"summary"`
	Unknown  string     `json:"unknown"`
	Func     string     `json:"func"`
	Total    string     `json:"total"`
	Rate     string     `json:"rate"`
	Charted  bool       `json:"charted"` // the chart has a point above 0
	Schemas  [][]string `json:"schemas"` // rows of cells
	Rejected [][]string `json:"rejected"`
	More     string     `json:"more"`
	// What injected markup would leave behind (the page has no image,
	// no svg, one script and no inline event handler) or run.
	Images   int      `json:"images"`
	SVGs     int      `json:"svgs"`
	Scripts  []string `json:"scripts"`
	Handlers int      `json:"handlers"`
	Alerts   int      `json:"alerts"`
	CSP      []string `json:"csp"`
}

const readValidationCard = `JSON.stringify((() => {
  const q = (sel) => document.querySelector(sel).textContent;
  const rows = (sel) => [...document.querySelectorAll(sel + " tr")].map((tr) => [...tr.children].map((td) => td.textContent));
  return {
    hidden: document.getElementById("validation").hidden || document.getElementById("validation").offsetParent === null,
    summary: q("#val-summary"), unknown: q("#val-unknown"), func: q("#val-func"), total: q("#val-total"), rate: q("#val-rate"),
    charted: valHistory.some((p) => p.lag > 0),
    schemas: rows("#val-schemas"), rejected: rows("#val-rows"),
    more: document.getElementById("val-more").hidden ? "" : q("#val-more"),
    images: document.querySelectorAll("img").length,
    svgs: document.querySelectorAll("svg").length,
    scripts: [...document.querySelectorAll("script")].map((s) => s.getAttribute("src") || "inline"),
    handlers: document.querySelectorAll("[onerror], [onload], [onclick], [onmouseover]").length,
    alerts: window.__alerts || 0,
    csp: window.__csp || [],
  };
})())`

// The validation card in a real headless browser: shown when /v1/status
// has "validation", with the schema of each type, the unknown-types
// policy, the total refused and the refusals per type and reason, all as
// /v1/status has them, updated in place as producers are refused. Event
// types and schema files carrying markup stay text. `orderstore status`
// prints the same counts on its validation line, and /metrics has them.
func TestDashboardValidation(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	const (
		// A type with a schema of its own: its name is a metric label and a
		// row of the card. Config refuses '>' and spaces in a type.
		hostileType = `x<svg/onload=alert(1)//`
		// A type without a schema, refused (unknown_types = "reject") and
		// counted as "other": its name reaches no page.
		unknownType = `x<b>y</b>`
	)
	dir := t.TempDir()
	schemaFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	created := schemaFile("created.json", validationSchema)
	// A schema the fast check does not take (allOf): the library alone checks its events.
	hostile := schemaFile(`<img src=x onerror=alert(1)>.json`, `{"type": "object", "required": ["order_id"], "allOf": [{"type": "object"}]}`)
	a := startInProcess(t, fmt.Sprintf("[validation]\nschemas = { created = %q, %q = %q }\nunknown_types = \"reject\"\n",
		created, hostileType, hostile))
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ctx, cancel := context.WithTimeout(startBrowser(t, browser), 90*time.Second)
	defer cancel()
	read := func() validationCard {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](readValidationCard))
		if err != nil {
			t.Fatalf("read the card: %v", err)
		}
		var c validationCard
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatalf("read the card: %v\n%s", err, s)
		}
		return c
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(a.adminURL+"/"), chromedp.WaitVisible(chromedp.CSS("#validation"))); err != nil {
		t.Fatal(err)
	}
	// From here on, markup that tried to run would break the page's
	// Content-Security-Policy or call alert.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__csp = []; window.__alerts = 0;
window.alert = () => { window.__alerts++; };
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI)); true`)); err != nil {
		t.Fatal(err)
	}
	wantSchemas := [][]string{{"created", created, "fast"}, {hostileType, hostile, "library alone: /allOf"}}
	embeddedtest.WaitFor(t, 15*time.Second, func() error {
		c := read()
		if c.Hidden || c.Total != "0" || c.Summary != "(2 schemas)" || c.Unknown != "reject" || c.Func != "none" ||
			!reflect.DeepEqual(c.Schemas, wantSchemas) || !reflect.DeepEqual(c.Rejected, [][]string{{"none"}}) {
			return fmt.Errorf("before any refusal the card shows %+v", c)
		}
		return nil
	})

	// Refused over NATS: 422, err_code 10422, nothing stored.
	publish := func(subject, data string, valid bool) {
		t.Helper()
		_, err := js.Publish(context.Background(), subject, []byte(data))
		var api *jetstream.APIError
		switch {
		case valid && err != nil:
			t.Fatalf("publish %s %s: %v", subject, data, err)
		case !valid && (!errors.As(err, &api) || api.Code != 422 || api.ErrorCode != orderstore.ValidationErrCode):
			t.Fatalf("publish %s %s: %v; want 422, err_code %d", subject, data, err, orderstore.ValidationErrCode)
		}
	}
	publish("orders.created", `{"order_id":"v-1","amount":1}`, true)
	publish("orders."+hostileType, `{"order_id":"h-1"}`, true)
	for i := range 3 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"m-%d","amount":-1}`, i), false) // created/minimum
	}
	for i := range 2 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"r-%d"}`, i), false) // created/required
	}
	publish("orders.created", `not json`, false)                        // created/invalid_json
	publish("orders."+hostileType, `{"note":"`+unknownType+`"}`, false) // hostile/required
	publish("orders."+unknownType, `{"order_id":"u-1"}`, false)         // other/unknown_type
	publish("orders."+unknownType, `{"order_id":"u-2"}`, false)
	publish("orders.paid", `{"order_id":"v-1"}`, false)
	const refused = 10

	// /v1/status has them, per type and reason.
	var st struct {
		Stream struct {
			Messages uint64 `json:"messages"`
		} `json:"stream"`
		Validation struct {
			Schemas       map[string]string `json:"schemas"`
			UnknownTypes  string            `json:"unknown_types"`
			Slow          map[string]string `json:"slow"`
			RejectedTotal uint64            `json:"rejected_total"`
			Rejected      []struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
				Events uint64 `json:"events"`
			} `json:"rejected"`
		} `json:"validation"`
	}
	if err := json.Unmarshal(get(t, "GET", a.adminURL+"/v1/status", "").body, &st); err != nil {
		t.Fatal(err)
	}
	wantCounts := map[[2]string]uint64{{"created", "minimum"}: 3, {"other", "unknown_type"}: 3, {"created", "required"}: 2,
		{"created", "invalid_json"}: 1, {hostileType, "required"}: 1}
	gotCounts := map[[2]string]uint64{}
	for _, r := range st.Validation.Rejected {
		gotCounts[[2]string{r.Type, r.Reason}] = r.Events
	}
	if v := st.Validation; v.RejectedTotal != refused || !reflect.DeepEqual(gotCounts, wantCounts) || v.UnknownTypes != "reject" ||
		!reflect.DeepEqual(v.Schemas, map[string]string{"created": created, hostileType: hostile}) || st.Stream.Messages != 2 ||
		!reflect.DeepEqual(v.Slow, map[string]string{hostileType: "/allOf"}) {
		t.Fatalf("/v1/status: %d events stored, validation %+v; want 2 stored and %d refused: %v", st.Stream.Messages, v, refused, wantCounts)
	}

	// The card shows the same, most refused first, without a reload.
	wantRows := [][]string{{"created", "minimum", "3"}, {"other", "unknown_type", "3"}, {"created", "required", "2"},
		{"created", "invalid_json", "1"}, {hostileType, "required", "1"}}
	var c validationCard
	embeddedtest.WaitFor(t, 15*time.Second, func() error {
		c = read()
		if c.Hidden || c.Total != strconv.Itoa(refused) || !reflect.DeepEqual(c.Rejected, wantRows) || c.More != "" {
			return fmt.Errorf("card: total %q, rows %q, more %q; want %d and %q", c.Total, c.Rejected, c.More, refused, wantRows)
		}
		if !c.Charted {
			return fmt.Errorf("the refusal chart has no point above 0")
		}
		return nil
	})
	if !reflect.DeepEqual(c.Schemas, wantSchemas) || c.Unknown != "reject" {
		t.Errorf("card: schemas %q, unknown types %q; want %q and reject", c.Schemas, c.Unknown, wantSchemas)
	}
	if _, err := strconv.ParseFloat(c.Rate, 64); err != nil {
		t.Errorf("card: refusal rate %q is not a number", c.Rate)
	}
	if c.Images != 0 || c.SVGs != 0 || c.Handlers != 0 || len(c.Scripts) != 1 || c.Scripts[0] != "/ui/app.js" || c.Alerts != 0 || len(c.CSP) != 0 {
		t.Errorf("markup from type names or schema files became elements or ran: %d <img>, %d <svg>, %d handlers, scripts %q, %d alerts, CSP violations %q",
			c.Images, c.SVGs, c.Handlers, c.Scripts, c.Alerts, c.CSP)
	}
	screenshot(t, ctx, "dashboard-validation.png")

	// orderstore status: one line, the largest counts first.
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"status", "-admin", a.adminURL}, &out, &errb); code != 0 {
		t.Fatalf("orderstore status = %d: %s%s", code, out.String(), errb.String())
	}
	wantLine := "2 schemas (created, " + hostileType + "), 1 checked by the library alone (" + hostileType +
		"), unknown types rejected; 10 events refused: created/minimum 3, other/unknown_type 3, created/required 2, created/invalid_json 1, " + hostileType + "/required 1"
	if line := statusLine(out.String(), "validation"); line != wantLine {
		t.Errorf("orderstore status: validation line %q, want %q\n%s", line, wantLine, out.String())
	}
	// /metrics: the same counts.
	metrics := string(get(t, "GET", a.adminURL+"/metrics", "").body)
	for _, m := range []string{`orderstore_validation_rejected_total{reason="minimum",type="created"} 3`,
		`orderstore_validation_rejected_total{reason="unknown_type",type="other"} 3`} {
		if !strings.Contains(metrics, "\n"+m+"\n") {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// statusLine is the text after the label of the line of orderstore
// status's output that starts with label ("" when there is none).
func statusLine(out, label string) string {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, label+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// orderstore status's validation line: absent without validation; the
// schemas and the refusals bounded to the first few, largest first.
func TestStatusValidationLine(t *testing.T) {
	line := func(v *status.ValidationStats) string {
		var b strings.Builder
		printStatus(&b, status.Status{Validation: v})
		return statusLine(b.String(), "validation")
	}
	vc := func(typ, reason string, n uint64) status.ValidationCount {
		return status.ValidationCount{Type: typ, Reason: reason, Events: n}
	}
	if l := line(nil); l != "" {
		t.Errorf("without validation: %q, want no line", l)
	}
	for _, c := range []struct {
		v    status.ValidationStats
		want string
	}{
		{status.ValidationStats{Schemas: map[string]string{"created": "/s/c.json"}, UnknownTypes: "accept"},
			"1 schema (created), unknown types accepted; nothing refused"},
		{status.ValidationStats{Schemas: map[string]string{"b": "/s/b.json", "a": "/s/a.json", "c": "/s/c.json"},
			Slow: map[string]string{"c": "/allOf", "a": "/oneOf"}, UnknownTypes: "accept"},
			"3 schemas (a, b, c), 2 checked by the library alone (a, c), unknown types accepted; nothing refused"},
		{status.ValidationStats{UnknownTypes: "reject", Func: true, RejectedTotal: 4,
			Rejected: []status.ValidationCount{vc("other", "func", 1), vc("other", "unknown_type", 3)}},
			"no schemas, unknown types rejected, plus the program's own check; 4 events refused: other/unknown_type 3, other/func 1"},
		{status.ValidationStats{
			Schemas: map[string]string{"g": "g", "f": "f", "e": "e", "d": "d", "c": "c", "b": "b", "a": "a"}, UnknownTypes: "accept", RejectedTotal: 31,
			Rejected: []status.ValidationCount{vc("a", "minimum", 1), vc("a", "required", 9), vc("b", "type", 2), vc("c", "type", 9),
				vc("d", "enum", 3), vc("e", "invalid_json", 4), vc("other", "other", 3)}},
			"7 schemas (a, b, c, d, e, 2 more), unknown types accepted; 31 events refused: a/required 9, c/type 9, e/invalid_json 4, d/enum 3, other/other 3, and 3 more in 2 other type/reason pairs"},
	} {
		if got := line(&c.v); got != c.want {
			t.Errorf("validation line\n got %q\nwant %q", got, c.want)
		}
	}
}
