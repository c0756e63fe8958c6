package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/status"
)

// rebuildCard is what the dashboard's projection rebuild card shows, read
// from the DOM.
type rebuildCard struct {
	State     string `json:"state"` // data-state: the rebuild's state, "" when none ran
	ID        string `json:"id"`    // data-id
	Badge     string `json:"badge"`
	None      bool   `json:"none"` // "no rebuild has run" is shown
	Reason    string `json:"reason"`
	FromSeq   string `json:"from_seq"`
	Label     string `json:"label"` // the progress's: folded, copied
	Progress  string `json:"progress"`
	Bar       string `json:"bar"` // the progress bar's width
	Rate      string `json:"rate"`
	ETA       string `json:"eta"`
	Skipped   string `json:"skipped"`
	Ended     string `json:"ended"`
	Summary   bool   `json:"summary"` // the summary is shown
	Rebuilt   string `json:"rebuilt"`
	Partial   string `json:"partial"`
	Conflicts string `json:"conflicts"`
	Untouched string `json:"untouched"`
	Error     string `json:"error"`   // the rebuild's error, "" when hidden
	Msg       string `json:"msg"`     // the answer to the card's last request, "" when hidden
	MsgOK     bool   `json:"msg_ok"`  // ... shown as a success
	Form      bool   `json:"form"`    // the rebuild form is shown
	Confirm   string `json:"confirm"` // the confirm step's question, "" when hidden
	Cancel    bool   `json:"cancel"`  // the Cancel button is shown
	// What injected markup would leave behind or run.
	Images   int      `json:"images"`
	Handlers int      `json:"handlers"`
	Alerts   int      `json:"alerts"`
	CSP      []string `json:"csp"`
}

const readRebuildCard = `JSON.stringify((() => {
  const q = (id) => document.getElementById(id).textContent;
  const shown = (id) => !document.getElementById(id).hidden;
  const card = document.getElementById("rebuild");
  return {
    state: card.dataset.state || "", id: card.dataset.id || "", badge: shown("rb-state") ? q("rb-state") : "",
    none: shown("rb-none") && !shown("rb-body"),
    reason: q("rb-reason"), from_seq: q("rb-from-seq"), label: q("rb-progress-label"), progress: q("rb-progress"),
    rate: q("rb-rate"), eta: q("rb-eta"),
    bar: document.getElementById("rb-bar").style.width, skipped: q("rb-skipped"), ended: q("rb-ended"),
    summary: shown("rb-summary"), rebuilt: q("rb-rebuilt"), partial: q("rb-partial"), conflicts: q("rb-conflicts"),
    untouched: q("rb-untouched"), error: shown("rb-error") ? q("rb-error") : "",
    msg: shown("rb-msg") ? q("rb-msg") : "", msg_ok: document.getElementById("rb-msg").classList.contains("ok"),
    form: shown("rb-form") && card.offsetParent !== null, confirm: shown("rb-confirm") ? q("rb-confirm-text") : "",
    cancel: shown("rb-cancel"),
    images: document.querySelectorAll("img").length,
    handlers: document.querySelectorAll("[onerror], [onload], [onclick], [onmouseover]").length,
    alerts: window.__alerts || 0, csp: window.__csp || [],
  };
})())`

// dashboardSignIn signs in through the login page's form, in the browser,
// and waits for the dashboard.
func dashboardSignIn(t *testing.T, ctx context.Context, adminURL, token string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(adminURL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#rebuild`)),
	); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("sign in through the login form: %v; the page says: %s", err, body)
	}
	// From here on, markup that tried to run would break the page's
	// Content-Security-Policy or call alert.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__csp = []; window.__alerts = 0;
window.alert = () => { window.__alerts++; };
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI)); true`)); err != nil {
		t.Fatal(err)
	}
}

// rebuildCardReader reads the card of the page in ctx.
func rebuildCardReader(t *testing.T, ctx context.Context) func() rebuildCard {
	return func() rebuildCard {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](readRebuildCard))
		if err != nil {
			t.Fatalf("read the rebuild card: %v", err)
		}
		var c rebuildCard
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatalf("read the rebuild card: %v\n%s", err, s)
		}
		return c
	}
}

// noMarkupRan fails when data became elements or ran on the page.
func (c rebuildCard) noMarkupRan(t *testing.T) {
	t.Helper()
	if c.Images != 0 || c.Handlers != 0 || c.Alerts != 0 || len(c.CSP) != 0 {
		t.Errorf("markup from the server's answers became elements or ran: %d <img>, %d handlers, %d alerts, CSP violations %q",
			c.Images, c.Handlers, c.Alerts, c.CSP)
	}
}

// The projection rebuild card in a real headless browser, signed in
// through the login form: before any rebuild it says none ran; "Rebuild
// projection" asks first (Back sends nothing), then starts one through the
// session, and the card follows it to "done" with what /v1/projection/
// rebuild reports (rebuilt orders, the poison event skipped); a second one
// from a stream seq with "replace partial orders" sends both; a refusal
// (400 echoing the typed markup, 409 to a cancel when none runs) is shown
// in the card as the server's text.
func TestDashboardRebuild(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	const token = "rebuild-token-0123456789"
	// max_file_store: room for the shadow bucket's reservation beside
	// the stream's (the harness's 2GiB has none: 507).
	a := startInProcess(t, "[jetstream]\nmax_file_store = \"4GiB\"\n[admin]\ntoken = \""+token+"\"\n")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	publish := func(subject, data string) uint64 {
		t.Helper()
		ack, err := js.Publish(context.Background(), subject, []byte(data))
		if err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		return ack.Sequence
	}
	// o-0 … o-9 created, a poison event, o-0 … o-4 paid (from seq
	// paidSeq on), o-10 … o-14 created.
	for i := range 10 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"o-%d"}`, i))
	}
	publish("orders.created", `not json`)
	var paidSeq uint64
	for i := range 5 {
		seq := publish("orders.paid", fmt.Sprintf(`{"order_id":"o-%d","status":"paid"}`, i))
		if i == 0 {
			paidSeq = seq
		}
	}
	for i := 10; i < 15; i++ {
		publish("orders.created", fmt.Sprintf(`{"order_id":"o-%d"}`, i))
	}
	const events, orders = 21, 15

	apiGet := func(path string, v any) int {
		t.Helper()
		r := get(t, "GET", a.adminURL+path, token)
		if r.code == http.StatusOK {
			if err := json.Unmarshal(r.body, v); err != nil {
				t.Fatalf("GET %s: %v\n%s", path, err, r.body)
			}
		}
		return r.code
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		var st status.Status
		apiGet("/v1/status", &st)
		if st.Processor == nil || st.Processor.Processed != events-1 || st.DeadLetters.Messages != 1 {
			return fmt.Errorf("processor %+v, %d dead letters; want %d processed and 1 dead letter", st.Processor, st.DeadLetters.Messages, events-1)
		}
		return nil
	})
	var rb status.Rebuild
	if code := apiGet("/v1/projection/rebuild", &rb); code != http.StatusNotFound {
		t.Fatalf("GET /v1/projection/rebuild before any rebuild = %d, want 404", code)
	}

	ctx, cancel := context.WithTimeout(startBrowser(t, browser), 5*time.Minute)
	defer cancel()
	dashboardSignIn(t, ctx, a.adminURL, token)
	read := rebuildCardReader(t, ctx)
	clickUntil := func(sel, what string, cond func(c rebuildCard) error) rebuildCard {
		t.Helper()
		return clickCardUntil(t, ctx, read, sel, what, cond)
	}
	confirmGone := func(c rebuildCard) error {
		if c.Confirm != "" {
			return fmt.Errorf("the confirm step is still shown")
		}
		return nil
	}
	waitCard := func(what string, cond func(c rebuildCard) error) rebuildCard {
		t.Helper()
		var c rebuildCard
		embeddedtest.WaitFor(t, 60*time.Second, func() error {
			c = read()
			if err := cond(c); err != nil {
				return fmt.Errorf("%s: %v\ncard: %+v", what, err, c)
			}
			return nil
		})
		return c
	}
	// waitDone waits for the card to show a rebuild other than prev done,
	// and returns the card and the API's view of that rebuild.
	waitDone := func(what, prev string) (rebuildCard, status.Rebuild) {
		t.Helper()
		c := waitCard(what, func(c rebuildCard) error {
			if c.State == status.RebuildFailed || c.State == status.RebuildCanceled {
				t.Fatalf("%s: the rebuild %s: card %+v", what, c.State, c)
			}
			if c.ID == "" || c.ID == prev || c.State != status.RebuildDone || !c.Summary {
				return fmt.Errorf("state %q, id %q", c.State, c.ID)
			}
			return nil
		})
		var rb status.Rebuild
		if code := apiGet("/v1/projection/rebuild", &rb); code != http.StatusOK {
			t.Fatalf("%s: GET /v1/projection/rebuild = %d", what, code)
		}
		if rb.ID != c.ID || rb.State != status.RebuildDone {
			t.Fatalf("%s: the card shows rebuild %s done, the API %s %s", what, c.ID, rb.ID, rb.State)
		}
		// The card says what the API says.
		wantSkipped := fmt.Sprintf("%d poison, %d dead letters", rb.Poison, rb.DeadLettered)
		if rb.DeadLettered == 1 {
			wantSkipped = fmt.Sprintf("%d poison, 1 dead letter", rb.Poison)
		}
		if c.Badge != "done" || c.Reason != rb.Reason || c.Skipped != wantSkipped ||
			c.Progress != fmt.Sprintf("%d of %d events (100%%)", rb.Done, rb.Total) || c.Bar != "100%" ||
			c.Rebuilt != strconv.FormatUint(rb.Rebuilt, 10) || c.Conflicts != strconv.FormatUint(rb.Conflicts, 10) ||
			c.Untouched != strconv.FormatUint(rb.Untouched, 10) || !strings.HasPrefix(c.Partial, strconv.FormatUint(rb.Partial, 10)) ||
			c.FromSeq != fmt.Sprintf("%d … %d", rb.FromSeq, rb.Head) || c.Ended == "–" || c.Error != "" {
			t.Errorf("%s: the card shows %+v; the API %+v", what, c, rb)
		}
		if !c.Form || c.Cancel || c.Confirm != "" {
			t.Errorf("%s: after the rebuild: form shown %v, Cancel shown %v, confirm %q; want the form alone", what, c.Form, c.Cancel, c.Confirm)
		}
		return c, rb
	}

	c := waitCard("before any rebuild", func(c rebuildCard) error {
		if !c.None || c.State != "" || c.Badge != "" || !c.Form || c.Cancel || c.Confirm != "" || c.Msg != "" {
			return fmt.Errorf("want \"no rebuild has run\" and the form alone")
		}
		return nil
	})

	// The button asks first; Back sends nothing.
	c = clickUntil("#rb-start", "confirm step", func(c rebuildCard) error {
		if !strings.HasPrefix(c.Confirm, "Rebuild the projection from the stream's first event; orders whose earlier events the stream no longer holds keep their state?") {
			return fmt.Errorf("confirm %q", c.Confirm)
		}
		return nil
	})
	c = clickUntil("#rb-confirm-no", "back", func(c rebuildCard) error {
		if c.Confirm != "" || !c.Form {
			return fmt.Errorf("confirm still shown")
		}
		return nil
	})
	if code := apiGet("/v1/projection/rebuild", &rb); code != http.StatusNotFound || !c.None {
		t.Fatalf("after Back: GET /v1/projection/rebuild = %d, card none %v; want 404 and none: nothing started", code, c.None)
	}

	// Rebuild, confirm: the card follows it to its end.
	clickUntil("#rb-start", "confirm step", func(c rebuildCard) error {
		if c.Confirm == "" {
			return fmt.Errorf("no confirm step")
		}
		return nil
	})
	clickUntil("#rb-confirm-yes", "confirmed", confirmGone)
	c, rb = waitDone("full rebuild", "")
	if rb.Rebuilt != orders || rb.Partial != 0 || rb.Conflicts != 0 || rb.Untouched != 0 || rb.Done != events || rb.Total != events ||
		rb.Poison+rb.DeadLettered != 1 || rb.ReplacePartial || rb.Reason != "requested" {
		t.Errorf("full rebuild: %+v; want %d orders rebuilt of %d events, the poison skipped", rb, orders, events)
	}
	if c.Rebuilt != strconv.Itoa(orders) || !c.MsgOK || c.Msg != "rebuild "+rb.ID+" started from the stream's first event" {
		t.Errorf("full rebuild: card rebuilt %q, message %q (ok %v)", c.Rebuilt, c.Msg, c.MsgOK)
	}
	c.noMarkupRan(t)
	screenshot(t, ctx, "dashboard-rebuild.png")

	// A rebuild under way, and one that failed, as /v1/status would
	// have them (this store's rebuilds end before a poll can see them
	// fold): rendered and read in one script, before a poll redraws.
	const hostile = `<img src=x onerror=alert(1)>`
	synthetic := func(rb map[string]any) rebuildCard {
		t.Helper()
		base := map[string]any{"id": "synthetic", "reason": "requested " + hostile, "from_seq": 1, "position": 500, "head": 2000,
			"done": 500, "total": 2000, "started_at": "2026-12-01T10:00:00Z"}
		for k, v := range rb {
			base[k] = v
		}
		arg, _ := json.Marshal(base)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { renderRebuild(`+string(arg)+`); return `+readRebuildCard+`; })()`))
		if err != nil {
			t.Fatalf("render %s: %v", arg, err)
		}
		var c rebuildCard
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatalf("read the rebuild card: %v\n%s", err, s)
		}
		return c
	}
	c = synthetic(map[string]any{"state": "folding", "rate": 250, "eta_seconds": 6, "poison": 2, "dead_lettered": 1})
	if c.Badge != "folding" || c.Reason != "requested "+hostile || c.Label != "folded" || c.Progress != "500 of 2,000 events (25%)" ||
		c.Bar != "25%" || c.Rate != "250.0 events/s" || c.ETA != "6.0s" || c.Skipped != "2 poison, 1 dead letter" ||
		c.Ended != "–" || c.Summary || c.Error != "" || !c.Cancel || c.Form {
		t.Errorf("folding: the card shows %+v", c)
	}
	c = synthetic(map[string]any{"state": "taking over", "position": 2000, "done": 2000, "copied": 3, "to_copy": 12})
	if c.Badge != "taking over" || c.Label != "copied" || c.Progress != "3 of 12 orders" || c.Bar != "25%" || c.Rate != "–" ||
		c.Summary || c.Cancel || c.Form {
		t.Errorf("taking over: the card shows %+v", c)
	}
	c = synthetic(map[string]any{"state": "failed", "error": "shadow: " + hostile, "ended_at": "2026-12-01T10:00:30Z"})
	if c.Badge != "failed" || c.Error != "error: shadow: "+hostile || c.Summary || c.Cancel || !c.Form ||
		c.Ended != "2026-12-01 10:00:30.000 UTC (30.0s)" {
		t.Errorf("failed: the card shows %+v", c)
	}
	c.noMarkupRan(t)
	// The next poll shows the real one again.
	waitCard("after the synthetic ones", func(c rebuildCard) error {
		if c.ID != rb.ID || c.State != status.RebuildDone {
			return fmt.Errorf("want %s done", rb.ID)
		}
		return nil
	})

	// From the first paid event, replacing partial orders: o-0 … o-4 and
	// o-10 … o-14 rebuilt, o-5 … o-9 untouched. (Without the checkbox
	// o-0 … o-4 would be kept as partial; without the seq all 15 rebuilt.)
	first := rb.ID
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#rb-from"), strconv.FormatUint(paidSeq, 10)),
		chromedp.Click(chromedp.CSS("#rb-replace")),
	); err != nil {
		t.Fatal(err)
	}
	clickUntil("#rb-start", "confirm step", func(c rebuildCard) error {
		if want := fmt.Sprintf("Rebuild the projection from stream seq %d, replacing the state of orders with earlier events too?", paidSeq); !strings.HasPrefix(c.Confirm, want) {
			return fmt.Errorf("confirm %q, want %q", c.Confirm, want)
		}
		return nil
	})
	clickUntil("#rb-confirm-yes", "confirmed", confirmGone)
	c, rb = waitDone("rebuild from a seq", first)
	if rb.FromSeq != paidSeq || !rb.ReplacePartial || rb.Rebuilt != 10 || rb.Partial != 0 || rb.Untouched != 5 || rb.Conflicts != 0 {
		t.Errorf("rebuild from seq %d replacing partial orders: %+v; want 10 rebuilt, 0 partial, 5 untouched", paidSeq, rb)
	}
	if c.Rebuilt != "10" || c.Untouched != "5" || c.Partial != "0 (replace partial: rebuilt too)" || !strings.HasPrefix(c.FromSeq, strconv.FormatUint(paidSeq, 10)+" … ") ||
		c.Msg != fmt.Sprintf("rebuild %s started from stream seq %d", rb.ID, paidSeq) {
		t.Errorf("rebuild from a seq: card %+v", c)
	}

	// A refusal's text, as text: a from_time the server cannot parse
	// comes back in its 400, markup included.
	badTime := "2026-01-01T00:00" + hostile
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#rb-from"), badTime),
		chromedp.Click(chromedp.CSS("#rb-replace")), // off again
	); err != nil {
		t.Fatal(err)
	}
	clickUntil("#rb-start", "confirm step", func(c rebuildCard) error {
		if want := "Rebuild the projection from the first event at or after " + badTime + "; orders with earlier events keep their state?"; !strings.HasPrefix(c.Confirm, want) {
			return fmt.Errorf("confirm %q, want %q", c.Confirm, want)
		}
		return nil
	})
	clickUntil("#rb-confirm-yes", "confirmed", confirmGone)
	c = waitCard("bad from_time", func(c rebuildCard) error {
		if !strings.HasPrefix(c.Msg, "rebuild refused: ") || !strings.HasSuffix(c.Msg, " (HTTP 400)") || !strings.Contains(c.Msg, badTime) || c.MsgOK {
			return fmt.Errorf("message %q", c.Msg)
		}
		return nil
	})
	if c.ID != rb.ID || c.State != status.RebuildDone {
		t.Errorf("after a refused rebuild the card shows %s %s, want the last one (%s) done", c.ID, c.State, rb.ID)
	}
	c.noMarkupRan(t)

	// 409: Cancel from a page that still shows the rebuild folding (its
	// last poll came before the end) gets the server's refusal, shown in
	// the card. The button is hidden now: clicked as that page would.
	r := get(t, "DELETE", a.adminURL+"/v1/projection/rebuild", token)
	var refusal struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.body, &refusal); r.code != http.StatusConflict || err != nil || refusal.Error == "" {
		t.Fatalf("DELETE /v1/projection/rebuild after the end = %d %s, want 409 with an error", r.code, r.body)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("rb-cancel").click(); true`)); err != nil {
		t.Fatal(err)
	}
	c = waitCard("cancel after the end", func(c rebuildCard) error {
		if want := "cancel refused: " + refusal.Error + " (HTTP 409)"; c.Msg != want || c.MsgOK {
			return fmt.Errorf("message %q, want %q", c.Msg, want)
		}
		return nil
	})
	if c.ID != rb.ID || c.State != status.RebuildDone || c.Cancel {
		t.Errorf("after the refused cancel the card shows %s %s (Cancel shown %v), want %s done", c.ID, c.State, c.Cancel, rb.ID)
	}
	c.noMarkupRan(t)
	screenshot(t, ctx, "dashboard-rebuild-refused.png")
}

// A rebuild the server refuses for want of room (507: the harness's
// max_file_store reserves all of it for the stream, the dead letters and
// the projection) shows the server's reason in the card, and no rebuild.
func TestDashboardRebuildNoRoom(t *testing.T) {
	browser, missing := testenv.Browser()
	testenv.Require(t, missing)
	const token = "rebuild-token-0123456789"
	a := startInProcess(t, "[admin]\ntoken = \""+token+"\"\n")

	ctx, cancel := context.WithTimeout(startBrowser(t, browser), 3*time.Minute)
	defer cancel()
	dashboardSignIn(t, ctx, a.adminURL, token)
	read := rebuildCardReader(t, ctx)
	var c rebuildCard
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		if c = read(); !c.None || !c.Form {
			return fmt.Errorf("before any rebuild the card shows %+v", c)
		}
		return nil
	})
	c = clickCardUntil(t, ctx, read, "#rb-start", "confirm step", func(c rebuildCard) error {
		if c.Confirm == "" {
			return errors.New("no confirm step")
		}
		return nil
	})
	clickCardUntil(t, ctx, read, "#rb-confirm-yes", "confirmed", func(c rebuildCard) error {
		if c.Confirm != "" {
			return errors.New("the confirm step is still shown")
		}
		return nil
	})
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		if c = read(); !strings.HasSuffix(c.Msg, " (HTTP 507)") {
			return fmt.Errorf("message %q", c.Msg)
		}
		return nil
	})
	// The same refusal over the API: its text is the card's.
	r := get(t, "POST", a.adminURL+"/v1/projection/rebuild", token)
	var refusal struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.body, &refusal); r.code != http.StatusInsufficientStorage || err != nil ||
		!strings.Contains(refusal.Error, "no room for the rebuild's shadow projection") {
		t.Fatalf("POST /v1/projection/rebuild = %d %s, want 507 saying there is no room", r.code, r.body)
	}
	if want := "rebuild refused: " + refusal.Error + " (HTTP 507)"; c.Msg != want || c.MsgOK {
		t.Errorf("card message %q (ok %v), want %q", c.Msg, c.MsgOK, want)
	}
	// Nothing started: the card still says none ran, the form is back.
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		if c = read(); !c.None || c.State != "" || !c.Form || c.Confirm != "" {
			return fmt.Errorf("after the refusal the card shows %+v", c)
		}
		return nil
	})
	c.noMarkupRan(t)
	screenshot(t, ctx, "dashboard-rebuild-no-room.png")
}

// clickCardUntil clicks sel until cond holds of the rebuild card: a real
// click, again after 5 s without its effect. chromium places a click at
// the button's coordinates, and the cards above it grow as the status
// polls fill them: under a loaded machine a click landed beside the
// Rebuild button (a full run: no confirm step in 60 s; in
// TestDashboardRebuild, then in TestDashboardRebuildNoRoom). Every click
// used so is harmless twice (the page ignores a second one). A click
// that fails because the status poll replaced the button between its
// lookup and the click ("Could not find node with given id": a full run
// failed so) is made again too.
func clickCardUntil(t *testing.T, ctx context.Context, read func() rebuildCard, sel, what string, cond func(c rebuildCard) error) rebuildCard {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("click %s: %v", sel, err)
			}
			t.Logf("click %s: %v: clicking again", sel, err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var c rebuildCard
		var err error
		for again := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c = read()
			if err = cond(c); err == nil {
				return c
			}
			if time.Now().After(again) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v\ncard: %+v", what, err, c)
		}
		t.Logf("%s: %v 5 s after clicking %s: clicking again", what, err, sel)
	}
}
