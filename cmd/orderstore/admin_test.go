package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type httpResult struct {
	code int
	body []byte
	ct   string
}

func get(t testing.TB, method, u, token string) httpResult {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json") // as the CLI sends it
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, b, resp.Header.Get("Content-Type")}
}

func getJSON(t testing.TB, u string, want int) map[string]any {
	t.Helper()
	r := get(t, "GET", u, "")
	if r.code != want {
		t.Fatalf("GET %s = %d, want %d: %s", u, r.code, want, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("GET %s: not JSON: %v\n%s", u, err, r.body)
	}
	return m
}

// shape replaces every value by its JSON type, so golden files pin the
// JSON structure and not the numbers of one run.
func shape(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, vv := range x {
			out[k] = shape(vv)
		}
		return out
	case []any:
		if len(x) == 0 {
			return []any{}
		}
		return []any{shape(x[0])}
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("<%T>", v)
}

func golden(t testing.TB, name string, v any) {
	t.Helper()
	got, _ := json.MarshalIndent(shape(v), "", "  ")
	path := filepath.Join("testdata", "admin", name+".golden")
	if *update {
		os.WriteFile(path, append(got, '\n'), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run go test -update to create it)", path, err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
		t.Errorf("%s JSON shape changed (go test ./cmd/orderstore -run Admin -update if intended):\n got %s\nwant %s", name, got, want)
	}
}

func metricValue(t testing.TB, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			var v float64
			f := strings.Fields(line)
			fmt.Sscan(f[len(f)-1], &v)
			return v
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func TestAdminEndpoints(t *testing.T) {
	a := startInProcess(t, "")
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	live := getJSON(t, a.adminURL+"/livez", 200)
	golden(t, "livez", live)
	ready := getJSON(t, a.adminURL+"/readyz", 200)
	golden(t, "readyz", ready)
	if ready["status"] != "ready" || ready["durability"].(map[string]any)["mode"] != "group-commit" {
		t.Errorf("/readyz = %v", ready)
	}

	before := string(get(t, "GET", a.adminURL+"/metrics", "").body)
	if n := metricValue(t, before, "orderstore_stream_messages"); n != 0 {
		t.Fatalf("stream_messages before publishing = %v", n)
	}
	for i := range 10 {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	js.Publish(ctx, "orders.shipped", []byte(`{"order_id":"o-1","status":"in-transit"}`))
	js.Publish(ctx, "orders.created", []byte(`this is not json`))
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		st := getJSON(t, a.adminURL+"/v1/status", 200)
		p := st["processor"].(map[string]any)
		if p["processed"].(float64) != 11 || p["dead_lettered"].(float64) != 1 {
			return fmt.Errorf("processor %v", p)
		}
		return nil
	})

	st := getJSON(t, a.adminURL+"/v1/status", 200)
	golden(t, "status", st)
	stream := st["stream"].(map[string]any)
	if stream["messages"].(float64) != 12 || stream["max_bytes"].(float64) != 1<<30 || st["dead_letters"].(map[string]any)["messages"].(float64) != 1 {
		t.Errorf("status = %v", st)
	}

	// Metrics moved, and they lint clean.
	resp := get(t, "GET", a.adminURL+"/metrics", "")
	after := string(resp.body)
	for name, want := range map[string]float64{
		"orderstore_stream_messages":                            12,
		"orderstore_stream_last_sequence":                       12,
		"orderstore_stream_max_bytes":                           1 << 30,
		"orderstore_dead_letter_messages":                       1,
		`orderstore_processor_events_total{result="processed"}`: 11,
		"orderstore_consumer_pending_messages":                  0,
		"orderstore_processor_last_applied_sequence":            11,
		"orderstore_ready":                                      1,
		"orderstore_sync_always":                                0, // group commit: orderstore syncs, not nats
		"orderstore_ack_durable":                                1,
		"orderstore_group_commit_acks_waiting":                  0,
	} {
		if got := metricValue(t, after, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if metricValue(t, after, "orderstore_store_free_bytes") <= 0 || !strings.Contains(after, `orderstore_build_info{`) {
		t.Error("free bytes or build info missing")
	}
	problems, err := promlint.New(strings.NewReader(after)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "orderstore_") {
			t.Errorf("promlint %s: %s", p.Metric, p.Text)
		}
	}

	o := getJSON(t, a.adminURL+"/v1/orders/o-1", 200)
	golden(t, "order", o)
	if o["status"] != "in-transit" || o["events"].(float64) != 2 || o["last_event"] != "shipped" {
		t.Errorf("order o-1 = %v", o)
	}
	if _, ok := o["applied"]; ok {
		t.Error("order JSON exposes the idempotency bookkeeping")
	}
	getJSON(t, a.adminURL+"/v1/orders/nope", 404)
	getJSON(t, a.adminURL+"/v1/orders/"+url.PathEscape("bad id"), 400) // no order can have it

	dl := getJSON(t, a.adminURL+"/v1/dlq?limit=10", 200)
	golden(t, "dlq", dl)
	items := dl["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["original_seq"].(float64) != 12 {
		t.Fatalf("dlq = %v", dl)
	}
	getJSON(t, a.adminURL+"/v1/dlq?limit=0", 400)
	if r := get(t, "POST", a.adminURL+"/v1/dlq/999/replay", ""); r.code != 404 {
		t.Errorf("replay unknown = %d %s", r.code, r.body)
	}
	r := get(t, "POST", a.adminURL+"/v1/dlq/1/replay", "")
	if r.code != 200 || !strings.Contains(string(r.body), `"new_seq": 13`) ||
		!strings.Contains(string(r.body), `"warning": "it is dead-lettered again at once: not JSON: invalid character`) {
		t.Errorf("replay of a poison event = %d %s, want it replayed with a warning", r.code, r.body)
	}

	// nats-server's own monitoring, for existing NATS tooling.
	for _, p := range []string{"/varz", "/jsz", "/connz", "/healthz"} {
		m := getJSON(t, a.adminURL+p, 200)
		if len(m) == 0 {
			t.Errorf("%s empty", p)
		}
	}
	if r := get(t, "GET", a.adminURL+"/", ""); r.code != 200 || !strings.Contains(string(r.body), "<title>orderstore</title>") {
		t.Errorf("dashboard = %d", r.code)
	}
	for _, p := range []string{"/ui/app.js", "/ui/style.css"} {
		if r := get(t, "GET", a.adminURL+p, ""); r.code != 200 || len(r.body) < 100 {
			t.Errorf("%s = %d", p, r.code)
		}
	}

	// The CLI reads the same API.
	var out, errb strings.Builder
	if code := run(ctx, []string{"status", "-admin", a.adminURL}, &out, &errb); code != 0 {
		t.Errorf("status exit %d: %s", code, errb.String())
	}
	for _, w := range []string{"orderstore ready", "group-commit: acked once one sync", "stream ORDER_EVENTS", "processor", "dead letters", "max_age 168h\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("status output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	embeddedtest.WaitFor(t, 10*time.Second, func() error { // the replayed poison event is dead-lettered again
		out.Reset()
		if code := run(ctx, []string{"dlq", "list", "-admin", a.adminURL}, &out, &errb); code != 0 {
			return fmt.Errorf("dlq list exit %d", code)
		}
		if !strings.Contains(out.String(), "this is not json") || !strings.Contains(out.String(), "orders.created") {
			return fmt.Errorf("dlq list output: %s", out.String())
		}
		return nil
	})
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"dlq", "replay", "-admin", a.adminURL, "-all"}, &out, &errb); code != 0 {
		t.Fatalf("dlq replay -all exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "replayed dead letter 2 as event 14") || !strings.Contains(errb.String(), "1 replayed, 0 failed") ||
		!strings.Contains(errb.String(), "warning: dead letter 2: it is dead-lettered again at once") {
		t.Errorf("dlq replay output: %s / %s", out.String(), errb.String())
	}
	if code := run(ctx, []string{"dlq", "replay", "-admin", a.adminURL, "x"}, &out, &errb); code != exitUsage {
		t.Errorf("dlq replay x exit %d, want %d", code, exitUsage)
	}
}

func TestReadyzOwnObjectsOnly(t *testing.T) {
	a := startInProcess(t, "")
	nc, _ := nats.Connect(a.natsURL)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// readyz is /readyz once it answers want (it reuses an answer for up to a second), and once
	// /v1/status, which evaluates readiness each time, agrees.
	readyz := func(want int) (r map[string]any) {
		t.Helper()
		embeddedtest.WaitFor(t, 10*time.Second, func() error {
			st, res := getJSON(t, a.adminURL+"/v1/status", 200), get(t, "GET", a.adminURL+"/readyz", "")
			if json.Unmarshal(res.body, &r); res.code != want || (st["status"] == "ready") != (want == 200) {
				return fmt.Errorf("/readyz = %d, /v1/status says %q; want %d", res.code, st["status"], want)
			}
			return nil
		})
		return r
	}
	readyz(200)

	// An unrelated consumer that is stuck (paused, with a backlog) does not
	// make orderstore unready.
	js.Publish(ctx, "orders.created", []byte(`{"order_id":"x"}`))
	if _, err := js.CreateConsumer(ctx, "ORDER_EVENTS", jetstream.ConsumerConfig{Durable: "adhoc", AckPolicy: jetstream.AckExplicitPolicy,
		PauseUntil: ptr(time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	readyz(200)

	// Misconfigure orderstore's stream: 503 naming it; restore: 200.
	s, _ := js.Stream(ctx, "ORDER_EVENTS")
	cfg := s.CachedInfo().Config
	orig := cfg
	cfg.Subjects = []string{"orders.created"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r := readyz(503)
	if r["status"] != "not ready" || !strings.Contains(fmt.Sprint(r["checks"]), `subject "orders.>" missing`) {
		t.Errorf("/readyz = %v", r)
	}
	// status says so with exit 1, in JSON too (the README: "exit 1 when not ready").
	for _, args := range [][]string{{"status", "-admin", a.adminURL}, {"status", "-admin", a.adminURL, "-json"}} {
		var out, errb strings.Builder
		if code := run(ctx, args, &out, &errb); code != exitFailure || !strings.Contains(out.String(), "not ready") {
			t.Errorf("%q while not ready: exit %d, want %d\n%s%s", args, code, exitFailure, out.String(), errb.String())
		}
	}
	if _, err := js.UpdateStream(ctx, orig); err != nil {
		t.Fatal(err)
	}
	readyz(200)

	// No client may delete the processor's consumer: the durable guard
	// refuses, saying why, and readiness holds.
	if err := js.DeleteConsumer(ctx, "ORDER_EVENTS", "order-processor"); err == nil || !strings.Contains(err.Error(), "make a durable of your own") {
		t.Fatalf("deleting the processor's durable = %v, want the guard's refusal", err)
	}
	readyz(200)
	// The processor's consumer missing (here with its stream, which an
	// admin may delete) is a readiness failure.
	if err := js.DeleteStream(ctx, "ORDER_EVENTS"); err != nil {
		t.Fatal(err)
	}
	// (Read in /v1/status, which evaluates readiness each time: the appliance stops about a second
	// later, within the time /readyz may reuse an answer.)
	r = getJSON(t, a.adminURL+"/v1/status", 200)
	if r["status"] != "not ready" || !strings.Contains(fmt.Sprint(r["checks"]), `consumer "order-processor"`) {
		t.Errorf("/v1/status = %v", r)
	}
	// Losing its consumer stops the processor and with it the appliance
	// (exit 1): under systemd it restarts and declares the consumer again.
	select {
	case code := <-a.done:
		close(a.done)
		if code != exitFailure {
			t.Errorf("exit code after the consumer was deleted = %d, want %d", code, exitFailure)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("appliance kept running without its consumer:\n%s", a.log)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAdminToken(t *testing.T) {
	a := startInProcess(t, "[admin]\ntoken = \"s3cret-token-0123456789\"\n")
	for _, p := range []string{"/livez", "/readyz"} {
		if r := get(t, "GET", a.adminURL+p, ""); r.code != 200 {
			t.Errorf("%s without token = %d, want 200 (open)", p, r.code)
		}
	}
	for _, p := range []string{"/metrics", "/v1/status", "/v1/dlq", "/v1/orders/x", "/varz", "/jsz", "/"} {
		if r := get(t, "GET", a.adminURL+p, ""); r.code != 401 {
			t.Errorf("%s without token = %d, want 401", p, r.code)
		}
		if r := get(t, "GET", a.adminURL+p, "wrong"); r.code != 401 {
			t.Errorf("%s with a wrong token = %d, want 401", p, r.code)
		}
		want := 200
		if p == "/v1/orders/x" {
			want = 404
		}
		if r := get(t, "GET", a.adminURL+p, "s3cret-token-0123456789"); r.code != want {
			t.Errorf("%s with token = %d, want %d", p, r.code, want)
		}
	}
	if r := get(t, "POST", a.adminURL+"/v1/dlq/1/replay", ""); r.code != 401 {
		t.Errorf("replay without token = %d", r.code)
	}
	// The browser path: a login form, then a cookie.
	jar := &cookieJar{}
	hc := &http.Client{Jar: jar}
	req, _ := http.NewRequest("GET", a.adminURL+"/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(body), `action="/login"`) {
		t.Errorf("dashboard without token = %d, want 401 with a login form", resp.StatusCode)
	}
	resp, err = hc.PostForm(a.adminURL+"/login", url.Values{"token": {"s3cret-token-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "<title>orderstore</title>") {
		t.Errorf("after login = %d", resp.StatusCode)
	}
	// The CLI with and without the token.
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"status", "-admin", a.adminURL}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "401") {
		t.Errorf("status without token: exit %d, %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"status", "-admin", a.adminURL, "-token", "s3cret-token-0123456789"}, &out, &errb); code != 0 {
		t.Errorf("status with token: exit %d, %s", code, errb.String())
	}
}

type cookieJar struct{ cookies []*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, c []*http.Cookie) { j.cookies = append(j.cookies, c...) }
func (j *cookieJar) Cookies(*url.URL) []*http.Cookie         { return j.cookies }
