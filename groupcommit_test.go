package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

// With the default durability (group commit), a producer on TCP gets the
// stream's own acks: sequences, duplicates for a repeated Nats-Msg-Id,
// JetStream API errors for a failed precondition; thousands of async
// publishes are all acked once each; the processor projects them; status,
// /readyz and /metrics say what an ack means and show the syncs.
func TestGroupCommitAcksLikeTheStream(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	if m := app.Config().DurabilityMode(); m != orderstore.DurabilityGroupCommit {
		t.Fatalf("default durability %q, want group-commit", m)
	}
	ctx := context.Background()
	nc, err := nats.Connect(app.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`), jetstream.WithMsgID("o-1-created"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "ORDER_EVENTS" || ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("first ack %+v", ack)
	}
	dup, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"o-1"}`), jetstream.WithMsgID("o-1-created"))
	if err != nil || !dup.Duplicate || dup.Sequence != 1 {
		t.Fatalf("repeated Nats-Msg-Id: %+v, %v; want a duplicate of 1", dup, err)
	}
	_, err = js.Publish(ctx, "orders.paid", []byte(`{"order_id":"o-1"}`), jetstream.WithExpectLastSequence(7))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("wrong expected last sequence: %v, want the stream's API error 10071", err)
	}
	ack, err = js.Publish(ctx, "orders.paid", []byte(`{"order_id":"o-1"}`), jetstream.WithExpectLastSequence(1))
	if err != nil || ack.Sequence != 2 {
		t.Fatalf("right expected last sequence: %+v, %v", ack, err)
	}
	// A plain publish (no reply) is stored too.
	if err := nc.Publish("orders.noted", []byte(`{"order_id":"o-1"}`)); err != nil {
		t.Fatal(err)
	}

	const n = 3000
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		f, err := js.PublishAsync("orders.created", fmt.Appendf(nil, `{"order_id":"a-%d"}`, i))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	seen := map[uint64]bool{}
	for _, f := range futures {
		select {
		case a := <-f.Ok():
			if seen[a.Sequence] || a.Duplicate {
				t.Fatalf("ack %+v twice or duplicate", a)
			}
			seen[a.Sequence] = true
		case err := <-f.Err():
			t.Fatalf("async publish: %v", err)
		}
	}
	st, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != n+3 {
		t.Fatalf("stream holds %d events, want %d", got, n+3)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if s := app.Stats(); s.Processed < n+3 {
			return fmt.Errorf("processed %d of %d", s.Processed, n+3)
		}
		return nil
	})
	o, err := app.Order(ctx, "a-2999")
	if err != nil || o.Events != 1 {
		t.Fatalf("projection of a-2999: %+v, %v", o, err)
	}

	var status status.Status
	adminJSON(t, app, "/v1/status", &status)
	if status.Durability["mode"] != "group-commit" || !strings.Contains(status.Durability["description"], "survives power loss") {
		t.Errorf("status durability %v", status.Durability)
	}
	in := status.Ingest
	if in == nil || in.Acked < n+2 || in.Syncs == 0 || in.SyncErrors != 0 || in.Waiting != 0 {
		t.Fatalf("status ingest %+v", in)
	}
	if in.BatchEvents.Count >= in.Acked {
		t.Errorf("%d batches for %d acks: no batch held more than one event", in.BatchEvents.Count, in.Acked)
	}
	var ready map[string]any
	if code := adminJSON(t, app, "/readyz", &ready); code != 200 || !strings.Contains(fmt.Sprint(ready["durability"]), "group-commit") {
		t.Errorf("/readyz %d %v", code, ready)
	}
	resp, err := http.Get("http://" + app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"orderstore_group_commit_sync_seconds_bucket", "orderstore_group_commit_batch_events_count",
		"orderstore_group_commit_acked_events_total", "orderstore_group_commit_acks_waiting 0", "orderstore_group_commit_sync_errors_total 0",
		"orderstore_ack_durable 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Whatever account a client lands in, an ack means durable: once syncs
// fail, no producer, admin or anonymous client gets an ack (each gets an
// error), the system user reaches no stream at all, the appliance stops
// with the sync's error and readiness goes with it.
func TestGroupCommitFailedSyncAcksNothing(t *testing.T) {
	for _, users := range []bool{true, false} {
		t.Run(fmt.Sprintf("users=%v", users), func(t *testing.T) {
			app := startFailing(t, func(cfg *orderstore.Config) {
				if users {
					securedConfig(cfg)
					cfg.Server.SystemUser, cfg.Server.SystemPassword = "sys", sysPassword
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			type client struct {
				name string
				js   jetstream.JetStream
			}
			var clients []client
			if users {
				_, p1 := connectAs(t, app, "p1", p1Password)
				_, ops := connectAs(t, app, "ops", adminPassword)
				clients = append(clients, client{"producer", p1}, client{"admin", ops})
			} else {
				nc, err := nats.Connect(app.ClientURL())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				js, _ := jetstream.New(nc)
				clients = append(clients, client{"anonymous", js}, client{"in-process", embeddedtest.JetStream(t, app)})
			}
			for _, c := range clients {
				if _, err := c.js.Publish(ctx, "orders.created", []byte(`{"order_id":"before"}`)); err != nil {
					t.Fatalf("%s before the fault: %v", c.name, err)
				}
			}
			orderstore.FailSyncs(app, syscall.EIO)
			for _, c := range clients {
				for i := range 3 {
					pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
					ack, err := c.js.Publish(pctx, "orders.created", fmt.Appendf(nil, `{"order_id":"after-%d"}`, i))
					pcancel()
					var apiErr *jetstream.APIError
					if err == nil {
						t.Fatalf("%s: acked %+v after the sync failed", c.name, ack)
					}
					if !errors.As(err, &apiErr) || apiErr.Code != 503 || !strings.Contains(apiErr.Description, "input/output error") {
						t.Errorf("%s: %v, want a 503 API error naming the sync's failure", c.name, err)
					}
				}
			}
			if users {
				nc, err := nats.Connect(app.ClientURL(), nats.UserInfo("sys", sysPassword))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				// It may send system requests only (TestSystemUserCannotActAsAnAccount).
				if err := nc.Publish("orders.created", []byte(`{"order_id":"sys"}`)); err != nil {
					t.Fatal(err)
				}
				embeddedtest.WaitFor(t, 10*time.Second, func() error {
					if err := nc.LastError(); err == nil || !strings.Contains(err.Error(), `Permissions Violation for Publish to "orders.created"`) {
						return fmt.Errorf("system user's publish: %v, want a permissions violation", err)
					}
					return nil
				})
			}
			select {
			case <-app.Done():
			case <-ctx.Done():
				t.Fatal("the appliance kept running after a failed sync")
			}
			if err := app.Wait(); err == nil || !strings.Contains(err.Error(), "group commit") {
				t.Errorf("Wait = %v, want the sync's error", err)
			}
			if err := app.Ready(ctx); err == nil || !strings.Contains(err.Error(), "durability") {
				t.Errorf("Ready = %v, want the durability check failing", err)
			}
		})
	}
}

// POST /v1/events/{type}: 201 with the sequence once durable, 200 for a
// repeated Idempotency-Key, 4xx naming what is wrong, 503 when the store
// cannot make the event durable.
func TestHTTPIngest(t *testing.T) {
	app := startFailing(t, securedConfig)
	url := "http://" + app.AdminAddr() + "/v1/events/"
	post := func(path, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		for k, v := range hdr {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, out := post("created", `{"order_id":"h-1","total":12}`, map[string]string{"Idempotency-Key": "h-1-created"})
	if code != 201 || out["seq"] != 1.0 || out["stream"] != "ORDER_EVENTS" {
		t.Fatalf("first POST: %d %v", code, out)
	}
	code, out = post("created", `{"order_id":"h-1","total":12}`, map[string]string{"Idempotency-Key": "h-1-created"})
	if code != 200 || out["seq"] != 1.0 || out["duplicate"] != true {
		t.Fatalf("repeated Idempotency-Key: %d %v", code, out)
	}
	code, out = post("shipped", `{"order_id":"h-1"}`, nil)
	if code != 201 || out["seq"] != 2.0 {
		t.Fatalf("second event: %d %v", code, out)
	}
	for _, c := range []struct {
		name, path, body string
		hdr              map[string]string
		want             int
		says             string // in the error, if set
	}{
		{"not JSON", "created", `order h-2`, nil, 400, "not JSON: invalid character 'o' looking for beginning of value at byte 1 (line 1, column 1)"},
		{"broken JSON", "created", "{\"order_id\":\n \"h-2\",}", nil, 400, "(line 2, column 8)"},
		{"a JSON array", "created", `[{"order_id":"h-2"}]`, nil, 400, "the payload is a JSON array, want an object with an order_id"},
		{"no order_id", "created", `{"id":"h-2"}`, nil, 400, "no order_id"},
		{"order_id a number", "created", `{"order_id":2}`, nil, 400, `field "order_id" is a JSON number, want a string`},
		{"bad order_id", "created", `{"order_id":"a b"}`, nil, 400, "cannot be a key"},
		{"status too long", "created", `{"order_id":"h-2","status":"` + strings.Repeat("s", 257) + `"}`, nil, 400, "status is 257 bytes"},
		{"bad type", "cre.ated", `{"order_id":"h-2"}`, nil, 400, ""},
		{"type too long", strings.Repeat("t", 257), `{"order_id":"h-2"}`, nil, 400, "1 to 256 letters"},
		{"long Idempotency-Key", "created", `{"order_id":"h-2"}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 300)}, 400, ""},
		{"a replay's Idempotency-Key", "created", `{"order_id":"h-2"}`, map[string]string{"Idempotency-Key": "replay-ORDER_EVENTS_DLQ-1"}, 400, ""},
		{"too large", "created", `{"order_id":"h-2","pad":"` + strings.Repeat("x", 2<<20) + `"}`, nil, 413, ""},
		{"form", "created", `order_id=h-2`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, ""},
		{"no token", "created", `{"order_id":"h-2"}`, map[string]string{"Authorization": ""}, 401, ""},
	} {
		code, out := post(c.path, c.body, c.hdr)
		if code != c.want || out["error"] == nil || out["error"] == "" {
			t.Errorf("%s: %d %v, want %d with a reason", c.name, code, out, c.want)
		}
		if msg := fmt.Sprint(out["error"]); !strings.Contains(msg, c.says) || strings.Contains(msg, "Go value") {
			t.Errorf("%s: error %q, want it to say %q", c.name, msg, c.says)
		}
	}
	// The longest event type NATS producers may use is taken over HTTP too.
	if code, out := post(strings.Repeat("t", 256), `{"order_id":"h-1"}`, nil); code != 201 {
		t.Errorf("a 256-byte event type: %d %v, want 201", code, out)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		o, err := app.Order(context.Background(), "h-1")
		if err != nil || o.Events != 3 {
			return fmt.Errorf("order h-1: %+v, %v", o, err)
		}
		return nil
	})
	_, ops := connectAs(t, app, "ops", adminPassword)
	st, err := ops.Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != 3 {
		t.Errorf("stream holds %d events after the refused ones, want 3", got)
	}

	orderstore.FailSyncs(app, syscall.EIO)
	code, out = post("created", `{"order_id":"h-3"}`, nil)
	if code != 503 || !strings.Contains(fmt.Sprint(out["error"]), "input/output error") {
		t.Errorf("POST after a failed sync: %d %v, want 503 naming the failure", code, out)
	}
	<-app.Done()
}

// startFailing starts an appliance whose failure the test causes: closed
// at the end without reporting it.
func startFailing(t *testing.T, opts ...func(*orderstore.Config)) *orderstore.Appliance {
	t.Helper()
	cfg := orderstoretest.Config(t)
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close(context.Background()) })
	return app
}

// Hostile producers: a subject as long as nats' 4 KiB protocol line takes,
// an 8 KiB header, a payload at max_payload. None may take down the ingest
// service's connection (nats closes a connection whose republish exceeds
// the line, and the appliance would stop with it): each gets an answer,
// and the appliance keeps acking. A dead letter with such a subject is
// refused on replay instead of killing orderstore's own connection.
func TestGroupCommitHostileProducers(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx := context.Background()
	publish := func(name string, msg *nats.Msg) (*jetstream.PubAck, error) {
		t.Helper()
		nc, err := nats.Connect(app.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return js.PublishMsg(pctx, msg)
	}
	normal := func(after string) {
		t.Helper()
		if _, err := publish("normal", &nats.Msg{Subject: "orders.created", Data: []byte(`{"order_id":"ok"}`)}); err != nil {
			t.Fatalf("a normal publish after %s: %v", after, err)
		}
	}
	// The longest subject a client can send still gets an answer.
	var longest string
	for n := 3940; n <= 4090; n += 5 {
		subj := "orders." + strings.Repeat("x", n)
		_, err := publish("long", &nats.Msg{Subject: subj, Data: []byte(`{"order_id":"long"}`)})
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			longest = subj // stored: it fits
		case errors.As(err, &apiErr) && apiErr.Code == 400 && strings.Contains(apiErr.Description, "longer than"):
		case errors.Is(err, nats.ErrConnectionClosed) || strings.Contains(err.Error(), "control line"):
			// nats refused the client's own line: nothing reached orderstore
		default:
			t.Fatalf("subject of %d bytes: %v, want an ack or a 400 naming the length", n, err)
		}
		normal(fmt.Sprintf("a %d-byte subject", n))
	}
	h := nats.Header{}
	h.Set("X-Big", strings.Repeat("h", 8<<10))
	if _, err := publish("header", &nats.Msg{Subject: "orders.created", Header: h, Data: []byte(`{"order_id":"h"}`)}); err != nil {
		t.Fatalf("8 KiB header: %v", err)
	}
	big := []byte(`{"order_id":"big","p":"` + strings.Repeat("p", int(app.Config().Stream.MaxMsgSize)-1024) + `"}`)
	if _, err := publish("big", &nats.Msg{Subject: "orders.created", Data: big}); err != nil {
		t.Fatalf("payload near max_msg_size: %v", err)
	}
	normal("the big ones")
	if err := app.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-app.Done():
		t.Fatalf("the appliance stopped: %v", app.Wait())
	default:
	}
	// A dead letter whose subject is too long to republish.
	t.Logf("longest subject stored: %d bytes", len(longest))
	if longest == "" {
		t.Fatal("no long subject was stored: the test checks no replay")
	}
	{
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			dls, _, err := app.DeadLetters(ctx, 1, 100)
			if err != nil {
				return err
			}
			for _, d := range dls {
				if d.Subject == longest {
					if _, err := app.ReplayDeadLetter(ctx, d.Sequence); err == nil || !strings.Contains(err.Error(), "too long") {
						t.Fatalf("replay of a %d-byte subject: %v, want refused as too long", len(longest), err)
					}
					return nil
				}
			}
			return fmt.Errorf("the long-subject event is not dead-lettered yet (%d dead letters)", len(dls))
		})
		normal("the refused replay")
		if err := app.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
