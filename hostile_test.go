package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
)

// Hostile events each end in the projection or in the dead-letter stream;
// none closes a connection or stops a part: a valid event published after
// them is projected and /readyz stays 200.
func TestHostileEventsSettle(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	// The largest event the stream takes (nats advertises a little more,
	// room for the headers orderstore adds: an event above this is
	// refused up front, TestIngestRefusesUpFront).
	maxPayload := int(app.Config().Stream.MaxMsgSize)

	// Its dead letter is stored without its payload, and still listed among the order's.
	bigPoison := `{"order_id":"big-poison","status":"` + strings.Repeat("s", processor.MaxStatusLen+1) + `","pad":"` + strings.Repeat("p", maxPayload) + `"}`
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	type ev struct {
		name, subject string
		header        nats.Header
		data          string
		projected     string // order id it projects, "" if it must be dead-lettered
	}
	events := []ev{
		{name: "4KiB order id", subject: "orders.created", data: `{"order_id":"` + strings.Repeat("a", 4000) + `"}`},
		{name: "order id one byte too long", subject: "orders.created", data: `{"order_id":"` + strings.Repeat("b", processor.MaxOrderIDLen+1) + `"}`},
		{name: "longest order id", subject: "orders.created", data: `{"order_id":"` + strings.Repeat("c", processor.MaxOrderIDLen) + `"}`, projected: strings.Repeat("c", processor.MaxOrderIDLen)},
		{name: "very long subject", subject: "orders." + strings.Repeat("x", 3900), data: `{"order_id":"long-subject"}`},
		{name: "long subject, invalid JSON", subject: "orders." + strings.Repeat("y", 3900), data: `{`},
		{name: "deep JSON", subject: "orders.created", data: `{"order_id":"deep","x":` + deep + `}`},
		{name: "invalid UTF-8 id", subject: "orders.created", data: "{\"order_id\":\"\xff\xfe\"}"},
		{name: "invalid UTF-8 status (decoded as U+FFFD)", subject: "orders.created", data: "{\"order_id\":\"utf\",\"status\":\"\xff\"}", projected: "utf"},
		{name: "long status", subject: "orders.created", data: `{"order_id":"st","status":"` + strings.Repeat("s", processor.MaxStatusLen+1) + `"}`},
		{name: "id with dots", subject: "orders.created", data: `{"order_id":"a..b"}`},
		{name: "id with space", subject: "orders.created", data: `{"order_id":"a b"}`},
		{name: "id with wildcard", subject: "orders.created", data: `{"order_id":"a.>"}`},
		{name: "odd but valid id", subject: "orders.created", data: `{"order_id":"A/b=c_d-e.f"}`, projected: "A/b=c_d-e.f"},
		{name: "number id", subject: "orders.created", data: `{"order_id":42}`},
		{name: "max payload, not JSON", subject: "orders.created", data: strings.Repeat("z", maxPayload-200)},
		{name: "max payload, an order's poison", subject: "orders.created", data: bigPoison[:maxPayload-202] + `"}`},
		{name: "huge headers and payload, not JSON", subject: "orders.created", header: nats.Header{"X-Big": []string{strings.Repeat("h", 60<<10)}}, data: strings.Repeat("n", maxPayload-(62<<10))},
		{name: "headers at nats' limit, not JSON", subject: "orders.created", header: nats.Header{"X-Big": []string{strings.Repeat("h", 63<<10)}}, data: "not json"},
	}
	wantDLQ := 0
	for _, e := range events {
		m := &nats.Msg{Subject: e.subject, Header: e.header, Data: []byte(e.data)}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: publish: %v", e.name, err)
		}
		if e.projected == "" {
			wantDLQ++
		}
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"after"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, err := app.Order(ctx, "after"); err != nil {
			return fmt.Errorf("the valid event after the hostile ones: %w (stats %+v)", err, app.Stats())
		}
		return nil
	})
	for _, e := range events {
		if e.projected == "" {
			continue
		}
		if _, err := app.Order(ctx, e.projected); err != nil {
			t.Errorf("%s: not projected: %v", e.name, err)
		}
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if st := app.Stats(); st.DeadLettered != uint64(wantDLQ) {
			return fmt.Errorf("dead-lettered %d, want %d", st.DeadLettered, wantDLQ)
		}
		return nil
	})
	dls, _, err := app.DeadLetters(ctx, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := map[string]bool{}
	for _, d := range dls {
		// "headers N bytes", "payload N bytes" or both, comma-separated.
		for part := range strings.SplitSeq(d.Trimmed, ", ") {
			if i := strings.IndexByte(part, ' '); i > 0 {
				trimmed[part[:i]] = true
			}
		}
		if len(d.Subject) > 3000 && d.OriginalSequence == 0 {
			t.Errorf("dead letter of a long subject lost its origin: %+v", d)
		}
	}
	if !trimmed["payload"] || !trimmed["headers"] {
		t.Errorf("trimmed dead letters %v, want one without its payload and one without its headers", trimmed)
	}
	if own, complete, err := app.OrderDeadLetters(ctx, "big-poison"); err != nil || len(own) != 1 || own[0].Trimmed == "" || !complete {
		t.Errorf("the order's dead letters: %d, complete %v, %v; want its one trimmed dead letter, complete", len(own), complete, err)
	}
	// The last event's ack (or term) reaches the server after its effect
	// is visible: wait for the floor.
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		lag, err := app.Lag(ctx)
		if err != nil {
			return err
		}
		if lag.AckFloor != uint64(len(events)+1) {
			return fmt.Errorf("ack floor %d, want %d: every event settles", lag.AckFloor, len(events)+1)
		}
		return nil
	})
	if err := app.Ready(ctx); err != nil {
		t.Errorf("not ready after hostile events: %v", err)
	}
	// A trimmed dead letter replays from its original, which is still in
	// the stream.
	for _, d := range dls {
		if !strings.HasPrefix(d.Trimmed, "payload") {
			continue
		}
		seq, err := app.ReplayDeadLetter(ctx, d.Sequence)
		if err != nil {
			t.Fatalf("replay trimmed dead letter %d: %v", d.Sequence, err)
		}
		s, _ := js.Stream(ctx, "ORDER_EVENTS")
		m, err := s.GetMsg(ctx, seq)
		if err != nil || len(m.Data) != maxPayload-200 {
			t.Errorf("replayed event %d: %d bytes, %v; want the original's %d", seq, len(m.Data), err, maxPayload-200)
		}
		break
	}
}

// Hostile admin requests get 4xx without touching NATS, and change
// nothing: /readyz stays 200.
func TestHostileAdminRequests(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	base := "http://" + app.AdminAddr()
	hc := &http.Client{Timeout: 10 * time.Second}
	tests := []struct {
		method, path string
		want         int
		origin       string
	}{
		// Ids no order can have: a bad request, answered in JSON.
		{"GET", "/v1/orders/" + strings.Repeat("a", 5000), 400, ""},
		{"GET", "/v1/orders/" + strings.Repeat("a", 60000), 400, ""},
		{"GET", "/v1/orders/" + url.PathEscape("a b"), 400, ""},
		{"GET", "/v1/orders/" + url.PathEscape("a.>"), 400, ""},
		{"GET", "/v1/orders/%00", 400, ""},
		{"GET", "/v1/dlq?from=-1", 400, ""},
		{"GET", "/v1/dlq?limit=1000000000", 400, ""},
		{"GET", "/v1/dlq?from=" + strings.Repeat("9", 100), 400, ""},
		// A repeated parameter, which would count once (a typo listing nothing, or a smaller page).
		{"GET", "/v1/orders?status=typo&status=created", 400, ""},
		{"GET", "/v1/dlq?limit=1&limit=5000", 400, ""},
		{"POST", "/v1/dlq/abc/replay", 400, ""},
		{"POST", "/v1/dlq/99999999999999999999999/replay", 400, ""},
		{"POST", "/v1/dlq/123/replay", 404, ""},
		{"DELETE", "/v1/orders/x", 405, ""},
		// A page elsewhere posting to the listener through the user's browser.
		{"POST", "/v1/dlq/1/replay", 403, "http://evil.example"},
		{"POST", "/login", 403, "http://evil.example"},
		{"POST", "/v1/dlq/123/replay", 404, "http://" + app.AdminAddr()},
		// A form post (no JSON Content-Type) from anywhere.
		{"POST", "/v1/dlq/123/replay", 415, "form"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.method == "POST" && tt.origin != "form" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tt.origin != "" && tt.origin != "form" {
			req.Header.Set("Origin", tt.origin)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %.60s: %v", tt.method, tt.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %.60s = %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.want)
		}
		if len(body) > 2048 {
			t.Errorf("%s %.60s echoed %d bytes", tt.method, tt.path, len(body))
		}
		if resp.Header.Get("Content-Type") == "application/json" && !json.Valid(body) {
			t.Errorf("%s %.60s: invalid JSON %q", tt.method, tt.path, body)
		}
	}
	if err := app.Ready(context.Background()); err != nil {
		t.Errorf("not ready after hostile requests: %v", err)
	}
	// The projection still answers.
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(context.Background(), "orders.created", []byte(`{"order_id":"ok"}`), jetstream.WithMsgID("ok")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		_, err := app.Order(context.Background(), "ok")
		return err
	})
}

// A trimmed dead letter whose original the stream no longer holds cannot
// be replayed: the answer says so, not that the dead letter (which `dlq
// list` shows) is not found.
func TestReplayOfATrimmedDeadLetterWithoutItsOriginal(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	p := app.Config().Processor
	h := nats.Header{}
	h.Set(processor.HeaderSubject, "orders.created")
	h.Set(processor.HeaderStream, app.Config().Stream.Name)
	h.Set(processor.HeaderSequence, "999")
	h.Set(processor.HeaderTrimmed, "payload 2000000 bytes")
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq." + p.DeadLetterStream + ".orders.created", Header: h})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postReplay(t, app, ack.Sequence); code == 200 || code == 404 || !strings.Contains(body, "#999 cannot be read") {
		t.Errorf("replay of a trimmed dead letter without its original = %d %s, want a refusal naming the original", code, body)
	}
}

// postReplay replays dead letter seq through the admin API: its status and body.
func postReplay(t *testing.T, app *orderstore.Appliance, seq uint64) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/v1/dlq/%d/replay", app.AdminAddr(), seq), nil)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// A replay whose id another event already holds (a program's Publish may take it) keeps its dead
// letter and answers 409 naming that event.
func TestReplayWhoseIDIsTakenAnswers409(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	dlq := app.Config().Processor.DeadLetterStream
	h := nats.Header{}
	h.Set(processor.HeaderSubject, "orders.created")
	h.Set(processor.HeaderStream, app.Config().Stream.Name)
	dl, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq." + dlq + ".orders.created", Header: h, Data: []byte(`{"order_id":"r"}`)})
	if err != nil {
		t.Fatal(err)
	}
	taker, err := app.Publish(ctx, "orders.created", []byte(`{"order_id":"t"}`), jetstream.WithMsgID(processor.ReplayMsgIDPrefix(dlq)+strconv.FormatUint(dl.Sequence, 10)))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postReplay(t, app, dl.Sequence); code != http.StatusConflict || !strings.Contains(body, fmt.Sprintf("#%d", taker.Sequence)) {
		t.Errorf("replay of a dead letter whose id event %d holds = %d %s, want 409 naming it", taker.Sequence, code, body)
	}
	if dls, _, err := app.DeadLetters(ctx, 1, 10); err != nil || len(dls) != 1 {
		t.Errorf("dead letters after the refused replay: %d, %v; want it kept", len(dls), err)
	}
}

// A dead letter names the subject its replay publishes on, and whoever may write the dead letters
// chooses it: the anonymous loopback default, which the durable guard keeps off orderstore's
// consumer, wrote a replay to the JetStream API that deleted the consumer (the appliance stopped)
// or purged the stream, with orderstore's own rights. Such a replay, and a Publish on a subject
// that is none of the stream's, is now refused before anything is sent: 400 naming the subject,
// the dead letter kept. A replay to a stream subject still works.
func TestReplayAndPublishOnlyOnStreamSubjects(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	cfg := app.Config()
	js := embeddedtest.JetStream(t, app) // anonymous
	if err := js.DeleteConsumer(ctx, cfg.Stream.Name, cfg.Processor.Durable); err == nil {
		t.Fatal("the durable guard let an anonymous client delete the processor's consumer")
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"kept"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error { _, err := app.Order(ctx, "kept"); return err })
	replay := func(seq uint64) (int, string) {
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/v1/dlq/%d/replay", app.AdminAddr(), seq), nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	deadLetter := func(subject, data string) uint64 {
		h := nats.Header{}
		h.Set(processor.HeaderSubject, subject)
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq." + cfg.Processor.DeadLetterStream + ".x", Header: h, Data: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for _, c := range []struct{ subject, data, why string }{
		{"$JS.API.STREAM.PURGE." + cfg.Stream.Name, "{}", "none of stream"},
		{"$JS.API.CONSUMER.DELETE." + cfg.Stream.Name + "." + cfg.Processor.Durable, "", "none of stream"},
		{"$KV." + cfg.Processor.ProjectionBucket + ".p9", `{"order_id":"p9"}`, "none of stream"},
		{"orders.*", `{"order_id":"w"}`, "wildcard"},
	} {
		seq := deadLetter(c.subject, c.data)
		if code, body := replay(seq); code != 400 || !strings.Contains(body, c.subject) || !strings.Contains(body, c.why) {
			t.Errorf("replay to %s = %d %s, want 400 naming it and %q", c.subject, code, body, c.why)
		}
		if dls, _, err := app.DeadLetters(ctx, seq, 1); err != nil || len(dls) != 1 || dls[0].Sequence != seq {
			t.Errorf("dead letter to %s after its refused replay: %+v %v", c.subject, dls, err)
		}
	}
	for _, subject := range []string{"$KV." + cfg.Processor.ProjectionBucket + ".p9", "dlq." + cfg.Processor.DeadLetterStream + ".x",
		"$JS.API.STREAM.PURGE." + cfg.Stream.Name, "orders.>"} {
		_, err := app.Publish(ctx, subject, []byte(`{"order_id":"p9"}`))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.Code != 400 || !strings.Contains(api.Description, subject) {
			t.Errorf("Publish on %s: %v, want a 400 naming it", subject, err)
		}
	}
	if _, err := js.Consumer(ctx, cfg.Stream.Name, cfg.Processor.Durable); err != nil {
		t.Errorf("the processor's consumer after the refused replays: %v", err)
	}
	if st, err := js.Stream(ctx, cfg.Stream.Name); err != nil || st.CachedInfo().State.Msgs != 1 {
		t.Errorf("stream after the refused replays: %v, want its one event", err)
	}
	if kv, err := js.KeyValue(ctx, cfg.Processor.ProjectionBucket); err != nil {
		t.Error(err)
	} else if _, err := kv.Get(ctx, "p9"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("key p9, written only by refused replays and Publish: %v, want not found", err)
	}
	if dls, _, err := app.DeadLetters(ctx, 1, 100); err != nil || len(dls) != 4 {
		t.Errorf("dead letters: %d %v, want the 4 refused replays' (none from Publish)", len(dls), err)
	}

	seq := deadLetter("orders.created", `{"order_id":"replayed"}`)
	if code, body := replay(seq); code != 200 {
		t.Fatalf("replay to orders.created = %d %s", code, body)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error { _, err := app.Order(ctx, "replayed"); return err })
}
