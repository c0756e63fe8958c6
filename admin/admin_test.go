package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

func testConfig() Config {
	return Config{
		Stream: "ORDER_EVENTS", Subjects: []string{"orders.>"}, DeadLetterStream: "ORDER_EVENTS_DLQ", ProjectionBucket: "ORDERS",
		MaxBytes: 1 << 30, MaxMsgs: -1, SyncPolicy: "always", SyncDescription: "fsync before every ack", MaxStore: 10 << 30,
		FreeBytes: func() (uint64, error) { return 42, nil },
	}
}

func do(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8222"+path, nil))
	var m map[string]any
	json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m
}

// Before the broker is up the listener already answers: live, but
// "recovering" and not ready.
func TestBeforeBackendIsRecovering(t *testing.T) {
	s := New(testConfig())
	if code, m := do(t, s, "/livez"); code != 200 || m["status"] != "ok" {
		t.Errorf("/livez = %d %v", code, m)
	}
	code, m := do(t, s, "/readyz")
	if code != 503 || m["status"] != "recovering" {
		t.Errorf("/readyz = %d %v, want 503 recovering", code, m)
	}
	if m["durability"].(map[string]any)["sync_interval"] != "always" {
		t.Errorf("/readyz lacks the durability policy: %v", m)
	}
	if code, _ := do(t, s, "/v1/status"); code != 503 {
		t.Errorf("/v1/status before backend = %d, want 503", code)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8222/metrics", nil))
	if !strings.Contains(rec.Body.String(), "orderstore_up 0") {
		t.Errorf("metrics before backend lack orderstore_up 0")
	}
}

func TestCollectorLints(t *testing.T) {
	srv := embeddedtest.Start(t)
	declare(t, embeddedtest.JetStream(t, srv))
	s := New(testConfig())
	s.SetBackend(Backend{JS: embeddedtest.JetStream(t, srv)})
	problems, err := testutil.CollectAndLint(&collector{s: s})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(s.reg, "orderstore_stream_messages", "orderstore_dead_letter_messages", "orderstore_store_free_bytes")
	if err != nil || n != 3 {
		t.Errorf("gathered %d of the expected metrics: %v", n, err)
	}
	// With no processor there is no consumer lag and readiness does not
	// require one.
	code, m := do(t, s, "/readyz")
	if code != 200 {
		t.Errorf("/readyz = %d %v", code, m)
	}
}

// declare creates the objects testConfig names (the appliance's own
// declare lives in the root package, which imports this one).
func declare(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for name, subj := range map[string]string{"ORDER_EVENTS": "orders.>", "ORDER_EVENTS_DLQ": "dlq.ORDER_EVENTS_DLQ.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORDERS", Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
}

// Readiness covers every object orderstore owns: a missing dead-letter
// stream or projection bucket makes the node unready, naming it.
func TestReadinessChecksDeadLetterStreamAndBucket(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	s := New(testConfig())
	s.ready.every = time.Nanosecond // each /readyz evaluates anew
	s.SetBackend(Backend{JS: js})
	if code, m := do(t, s, "/readyz"); code != 200 {
		t.Fatalf("/readyz with everything declared = %d %v", code, m)
	}
	ctx := context.Background()
	steps := []struct {
		check string
		drop  func() error
	}{
		{"dead_letter_stream", func() error { return js.DeleteStream(ctx, "ORDER_EVENTS_DLQ") }},
		{"projection_bucket", func() error { return js.DeleteKeyValue(ctx, "ORDERS") }},
	}
	for _, st := range steps {
		if err := st.drop(); err != nil {
			t.Fatal(err)
		}
		code, m := do(t, s, "/readyz")
		if code != 503 || m["status"] != "not ready" {
			t.Fatalf("/readyz after dropping %s = %d %v, want 503 not ready", st.check, code, m)
		}
		found := false
		for _, c := range m["checks"].([]any) {
			c := c.(map[string]any)
			if c["name"] == st.check {
				found = true
				if c["ok"] != false || !strings.Contains(c["reason"].(string), "not found") {
					t.Errorf("check %s = %v, want failed with a reason", st.check, c)
				}
			}
		}
		if !found {
			t.Errorf("/readyz has no %s check: %v", st.check, m)
		}
	}
}

// Free disk below disk_headroom makes the node unready, naming both.
func TestReadinessChecksFreeDisk(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	cfg := testConfig()
	cfg.StoreDir, cfg.DiskHeadroom = "/store", 1<<30 // FreeBytes says 42
	s := New(cfg)
	s.SetBackend(Backend{JS: js})
	code, m := do(t, s, "/readyz")
	if code != 503 || !strings.Contains(fmt.Sprint(m["checks"]), "below jetstream.disk_headroom") {
		t.Fatalf("/readyz with 42 bytes free = %d %v, want 503 naming disk_headroom", code, m)
	}
	cfg.DiskHeadroom = 16
	s = New(cfg)
	s.SetBackend(Backend{JS: js})
	if code, m := do(t, s, "/readyz"); code != 200 {
		t.Fatalf("/readyz with free disk above headroom = %d %v", code, m)
	}
}

// JetStream's store at max_file_store makes the node unready: every
// publish is refused then.
func TestReadinessChecksJetStreamStore(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	if _, err := js.Publish(context.Background(), "orders.created", []byte(`{"order_id":"a"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		ai, err := js.AccountInfo(context.Background())
		if err != nil || ai.Store == 0 {
			return fmt.Errorf("account store %v %v", ai, err)
		}
		return nil
	})
	cfg := testConfig()
	cfg.MaxStore = 16 // bytes: one event takes more
	s := New(cfg)
	s.SetBackend(Backend{JS: js})
	code, m := do(t, s, "/readyz")
	if code != 503 || !strings.Contains(fmt.Sprint(m["checks"]), "jetstream.max_file_store") {
		t.Fatalf("/readyz with the store full = %d %v, want 503 naming max_file_store", code, m)
	}
}

type notFoundOrders struct{ notFound error }

func (o notFoundOrders) Order(_ context.Context, id string) (processor.Order, error) {
	if id == "known" {
		return processor.Order{OrderID: id, Status: "created"}, nil
	}
	return processor.Order{}, fmt.Errorf("order %q: %w", id, o.notFound)
}

// What the backend says does not exist (its own error, wrapped) is a
// 404; any other error a 500.
func TestNotFoundIsTheBackendsError(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	notFound := fmt.Errorf("the backend's not found")
	s := New(testConfig())
	s.SetBackend(Backend{JS: js, NotFound: notFound, Orders: notFoundOrders{notFound}})
	if code, m := do(t, s, "/v1/orders/known"); code != 200 || m["status"] != "created" {
		t.Errorf("/v1/orders/known = %d %v, want 200 created", code, m)
	}
	if code, m := do(t, s, "/v1/orders/nope"); code != 404 || !strings.Contains(fmt.Sprint(m["error"]), "not found") {
		t.Errorf("/v1/orders/nope = %d %v, want 404", code, m)
	}
	// An id no order can have is a bad request, not a missing order.
	for _, path := range []string{"/v1/orders/" + strings.Repeat("x", 300), "/v1/orders/a%20b", "/v1/orders/.x/events", "/v1/orders/" + strings.Repeat("y", 257) + "/dlq"} {
		if code, m := do(t, s, path); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "is no order id") {
			t.Errorf("%.40s... = %d %v, want 400 naming the rule", path, code, m)
		}
	}
	s.SetBackend(Backend{JS: js, NotFound: fmt.Errorf("another"), Orders: notFoundOrders{notFound}})
	if code, _ := do(t, s, "/v1/orders/nope"); code != 500 {
		t.Errorf("/v1/orders/nope with another not-found error = %d, want 500", code)
	}
}

// A stream that discards new events and is at its limit refuses every
// publish: the node cannot take orders, and /readyz says so.
func TestReadinessChecksStreamFullWithDiscardNew(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	ctx := context.Background()
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "ORDER_EVENTS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxMsgs: 2}); err != nil {
		t.Fatal(err)
	}
	s := New(testConfig())
	s.ready.every = time.Nanosecond // each /readyz evaluates anew
	s.SetBackend(Backend{JS: js})
	for i := range 2 {
		if code, m := do(t, s, "/readyz"); code != 200 {
			t.Fatalf("/readyz with %d of 2 events = %d %v", i, code, m)
		}
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"refused"}`)); err == nil {
		t.Fatal("a third event was stored past max_msgs 2 with discard new")
	}
	code, m := do(t, s, "/readyz")
	if code != 503 || !strings.Contains(fmt.Sprint(m["checks"]), "max_msgs") {
		t.Fatalf("/readyz with the stream full and discard new = %d %v, want 503 naming max_msgs", code, m)
	}
}

// A publish that got no answer in time may have stored the event: HTTP
// ingest does not tell the client it was not stored (a client without an
// Idempotency-Key would then store it twice), it says to send it again
// with the same key.
func TestIngestTimeoutMayHaveStored(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	s := New(testConfig())
	s.SetBackend(Backend{JS: js, Publish: func(context.Context, string, nats.Header, []byte, ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
		return nil, context.DeadlineExceeded // injected: the stream's ack did not come in time
	}})
	req := httptest.NewRequest("POST", "http://127.0.0.1:8222/v1/events/created", strings.NewReader(`{"order_id":"7"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != 503 || strings.Contains(body, "not stored") || !strings.Contains(body, "Idempotency-Key") {
		t.Errorf("POST /v1/events/created with no ack in time = %d %s, want 503 saying it may be stored, to send it again with the same Idempotency-Key", rec.Code, body)
	}
}

// The refusal of an id no order can have names the rule it breaks, ".."
// included.
func TestBadOrderIDNamesTheRule(t *testing.T) {
	s := New(testConfig())
	s.SetBackend(Backend{})
	if code, m := do(t, s, "/v1/orders/a..b"); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), `".."`) {
		t.Errorf("/v1/orders/a..b = %d %v, want 400 naming \"..\"", code, m)
	}
}

// refusingReplays is a DeadLetters whose replays the stream refuses with
// err (an injected fault: the stream's own answer).
type refusingReplays struct {
	deadLetters // nil: only ReplayDeadLetter is called
	err         error
}

type deadLetters = DeadLetters

func (d refusingReplays) ReplayDeadLetter(context.Context, uint64) (uint64, error) { return 0, d.err }

// A replay the stream refuses (overload, schema validation, a store that
// cannot write) answers the stream's status, as HTTP ingest does, not 500.
func TestReplayRefusalKeepsItsStatus(t *testing.T) {
	s := New(testConfig())
	for _, code := range []int{422, 429, 503} {
		refusal := fmt.Errorf("replay dead letter 7 to %q: %w", "orders.created", &jetstream.APIError{Code: code, ErrorCode: 10077, Description: "refused"})
		s.SetBackend(Backend{DeadLetters: refusingReplays{err: refusal}})
		req := httptest.NewRequest("POST", "http://127.0.0.1:8222/v1/dlq/7/replay", nil)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != code || !strings.Contains(rec.Body.String(), "refused") {
			t.Errorf("replay refused with %d = %d %s, want %d with the refusal", code, rec.Code, rec.Body, code)
		}
	}
}

// A dead-letter stream near its max_bytes discards its oldest dead letters, unreplayed, as new
// ones come: /readyz stays ready but says so, and /metrics has its bytes against the limit.
func TestReadinessWarnsDeadLetterStreamNearFull(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: "ORDER_EVENTS_DLQ", Subjects: []string{"dlq.ORDER_EVENTS_DLQ.>"},
		Storage: jetstream.FileStorage, MaxBytes: 64 << 10, Discard: jetstream.DiscardOld}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s := New(testConfig())
	s.ready.every = time.Nanosecond // each /readyz evaluates anew
	s.SetBackend(Backend{JS: js})
	if code, m := do(t, s, "/readyz"); code != 200 || strings.Contains(fmt.Sprint(m["checks"]), "dead_letter_max_bytes") {
		t.Fatalf("/readyz with an empty dead-letter stream = %d %v, want 200 without a warning", code, m)
	}
	for range 80 { // 80 KiB into 64 KiB: the first ones go
		if _, err := js.Publish(ctx, "dlq.ORDER_EVENTS_DLQ.orders.created", make([]byte, 1<<10)); err != nil {
			t.Fatal(err)
		}
	}
	code, m := do(t, s, "/readyz")
	if code != 200 || !strings.Contains(fmt.Sprint(m["checks"]), "processor.dead_letter_max_bytes") {
		t.Errorf("/readyz with the dead-letter stream full = %d %v, want 200 with a warning naming dead_letter_max_bytes", code, m)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8222/metrics", nil))
	if body := rec.Body.String(); !strings.Contains(body, `orderstore_dead_letter_max_bytes{stream="ORDER_EVENTS_DLQ"} 65536`) ||
		!strings.Contains(body, "orderstore_dead_letter_bytes{") {
		t.Errorf("/metrics lacks the dead-letter stream's bytes and limit")
	}
}

// /readyz is open to anyone and costs JetStream API requests: callers that come together share one
// evaluation, and its answer is reused (up to a second; here while the test says), whether it
// passed or failed. A failed reload's error, which quotes the config file, stays in /v1/status.
func TestReadyzSharesOneEvaluation(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	s := New(testConfig())
	const reloadErr = "/etc/orderstore/orderstore.toml: line 7: system_password = ***"
	var evals atomic.Int64
	s.SetBackend(Backend{JS: js, Checks: func(context.Context) []status.Check {
		evals.Add(1)
		return []status.Check{{Name: "config_reload", OK: true, Reason: "warning: the last reload failed: " + reloadErr}}
	}, ConfigReload: func() *status.ConfigReload { return &status.ConfigReload{Error: reloadErr} }})
	s.ready.every = time.Hour
	const n = 64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if code, m := do(t, s, "/readyz"); code != 200 {
				t.Errorf("/readyz = %d %v", code, m)
			}
		})
	}
	wg.Wait()
	if got := evals.Load(); got != 1 {
		t.Errorf("%d /readyz evaluated readiness %d times, want once", n, got)
	}

	// Past its window an answer is evaluated anew: a failure shows, and so does its end.
	s.ready.every = time.Nanosecond
	ctx := context.Background()
	if err := js.DeleteStream(ctx, "ORDER_EVENTS_DLQ"); err != nil {
		t.Fatal(err)
	}
	if code, m := do(t, s, "/readyz"); code != 503 {
		t.Errorf("/readyz with the dead-letter stream deleted = %d %v, want 503", code, m)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDER_EVENTS_DLQ", Subjects: []string{"dlq.ORDER_EVENTS_DLQ.>"}}); err != nil {
		t.Fatal(err)
	}
	code, m := do(t, s, "/readyz")
	if code != 200 || strings.Contains(fmt.Sprint(m), "orderstore.toml") || !strings.Contains(fmt.Sprint(m), "the last reload failed: see config_reload in /v1/status") {
		t.Errorf("/readyz with the dead-letter stream back, after a failed reload = %d %v, want 200, the reload's failure without its error", code, m)
	}
	if code, m := do(t, s, "/v1/status"); code != 200 || strings.Count(fmt.Sprint(m), reloadErr) != 2 {
		t.Errorf("/v1/status after a failed reload = %d %v, want its error in config_reload and in the check", code, m)
	}
}
