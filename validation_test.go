package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

const createdSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "amount"],
  "properties": {
    "order_id": {"type": "string", "minLength": 1},
    "amount": {"type": "number", "minimum": 0}
  }
}`

func writeSchema(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func streamMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Every way in refuses an invalid event with 422 naming the schema, the
// JSON pointer and the keyword, and stores nothing; a valid event is
// stored byte for byte; in every durability mode.
func TestValidationAtIngest(t *testing.T) {
	for _, mode := range []string{orderstore.DurabilityGroupCommit, orderstore.DurabilityAlways, orderstore.DurabilityInterval} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			schema := writeSchema(t, dir, "created.json", createdSchema)
			app := orderstoretest.Start(t, func(c *orderstore.Config) {
				c.JetStream.Durability = mode
				if mode == orderstore.DurabilityInterval {
					c.JetStream.SyncInterval = time.Second
				}
				c.Admin.Listen = "127.0.0.1:0"
				c.Validation = orderstore.ValidationConfig{Schemas: map[string]string{"created": schema}, UnknownTypes: "reject"}
			})
			ctx := context.Background()
			js := embeddedtest.JetStream(t, app)

			// Valid: stored as sent, byte for byte (odd spacing and key
			// order kept).
			valid := []byte(`{ "amount":12.5,   "order_id":"v-1" ,"x":[1,2]}`)
			ack, err := js.Publish(ctx, "orders.created", valid)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := js.Stream(ctx, "ORDER_EVENTS")
			if m, err := s.GetMsg(ctx, ack.Sequence); err != nil || string(m.Data) != string(valid) {
				t.Fatalf("stored %q, %v; want %q", m.Data, err, valid)
			}
			before := streamMsgs(t, js)

			// Invalid over NATS: the error names schema, pointer, keyword.
			for _, c := range []struct{ subject, data, want string }{
				{"orders.created", `{"order_id":"v-2","amount":-3}`, `at /amount: keyword "minimum"`},
				{"orders.created", `{"order_id":"v-2"}`, `keyword "required"`},
				{"orders.created", `{"order_id":"v-2","amount":"12"}`, `at /amount: keyword "type"`},
				{"orders.created", `not json`, `not JSON`},
				{"orders.refunded", `{"order_id":"v-2"}`, `event type "refunded" has no schema`},
			} {
				_, err := js.Publish(ctx, c.subject, []byte(c.data))
				var api *jetstream.APIError
				if !errors.As(err, &api) || api.Code != 422 || api.ErrorCode != orderstore.ValidationErrCode || !strings.Contains(api.Description, c.want) ||
					(c.subject == "orders.created" && !strings.Contains(api.Description, schema)) {
					t.Errorf("publish %s %s: %v; want 422 %d naming the schema and %q", c.subject, c.data, err, orderstore.ValidationErrCode, c.want)
				}
			}
			// A plain publish (nobody to tell) is not stored either.
			nc := js.Conn()
			if err := nc.Publish("orders.created", []byte(`{"order_id":"v-3","amount":-1}`)); err != nil {
				t.Fatal(err)
			}
			nc.Flush()
			// HTTP ingest: 422 with the same detail.
			resp, err := http.Post("http://"+app.AdminAddr()+"/v1/events/created", "application/json", strings.NewReader(`{"order_id":"v-4","amount":-1}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 422 || !strings.Contains(string(body), `at /amount: keyword \"minimum\"`) {
				t.Errorf("HTTP ingest of an invalid event: %d %s", resp.StatusCode, body)
			}
			// Counted: 5 over NATS, 1 plain, 1 HTTP.
			embeddedtest.WaitFor(t, 10*time.Second, func() error {
				var st status.Status
				adminJSON(t, app, "/v1/status", &st)
				if st.Validation == nil || st.Validation.RejectedTotal != 7 {
					return fmt.Errorf("status validation %+v", st.Validation)
				}
				return nil
			})
			if after := streamMsgs(t, js); after != before {
				t.Errorf("the stream holds %d events after the refusals, %d before", after, before)
			}
			resp, err = http.Get("http://" + app.AdminAddr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, w := range []string{`orderstore_validation_rejected_total{reason="minimum",type="created"} 3`, `orderstore_validation_rejected_total{reason="unknown_type",type="other"} 1`} {
				if !strings.Contains(string(metrics), w) {
					t.Errorf("/metrics lacks %s", w)
				}
			}
		})
	}
}

// A schema added later applies from the next publish: stored events are
// untouched, and a dead letter that does not match it is refused when
// replayed, and stays a dead letter.
func TestValidationAppliesFromTheNextPublish(t *testing.T) {
	dir := t.TempDir()
	store := t.TempDir()
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.JetStream.StoreDir = store })
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"old-1","amount":-5}`)); err != nil {
		t.Fatal(err)
	}
	// A poison event (no order_id) becomes a dead letter.
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"amount":-5}`)); err != nil {
		t.Fatal(err)
	}
	var dl orderstore.DeadLetter
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		dls, _, err := app.DeadLetters(ctx, 1, 10)
		if err != nil || len(dls) != 1 {
			return fmt.Errorf("dead letters %v, %v", dls, err)
		}
		dl = dls[0]
		return nil
	})
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.Close(cctx); err != nil {
		t.Fatal(err)
	}
	schema := writeSchema(t, dir, "created.json", createdSchema)
	app = orderstoretest.Start(t, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Validation.Schemas = map[string]string{"created": schema}
	})
	js = embeddedtest.JetStream(t, app)
	s, _ := js.Stream(ctx, "ORDER_EVENTS")
	if m, err := s.GetMsg(ctx, 1); err != nil || string(m.Data) != `{"order_id":"old-1","amount":-5}` {
		t.Errorf("the stored event changed: %q, %v", m.Data, err)
	}
	_, err := app.ReplayDeadLetter(ctx, dl.Sequence)
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.Code != 422 || !strings.Contains(api.Description, `keyword "required"`) {
		t.Errorf("replay of a dead letter the schema refuses: %v", err)
	}
	if dls, _, err := app.DeadLetters(ctx, 1, 10); err != nil || len(dls) != 1 {
		t.Errorf("after the refused replay: dead letters %v, %v; want it kept", dls, err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"new-1","amount":1}`)); err != nil {
		t.Errorf("a valid event: %v", err)
	}
	if _, err := js.Publish(ctx, "orders.paid", []byte(`{"order_id":"new-1"}`)); err != nil {
		t.Errorf("a type without a schema, unknown_types accept: %v", err)
	}
}

// An embedding program's own check, and the edge of a hub: an event
// refused at the edge never reaches the hub.
func TestValidationFuncAtAnEdge(t *testing.T) {
	leaf := orderstoretest.Addrs(t, 1)[0]
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"))
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf), func(c *orderstore.Config) {
		c.Validation.Func = func(subject string, data []byte) error {
			var e struct{ Region string }
			if json.Unmarshal(data, &e) != nil || e.Region == "" {
				return errors.New("every event names its region")
			}
			return nil
		}
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, edge)
	_, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"e-1"}`))
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.Code != 422 || !strings.Contains(api.Description, "every event names its region") {
		t.Errorf("the program's check: %v", err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"e-2","region":"eu"}`), jetstream.WithMsgID("e-2")); err != nil {
		t.Fatal(err)
	}
	hjs := embeddedtest.JetStream(t, hub)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, err := hub.Order(ctx, "e-2"); err != nil {
			return err
		}
		return nil
	})
	s, err := hjs.Stream(ctx, "ORDER_EVENTS_ALL")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the hub's aggregate holds %d events, want only the valid one", n)
	}
}

// A number the schema library cannot compare (an exponent past ±1e6
// panicked in it, on the publishing client's read loop: the whole server
// went down) or would compare at a cost growing with it is refused with
// 422; so is an event nested or with values past what is checked (a
// failing one 5,000 deep cost 670 MB); the appliance goes on storing.
func TestValidationHostileEvents(t *testing.T) {
	schema := writeSchema(t, t.TempDir(), "created.json", createdSchema)
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Validation = orderstore.ValidationConfig{Schemas: map[string]string{"created": schema}}
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	events := map[string]string{
		strings.Repeat(`{"children":[`, 4990) + `{"order_id":1}` + strings.Repeat(`]}`, 4990): "nested deeper than is checked (at most 32 levels)",
		`{"order_id":"h-1","amount":1,"x":[` + strings.Repeat("1,", 10_000) + `1]}`:           "more values than are checked (at most 10000",
	}
	for _, n := range []string{"1e10000000", "-1e-10000000", "1e100000", "1" + strings.Repeat("0", 200)} {
		events[`{"order_id":"h-1","amount":`+n+`}`] = "a number beyond what is compared"
	}
	for data, want := range events {
		_, err := js.Publish(ctx, "orders.created", []byte(data))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.Code != 422 || !strings.Contains(api.Description, want) {
			t.Errorf("%.40s...: %.300v, want 422 naming %q", data, err, want)
		}
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"h-2","amount":1e300}`)); err != nil {
		t.Fatalf("a valid event after the hostile ones: %v", err)
	}
}

// SetValidation records its outcome as the last reload's, for a program that embeds orderstore as
// for `orderstore run`: a failure is a /readyz warning (still ready) and
// orderstore_config_last_reload_successful 0, until one succeeds. Its error, which names the file,
// is in /v1/status, not in /readyz, which answers anyone.
func TestSetValidationOutcomeShows(t *testing.T) {
	app := orderstoretest.Start(t)
	// state is the config_reload warning of /readyz and of /v1/status ("" none), and whether
	// /metrics says the last succeeded.
	state := func() (ready, full string, ok bool) {
		get := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			app.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1"+path, nil))
			return rec
		}
		for path, warning := range map[string]*string{"/readyz": &ready, "/v1/status": &full} {
			var st struct{ Checks []status.Check }
			if rec := get(path); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
				t.Fatalf("%s = %d, want 200: %s", path, rec.Code, rec.Body)
			}
			for _, c := range st.Checks {
				if c.Name == "config_reload" && c.OK {
					*warning = c.Reason
				}
			}
		}
		return ready, full, strings.Contains(get("/metrics").Body.String(), "\norderstore_config_last_reload_successful 1\n")
	}
	bad := writeSchema(t, t.TempDir(), "created.json", `{"properties":`)
	if err := app.SetValidation(orderstore.ValidationConfig{Schemas: map[string]string{"created": bad}}); err == nil {
		t.Fatal("SetValidation of a schema that does not compile: no error")
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error { // /readyz reuses an answer up to a second
		if r, st, ok := state(); !strings.HasPrefix(r, "warning: the last reload failed: see config_reload in /v1/status") ||
			strings.Contains(r, bad) || !strings.Contains(st, bad) || ok {
			return fmt.Errorf("after a failed SetValidation: /readyz warning %q, /v1/status warning %q, last reload successful %v", r, st, ok)
		}
		return nil
	})
	good := writeSchema(t, t.TempDir(), "created.json", createdSchema)
	if err := app.SetValidation(orderstore.ValidationConfig{Schemas: map[string]string{"created": good}}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if r, st, ok := state(); r != "" || st != "" || !ok {
			return fmt.Errorf("after a good SetValidation: /readyz warning %q, /v1/status warning %q, last reload successful %v", r, st, ok)
		}
		return nil
	})
}
