package orderstore_test

// Integrity under hostile or overwhelming producers (docs/reliability.md,
// rows 5 and 7 to 10; /work/shared/notes/integrity-testing.md "Overload"):
// every publish on the stream's subjects goes through the ingest service in
// every durability mode, and every one of them is answered.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

var (
	// 50,000 events of 4 KB (200 MB) overflow what the ingest service
	// buffered before it answered 429s even under -race, where the
	// instrumented client cannot pipeline small events faster than the
	// service takes them; and they fit the service's own buffer (256 MiB)
	// whatever the machine. Larger floods by hand, e.g. without -race:
	// -integrity.flood 400000 -integrity.flood-bytes 1000.
	integrityFlood      = flag.Int("integrity.flood", 50_000, "requests TestEveryPublishAnswered pipelines on one connection")
	integrityFloodBytes = flag.Int("integrity.flood-bytes", 4000, "bytes of each event of TestEveryPublishAnswered's flood")
)

// hungAfter bounds a test's wait for an answer only to fail a hung test with a clear message, not
// to assert how fast answers come: on a loaded machine one may take long, never this long.
const hungAfter = 2 * time.Minute

// integrityModes are the durability modes: every test of the ingest
// service's promises runs in each.
var integrityModes = []struct {
	name string
	set  func(*orderstore.Config)
}{
	{orderstore.DurabilityGroupCommit, func(c *orderstore.Config) { c.JetStream.Durability = orderstore.DurabilityGroupCommit }},
	{orderstore.DurabilityAlways, func(c *orderstore.Config) { c.JetStream.Durability = orderstore.DurabilityAlways }},
	{orderstore.DurabilityInterval, func(c *orderstore.Config) {
		c.JetStream.Durability, c.JetStream.SyncInterval = orderstore.DurabilityInterval, 200*time.Millisecond
	}},
}

// integrityStatus is the part of /v1/status these tests read (decoded
// loosely, so that the file compiles against older trees too).
type integrityStatus struct {
	Ingest *struct {
		Acked   uint64 `json:"acked"`
		Waiting int64  `json:"waiting"`
	} `json:"ingest"`
	Guard map[string]uint64 `json:"guard"`
}

// integrityGetStatus reads /v1/status through the appliance's handler (no
// listener needed); safe to call from any goroutine.
func integrityGetStatus(app *orderstore.Appliance) (integrityStatus, error) {
	var st integrityStatus
	req := httptest.NewRequest("GET", "http://127.0.0.1/v1/status", nil)
	if tok := app.Config().Admin.Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		return st, fmt.Errorf("/v1/status = %d %s", rec.Code, rec.Body)
	}
	return st, json.Unmarshal(rec.Body.Bytes(), &st)
}

// integrityPost is POST /v1/events/{typ} on the admin listener; it returns
// the status and the JSON body.
func integrityPost(t *testing.T, app *orderstore.Appliance, typ, body, idemKey string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+app.AdminAddr()+"/v1/events/"+typ, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := app.Config().Admin.Token; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/events/%s: %v", typ, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

// integrityConnect is a TCP client connection (anonymous without user and
// password), closed when the test ends.
func integrityConnect(t *testing.T, app *orderstore.Appliance, user, password string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if user != "" {
		opts = append(opts, nats.UserInfo(user, password))
	}
	nc, err := nats.Connect(app.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect %q: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// integrityMsgs is how many events ORDER_EVENTS holds and its last
// sequence.
func integrityMsgs(t *testing.T, js jetstream.JetStream) (msgs, last uint64) {
	t.Helper()
	s, err := js.Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.LastSeq
}

// integrityHeaderSize is a header's size on the wire ("NATS/1.0\r\n",
// "Key: value\r\n" each, "\r\n"), as the stream counts it against
// max_msg_size. What a direct get adds to a stored event's headers (its
// stream, sequence, subject and time) is not counted.
func integrityHeaderSize(h nats.Header) int {
	n := 0
	for k, vs := range h {
		switch k {
		case "Nats-Stream", "Nats-Sequence", "Nats-Subject", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence":
			continue
		}
		if n == 0 {
			n = len("NATS/1.0\r\n\r\n")
		}
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// floodResult counts the answers to a flood of pipelined requests.
type floodResult struct {
	sent, acks, errs, other, twice, unanswered int64
	codes                                      map[string]int64 // error answers by code ("429", "503", "status 503", ...)
}

func (r floodResult) String() string {
	keys := make([]string, 0, len(r.codes))
	for k := range r.codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s:%d", k, r.codes[k])
	}
	return fmt.Sprintf("sent %d: acked %d, errors %d (%s ), other answers %d, answered twice %d, unanswered %d",
		r.sent, r.acks, r.errs, b.String(), r.other, r.twice, r.unanswered)
}

// flood pipelines n requests on subject over nc, each with a reply subject
// of its own under one wildcard inbox subscription without pending limits,
// as fast as nc takes them. It then waits for a barrier on each connection
// (see below) and counts the answers. paused is called once, when the
// flood is over (every answer owed has been sent): what else publishes
// stops then.
func flood(t *testing.T, conns []*nats.Conn, subject string, n int, payload []byte, paused func()) floodResult {
	t.Helper()
	answered := make([]atomic.Bool, n)
	var acks, errs, other, twice, total atomic.Int64
	var mu sync.Mutex
	codes := map[string]int64{}
	inbox := nats.NewInbox()
	onAnswer := func(m *nats.Msg) {
		_, last, _ := strings.Cut(m.Subject[len(inbox)+1:], ".")
		i, err := strconv.Atoi(last)
		if err != nil || i < 0 || i >= n {
			other.Add(1)
			return
		}
		if answered[i].Swap(true) {
			twice.Add(1)
			return
		}
		total.Add(1)
		code := ""
		if s := m.Header.Get("Status"); s != "" {
			code = "status " + s
		} else {
			var a struct {
				Stream string `json:"stream"`
				Seq    uint64 `json:"seq"`
				Error  *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			switch err := json.Unmarshal(m.Data, &a); {
			case err != nil:
				other.Add(1)
				return
			case a.Error != nil:
				code = strconv.Itoa(a.Error.Code)
			case a.Stream == "ORDER_EVENTS" && a.Seq > 0:
				acks.Add(1)
				return
			default:
				other.Add(1)
				return
			}
		}
		errs.Add(1)
		mu.Lock()
		codes[code]++
		mu.Unlock()
	}
	var subs []*nats.Subscription
	for c, nc := range conns {
		sub, err := nc.Subscribe(inbox+"."+strconv.Itoa(c)+".*", onAnswer)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
		defer sub.Unsubscribe()
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Request i goes on connection c = i mod len(conns), with the reply
	// subject inbox.c.i, all of them at once.
	t0 := time.Now()
	sendErrs := make(chan error, len(conns))
	for c, nc := range conns {
		prefix := inbox + "." + strconv.Itoa(c) + "."
		go func() {
			var reply []byte
			for i := c; i < n; i += len(conns) {
				reply = strconv.AppendInt(append(reply[:0], prefix...), int64(i), 10)
				if err := nc.PublishRequest(subject, string(reply), payload); err != nil {
					sendErrs <- fmt.Errorf("request %d of %d: %v (the client's connection: %v)", i, n, err, nc.LastError())
					return
				}
			}
			if err := nc.FlushTimeout(2 * time.Minute); err != nil {
				sendErrs <- fmt.Errorf("flush after the requests of connection %d: %v", c, err)
				return
			}
			sendErrs <- nil
		}()
	}
	for range conns {
		if err := <-sendErrs; err != nil {
			t.Fatal(err)
		}
	}
	sentIn := time.Since(t0)
	defer func() {
		t.Logf("flood: %d requests sent in %s, answers stopped after %s", n, sentIn.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	}()
	// A barrier per connection: a request published after the flood on
	// the same connection is stored after every flood event of it, and
	// acks leave in store order (group commit answers a round's acks in
	// the order it parked them; refusals go at once). Once the barrier's
	// ack has come, every answer owed to that connection has been sent.
	for c, nc := range conns {
		embeddedtest.WaitFor(t, 10*time.Minute, func() error {
			msg, err := nc.Request(subject, []byte(`{"order_id":"flood-barrier"}`), 5*time.Minute)
			if err != nil {
				return fmt.Errorf("barrier of flood connection %d: %v", c, err)
			}
			var a struct {
				Seq   uint64 `json:"seq"`
				Error *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(msg.Data, &a); err != nil || a.Error != nil || a.Seq == 0 {
				return fmt.Errorf("barrier of flood connection %d answered %q", c, msg.Data)
			}
			return nil
		})
	}
	paused()
	// Answers on their way to the flooder: a flush brings what nats holds
	// for its connections into their subscriptions.
	for c, nc := range conns {
		if err := nc.FlushTimeout(hungAfter); err != nil {
			t.Fatalf("flush of flood connection %d: %v", c, err)
		}
	}
	embeddedtest.WaitFor(t, hungAfter, func() error {
		for _, sub := range subs {
			if msgs, _, err := sub.Pending(); err != nil || msgs != 0 {
				return fmt.Errorf("%d answers not read yet (%v)", msgs, err)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	r := floodResult{sent: int64(n), acks: acks.Load(), errs: errs.Load(), other: other.Load(), twice: twice.Load(),
		unanswered: int64(n) - total.Load(), codes: map[string]int64{}}
	for k, v := range codes {
		r.codes[k] = v
	}
	return r
}

// Row 5: one connection pipelines far more requests than the appliance
// can take at once. Every one gets an answer (an ack or a 429), none
// twice, and a well-behaved producer in another account publishing during
// the flood gets its acks: admission's line holds the flooder's
// connection, one connection after another, so the newcomer waits behind
// at most one publish of each.
// The flooder is an anonymous client (no users configured; the other
// account is orderstore's own, HTTP ingest's) and a producer user (p1,
// with p2 the well-behaved one).
func TestEveryPublishAnswered(t *testing.T) {
	n := *integrityFlood
	payload := []byte(`{"order_id":"flood","pad":"` + strings.Repeat("x", max(0, *integrityFloodBytes-30)) + `"}`)
	// The ingest path alone: the processor would only compete for the CPU.
	noProcessor := func(c *orderstore.Config) { c.Processor.Enabled = false }
	check := func(t *testing.T, app *orderstore.Appliance, r floodResult, wellAcked int64, wellErrs []string) {
		t.Helper()
		t.Logf("flood: %s", r)
		t.Logf("well-behaved producer during the flood: %d acked, %d refused", wellAcked, len(wellErrs))
		st, err := integrityGetStatus(app)
		if err != nil {
			t.Fatal(err)
		}
		// Every publish answered, after flood's barrier: an answer
		// missing then was lost.
		if r.unanswered != 0 {
			t.Errorf("%d of %d pipelined publishes never got an answer: every publish must be answered (an ack, or an error saying what to do)", r.unanswered, r.sent)
		}
		if r.twice != 0 || r.other != 0 {
			t.Errorf("%d answered twice, %d answers neither an ack nor an error", r.twice, r.other)
		}
		for code := range r.codes {
			switch code {
			case "429", "status 429": // admission's line, or nats' own queue limit
			default:
				t.Errorf("%d publishes answered %s, want only acks or 429 (the stream is behind)", r.codes[code], code)
			}
		}
		// Admission's 429s are counted where the operator sees them.
		if got := st.Guard["overloaded"]; got < uint64(r.codes["429"]) {
			t.Errorf("%d answered 429 by admission, /v1/status guard.overloaded %d", r.codes["429"], got)
		}
		if wellAcked == 0 || len(wellErrs) > 0 {
			t.Errorf("the well-behaved producer in another account got %d acks and %d errors during the flood (first: %v): want every publish acked", wellAcked, len(wellErrs), first(wellErrs))
		}
	}
	// The well-behaved producer publishes one event at a time until the
	// flood is over.
	wellBehaved := func(publish func(i int) error) (stop func() (int64, []string)) {
		var acked atomic.Int64
		var errs []string
		var slowest time.Duration
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				t0 := time.Now()
				err := publish(i)
				took := time.Since(t0)
				slowest = max(slowest, took)
				if err != nil {
					errs = append(errs, fmt.Sprintf("%v (after %s)", err, took.Round(time.Millisecond)))
				} else {
					acked.Add(1)
				}
			}
		}()
		return func() (int64, []string) {
			close(done)
			<-finished
			t.Logf("well-behaved producer: its slowest answer took %s", slowest.Round(time.Millisecond))
			return acked.Load(), errs
		}
	}

	// ackedPublish publishes one event at a time through js, each waiting for
	// its answer (however long a loaded machine takes: hungAfter).
	ackedPublish := func(js jetstream.JetStream) func(i int) error {
		return func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
			defer cancel()
			_, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"calm-%d"}`, i%10))
			if ctx.Err() != nil {
				return fmt.Errorf("no answer after %s, hung or lost: %w", hungAfter, err)
			}
			return err
		}
	}

	t.Run("anonymous", func(t *testing.T) {
		app := orderstoretest.Start(t, noProcessor, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
		nc, _ := integrityConnect(t, app, "", "")
		hc := &http.Client{Timeout: hungAfter} // only a hung request fails on time
		stop := wellBehaved(func(i int) error {
			body := fmt.Sprintf(`{"order_id":"calm-%d"}`, i%10)
			req, _ := http.NewRequest("POST", "http://"+app.AdminAddr()+"/v1/events/created", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != 201 {
				b, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("HTTP ingest %d: %s", resp.StatusCode, b)
			}
			return nil
		})
		var acked int64
		var errs []string
		r := flood(t, []*nats.Conn{nc}, "orders.created", n, payload, func() { acked, errs = stop() })
		check(t, app, r, acked, errs)
	})

	t.Run("producers", func(t *testing.T) {
		app := orderstoretest.Start(t, securedConfig, noProcessor)
		nc, _ := integrityConnect(t, app, "p1", p1Password)
		_, p2 := integrityConnect(t, app, "p2", p2Password)
		stop := wellBehaved(ackedPublish(p2))
		var acked int64
		var errs []string
		r := flood(t, []*nats.Conn{nc}, "orders.created", n, payload, func() { acked, errs = stop() })
		check(t, app, r, acked, errs)
	})

	// A producer pipelining plain publishes (no reply subject: nobody to
	// answer) must not starve another account either: the line holds the
	// flooder's connection as it holds a requester's.
	t.Run("plain", func(t *testing.T) {
		app := orderstoretest.Start(t, securedConfig, noProcessor)
		nc, js1 := integrityConnect(t, app, "p1", p1Password)
		_, p2 := integrityConnect(t, app, "p2", p2Password)
		stop := wellBehaved(ackedPublish(p2))
		for range n {
			if err := nc.Publish("orders.created", payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.FlushTimeout(5 * time.Minute); err != nil {
			t.Fatal(err)
		}
		// The flooder's own acked publish comes after its plain ones on
		// its connection: once it is acked, the service has taken them.
		embeddedtest.WaitFor(t, 2*hungAfter, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
			defer cancel()
			_, err := js1.Publish(ctx, "orders.created", []byte(`{"order_id":"after-the-flood"}`))
			return err
		})
		acked, errs := stop()
		st, err := integrityGetStatus(app)
		if err != nil {
			t.Fatal(err)
		}
		msgs, _ := integrityMsgs(t, orderstore.InternalJetStream(app))
		t.Logf("plain flood of %d: %d events stored in all; guard %v", n, msgs, st.Guard)
		if acked == 0 || len(errs) > 0 {
			t.Errorf("the well-behaved producer in another account got %d acks and %d errors during a flood of plain publishes (first: %v): want every publish acked", acked, len(errs), first(errs))
		}
	})

	// Many connections of one producer pipelining at once: the stream falls
	// behind what they send, the line holds each of them in turn, and the
	// well-behaved producer in another account is never refused for it.
	connections := func(t *testing.T, n int, payload []byte) {
		app := orderstoretest.Start(t, securedConfig, noProcessor)
		conns := make([]*nats.Conn, 8)
		for i := range conns {
			conns[i], _ = integrityConnect(t, app, "p1", p1Password)
		}
		_, p2 := integrityConnect(t, app, "p2", p2Password)
		stop := wellBehaved(ackedPublish(p2))
		var acked int64
		var errs []string
		r := flood(t, conns, "orders.created", n, payload, func() { acked, errs = stop() })
		check(t, app, r, acked, errs)
		st, err := integrityGetStatus(app)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("guard %v", st.Guard)
	}
	t.Run("connections", func(t *testing.T) { connections(t, n, payload) })
	// The same with large events: the line's byte bound (lineBytes) holds
	// them back before its count does.
	t.Run("large-events", func(t *testing.T) {
		large := []byte(`{"order_id":"flood","pad":"` + strings.Repeat("x", 500_000) + `"}`)
		connections(t, max(1, n/40), large)
	})
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// Row 7: a subject with a wildcard token names no single event type. In
// every durability mode a publish on one gets a 400-class JetStream API
// error and nothing is stored; HTTP ingest refuses such a type with a 4xx.
func TestWildcardSubjectsRefused(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, mode.set, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
			nc, js := integrityConnect(t, app, "", "")
			ctx := context.Background()
			for _, subj := range []string{"orders.*", "orders.>", "orders.a.*", "orders.*.b", "orders.a.>"} {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ack, err := js.Publish(pctx, subj, []byte(`{"order_id":"wild"}`))
				cancel()
				var apiErr *jetstream.APIError
				if !errors.As(err, &apiErr) || apiErr.Code < 400 || apiErr.Code >= 500 {
					t.Errorf("publish on %q: ack %+v, %v; want a 400-class JetStream API error", subj, ack, err)
				}
				// A plain publish (no reply) is not stored either.
				if err := nc.Publish(subj, []byte(`{"order_id":"wild-plain"}`)); err != nil {
					t.Fatal(err)
				}
			}
			for _, typ := range []string{"*", "%2A", "%3E", ">"} {
				if code, out := integrityPost(t, app, typ, `{"order_id":"wild-http"}`, ""); code < 400 || code >= 500 {
					t.Errorf("POST /v1/events/%s = %d %v, want a 4xx", typ, code, out)
				}
			}
			// The plain publishes went before this one on the same
			// connection: once it is acked, they have been taken.
			ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"tame"}`))
			if err != nil {
				t.Fatal(err)
			}
			ops := embeddedtest.JetStream(t, app)
			if msgs, last := integrityMsgs(t, ops); msgs != 1 || ack.Sequence != 1 || last != 1 {
				s, _ := ops.Stream(ctx, "ORDER_EVENTS")
				var stored []string
				for seq := uint64(1); seq <= last && len(stored) < 20; seq++ {
					if m, err := s.GetMsg(ctx, seq); err == nil {
						stored = append(stored, m.Subject)
					}
				}
				t.Errorf("the stream holds %d events (last %d, the valid one acked as %d): %q; want only the valid one", msgs, last, ack.Sequence, stored)
			}
		})
	}
}

// Row 8: a Nats-Msg-Id is a producer's own. Producer p1 using p2's id
// first does not make p2's event a duplicate; p2 repeating its own id is
// one; the same between HTTP ingest's Idempotency-Key and a NATS
// producer's id. In every durability mode.
func TestDedupeScopedToProducer(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, securedConfig, mode.set)
			_, p1 := integrityConnect(t, app, "p1", p1Password)
			_, p2 := integrityConnect(t, app, "p2", p2Password)
			ctx := context.Background()
			pub := func(who string, js jetstream.JetStream, order, id string) *jetstream.PubAck {
				t.Helper()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				ack, err := js.Publish(pctx, "orders.created", []byte(`{"order_id":"`+order+`"}`), jetstream.WithMsgID(id))
				if err != nil {
					t.Fatalf("%s publishing %s with id %q: %v", who, order, id, err)
				}
				return ack
			}
			// p1 takes p2's id first.
			hijack := pub("p1", p1, "d-hijack", "p2-order-1")
			if hijack.Duplicate {
				t.Fatalf("p1's first use of an id: %+v", hijack)
			}
			own := pub("p2", p2, "d-own", "p2-order-1")
			if own.Duplicate || own.Sequence == hijack.Sequence {
				t.Errorf("p2's event with its id, used by p1 before: %+v (p1's was %d); want stored, not a duplicate of p1's", own, hijack.Sequence)
			}
			again := pub("p2", p2, "d-own", "p2-order-1")
			if !again.Duplicate || again.Sequence != own.Sequence {
				t.Errorf("p2 repeating its own id: %+v, want a duplicate of %d", again, own.Sequence)
			}
			if p1again := pub("p1", p1, "d-hijack", "p2-order-1"); !p1again.Duplicate || p1again.Sequence != hijack.Sequence {
				t.Errorf("p1 repeating its id: %+v, want a duplicate of %d", p1again, hijack.Sequence)
			}

			// HTTP first, then a NATS producer with the same id.
			code, out := integrityPost(t, app, "created", `{"order_id":"d-http"}`, "key-1")
			if code != 201 {
				t.Fatalf("POST with Idempotency-Key key-1: %d %v", code, out)
			}
			httpSeq := out["seq"]
			if ack := pub("p1", p1, "d-nats", "key-1"); ack.Duplicate {
				t.Errorf("p1's event with the id HTTP ingest used: %+v, want stored, not a duplicate", ack)
			}
			if code, out := integrityPost(t, app, "created", `{"order_id":"d-http"}`, "key-1"); code != 200 || out["duplicate"] != true || out["seq"] != httpSeq {
				t.Errorf("POST repeating Idempotency-Key key-1: %d %v, want 200, a duplicate of %v", code, out, httpSeq)
			}
			// A NATS producer first, then HTTP with the same key.
			natsFirst := pub("p2", p2, "d-nats2", "key-2")
			if code, out := integrityPost(t, app, "created", `{"order_id":"d-http2"}`, "key-2"); code != 201 || out["seq"] == float64(natsFirst.Sequence) {
				t.Errorf("POST with Idempotency-Key key-2, which p2 used before: %d %v; want 201, stored (p2's event is %d)", code, out, natsFirst.Sequence)
			}
			_, ops := connectAs(t, app, "ops", adminPassword)
			if msgs, _ := integrityMsgs(t, ops); msgs != 6 {
				t.Errorf("the stream holds %d events, want 6 (p1's, p2's, HTTP's and p1's key-1, p2's and HTTP's key-2)", msgs)
			}
		})
	}
}

// A producer's dedupe scope is its name's, not its place among the users: a retry after a restart
// with another user removed is still a duplicate.
func TestDedupeScopeKeepsWhenUsersChange(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for i, users := range [][]orderstore.User{
		{{Name: "p1", Password: p1Password, Role: orderstore.RoleProducer}, {Name: "p2", Password: p2Password, Role: orderstore.RoleProducer}},
		{{Name: "p2", Password: p2Password, Role: orderstore.RoleProducer}},
	} {
		app := orderstoretest.Start(t, func(c *orderstore.Config) { c.JetStream.StoreDir, c.Server.Users = dir, users })
		_, p2 := integrityConnect(t, app, "p2", p2Password)
		ack, err := p2.Publish(ctx, "orders.created", []byte(`{"order_id":"kept"}`), jetstream.WithMsgID("kept-1"))
		if err != nil || ack.Duplicate != (i == 1) || ack.Sequence != 1 {
			t.Errorf("start %d: p2's publish with id kept-1: %+v, %v; want sequence 1, a duplicate after the restart", i+1, ack, err)
		}
		if err := app.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Row 9: an event the stream would refuse for its size is refused up
// front with a 400 naming stream.max_msg_size, not a 503: one of exactly
// the max_payload nats advertises (it is larger than max_msg_size, room
// for the headers orderstore adds), and one a byte over what fits with
// the headers it is stored with; one that fits exactly is stored. In every
// durability mode.
func TestIngestRefusesUpFront(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, mode.set, func(c *orderstore.Config) { c.Processor.Enabled = false })
			nc, js := integrityConnect(t, app, "", "")
			ctx := context.Background()
			maxMsg := int(app.Config().Stream.MaxMsgSize)
			publish := func(data []byte) (*jetstream.PubAck, error) {
				pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				return js.Publish(pctx, "orders.created", data)
			}
			refused := func(what string, data []byte) {
				t.Helper()
				ack, err := publish(data)
				var apiErr *jetstream.APIError
				if !errors.As(err, &apiErr) || apiErr.Code < 400 || apiErr.Code >= 500 || !strings.Contains(apiErr.Description, "max_msg_size") {
					t.Errorf("%s (%d bytes): ack %+v, %v; want a 400-class API error naming max_msg_size", what, len(data), ack, err)
				}
			}
			// The headers an event without headers of its own is stored
			// with (orderstore's, e.g. the epoch).
			small, err := publish([]byte(`{"order_id":"small"}`))
			if err != nil {
				t.Fatal(err)
			}
			ops := embeddedtest.JetStream(t, app)
			s, err := ops.Stream(ctx, "ORDER_EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetMsg(ctx, small.Sequence)
			if err != nil {
				t.Fatal(err)
			}
			added := integrityHeaderSize(m.Header)
			t.Logf("advertised max_payload %d, stream.max_msg_size %d, headers added to an event %d bytes (%v)", nc.MaxPayload(), maxMsg, added, m.Header)

			refused("an event of the advertised max_payload", make([]byte, nc.MaxPayload()))
			fits := bytes.Repeat([]byte("f"), maxMsg-added)
			refused("an event a byte over what fits with its headers", append(fits, 'f'))
			ack, err := publish(fits)
			if err != nil {
				t.Fatalf("an event of max_msg_size minus the headers it is stored with (%d bytes): %v, want stored", len(fits), err)
			}
			got, err := s.GetMsg(ctx, ack.Sequence)
			if err != nil {
				t.Fatal(err)
			}
			if stored := len(got.Data) + integrityHeaderSize(got.Header); len(got.Data) != len(fits) || stored != maxMsg {
				t.Errorf("stored %d bytes of payload, %d with headers; want %d and %d", len(got.Data), stored, len(fits), maxMsg)
			}
			// The event carries headers of its own: they count too.
			h := nats.Header{"X-Producer": []string{strings.Repeat("h", 100)}}
			withHdr := fits[:len(fits)-integrityHeaderSize(h)+len("NATS/1.0\r\n\r\n")]
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Header: h, Data: withHdr}); err != nil {
				t.Errorf("an event with a header of its own, exactly max_msg_size as stored: %v, want stored", err)
			}
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err = js.PublishMsg(pctx, &nats.Msg{Subject: "orders.created", Header: h, Data: append(withHdr, 'h')})
			cancel()
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.Code < 400 || apiErr.Code >= 500 || !strings.Contains(apiErr.Description, "max_msg_size") {
				t.Errorf("an event with a header of its own, a byte over max_msg_size as stored: %v; want a 400-class API error naming max_msg_size", err)
			}
			if msgs, _ := integrityMsgs(t, ops); msgs != 3 {
				t.Errorf("the stream holds %d events, want 3 (the small one and the two that fit)", msgs)
			}
		})
	}
}

// Row 10: the disk fills while four producers each have many async
// publishes in flight. Every publish gets an answer, an ack or an error
// (what the stream dropped when its writes failed is answered once the
// store guard sees the failure): the test waits for every one, however
// long a loaded machine takes, and counts them. In every durability mode.
func TestFullDiskAnswersInFlight(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) {
			disk := tmpfs(t, 48<<20)
			cfg := orderstoretest.Config(t)
			mode.set(&cfg)
			cfg.JetStream.StoreDir = filepath.Join(disk, "store")
			cfg.JetStream.AllowLowDisk = true // the disk is smaller than max_file_store on purpose
			cfg.JetStream.DiskHeadroom = 1 << 20
			cfg.Processor.Enabled = false // the producers alone fill the disk
			ctx := context.Background()
			app, err := orderstore.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close(ctx)
			if err := os.WriteFile(filepath.Join(disk, "filler"), make([]byte, 40<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			const (
				producers = 4
				window    = 1000 // async publishes in flight per producer
			)
			type tally struct{ sent, acked, refused, timedOut, other int }
			var (
				mu      sync.Mutex
				total   tally
				samples []string
				seqs    []uint64    // acked
				full    atomic.Bool // a publish was refused: stop publishing
				wg      sync.WaitGroup
			)
			payload := fmt.Appendf(nil, `{"order_id":"full","pad":"%01000d"}`, 0)
			for p := range producers {
				nc, err := nats.Connect(app.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				// The client's ack timeout fails only a hung test: an answer that never comes.
				js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window), jetstream.WithPublishAsyncTimeout(hungAfter))
				if err != nil {
					t.Fatal(err)
				}
				futures := make(chan jetstream.PubAckFuture, 4*window)
				wg.Add(2)
				go func() { // publishes until the disk is full
					defer wg.Done()
					defer close(futures)
					for i := 0; i < 200_000 && !full.Load(); i++ {
						f, err := js.PublishAsync("orders.created", payload, jetstream.WithStallWait(hungAfter))
						if err != nil {
							t.Errorf("producer %d: publish %d: %v (it waits up to %s for one of its %d in flight to be answered)", p, i, err, hungAfter, window)
							return
						}
						futures <- f
					}
				}()
				go func() { // collects every answer
					defer wg.Done()
					var mine tally
					var mySamples []string
					var mySeqs []uint64
					for f := range futures {
						mine.sent++
						select {
						case ack := <-f.Ok():
							mine.acked++
							mySeqs = append(mySeqs, ack.Sequence)
							continue
						case err := <-f.Err():
							var apiErr *jetstream.APIError
							switch {
							case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
								mine.timedOut++
							case errors.As(err, &apiErr), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
								mine.refused++
								full.Store(true)
							default:
								mine.other++
							}
							if len(mySamples) < 3 {
								mySamples = append(mySamples, err.Error())
							}
						}
					}
					mu.Lock()
					total.sent += mine.sent
					total.acked += mine.acked
					total.refused += mine.refused
					total.timedOut += mine.timedOut
					total.other += mine.other
					samples = append(samples, mySamples...)
					seqs = append(seqs, mySeqs...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			t.Logf("%d producers, %d in flight each: %d sent, %d acked, %d refused, %d unanswered, %d other errors; e.g. %q",
				producers, window, total.sent, total.acked, total.refused, total.timedOut, total.other, samples)
			if total.refused == 0 {
				t.Fatal("no publish was refused: the disk never filled")
			}
			if total.timedOut != 0 || total.other != 0 || total.acked+total.refused != total.sent {
				t.Errorf("of %d publishes, %d got no answer within %s (lost), %d another error, %d an ack and %d a refusal: every publish must be answered, an ack or an error",
					total.sent, total.timedOut, hungAfter, total.other, total.acked, total.refused)
			}
			// An ack named an event the stream holds, each its own.
			_, last := integrityMsgs(t, embeddedtest.JetStream(t, app))
			seen := map[uint64]bool{}
			for _, seq := range seqs {
				if seen[seq] || seq == 0 || seq > last {
					t.Fatalf("ack of sequence %d: twice, or beyond the stream's last sequence %d", seq, last)
				}
				seen[seq] = true
			}
			select {
			case <-app.Done():
				t.Fatalf("orderstore stopped: %v", app.Wait())
			default:
			}
		})
	}
}

// While the stream's inbound queue is deep (a flood, see
// TestEveryPublishAnswered), admission holds each producer's connection in
// line; one that waited 2 s is answered 429 and nothing is stored, for
// every principal that publishes (the anonymous client, a producer whose
// permissions name only the stream's subjects, an admin) in every
// durability mode. The connection lives (a subject near nats' protocol
// line too), the status counts what was held back and answered, and once
// the queue drains the same connection is acked again.
func TestAdmissionLineAnswers429(t *testing.T) {
	for _, c := range []struct{ name, user, password, durability string }{
		{"anonymous", "", "", ""}, {"producer", "p1", p1Password, ""}, {"admin", "ops", adminPassword, ""},
		{"anonymous/always", "", "", "always"}, {"anonymous/interval", "", "", "interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mode := func(cfg *orderstore.Config) {
				if c.durability != "" {
					cfg.JetStream.Durability = c.durability
				}
				if c.durability == orderstore.DurabilityInterval {
					cfg.JetStream.SyncInterval = time.Second
				}
			}
			var app *orderstore.Appliance
			if c.user == "" {
				app = orderstoretest.Start(t, mode)
			} else {
				app = orderstoretest.Start(t, securedConfig, mode)
			}
			nc, js := integrityConnect(t, app, c.user, c.password)
			publish := func(subject string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := js.Publish(ctx, subject, []byte(`{"order_id":"p-1"}`), jetstream.WithRetryAttempts(0))
				return err
			}
			if err := publish("orders.created"); err != nil {
				t.Fatalf("before the line: %v", err)
			}
			before, _ := integrityMsgs(t, orderstore.InternalJetStream(app))
			orderstore.HoldAdmission(app, 2*time.Second)
			var apiErr *jetstream.APIError
			if err := publish("orders.created"); !errors.As(err, &apiErr) || apiErr.Code != 429 || !strings.Contains(apiErr.Description, "publish it again") {
				t.Fatalf("held: %v, want orderstore's 429", err)
			}
			long := "orders." + strings.Repeat("x", 3900)
			if err := publish(long); !errors.As(err, &apiErr) || apiErr.Code != 429 {
				t.Fatalf("held, a %d-byte subject: %v, want 429", len(long), err)
			}
			if !nc.IsConnected() {
				t.Fatalf("held, the producer's connection closed: %v", nc.LastError())
			}
			if after, _ := integrityMsgs(t, orderstore.InternalJetStream(app)); after != before {
				t.Errorf("the stream went from %d to %d events while every publish was answered 429", before, after)
			}
			st, err := integrityGetStatus(app)
			if err != nil {
				t.Fatal(err)
			}
			if st.Guard["overloaded"] != 2 || st.Guard["held_back"] < 2 {
				t.Errorf("status guard %v, want 2 overloaded and at least 2 held back", st.Guard)
			}
			orderstore.HoldAdmission(app, 0)
			if err := publish("orders.created"); err != nil {
				t.Fatalf("after the line: %v", err)
			}
		})
	}
}

// HTTP ingest waits in admission's line on a connection of its own: while POSTs wait there, /readyz
// answers 200 and an order read answers while the line holds every POST (they shared the
// connection whose reads then waited behind the line: /readyz 503), and once the line clears
// the POSTs are answered and stored again.
func TestHTTPIngestWaitLeavesReadsAnswered(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	ctx := context.Background()
	var written atomic.Int64 // requests sent in full
	trace := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written.Add(1) }})
	doWith := func(client *http.Client, method, path, body string) (int, string, error) {
		req, err := http.NewRequestWithContext(trace, method, "http://"+app.AdminAddr()+path, strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		if tok := app.Config().Admin.Token; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), err
	}
	do := func(method, path, body string) (int, string, error) { // on a new connection, as a probe is
		return doWith(&http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}, method, path, body)
	}
	if code, body, err := do("POST", "/v1/events/created", `{"order_id":"x"}`); code != 201 {
		t.Fatalf("POST before the line = %d %s %v", code, body, err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if code, body, _ := do("GET", "/readyz", ""); code != 200 {
			return fmt.Errorf("/readyz = %d %s", code, body)
		}
		_, err := app.Order(ctx, "x")
		return err
	})
	// The line holds the POSTs until released: a read that waited behind them would not be
	// answered at all (only its own timeout would end it), so no timing is compared. Twice as many
	// producers as the admin listener takes connections, each POSTing again on its keep-alive once
	// answered: those beyond orderstore's publishes in flight are answered 429 and their
	// connection closed (they held every one, and the reads waited).
	orderstore.HoldAdmission(app, time.Hour)
	var mu sync.Mutex
	var wrong []string
	held, posts, sent, stop := true, 2*admin.MaxConns, written.Load(), make(chan struct{})
	var wg sync.WaitGroup
	for i := range posts {
		wg.Go(func() {
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}} // keep-alives of its own
			defer client.CloseIdleConnections()
			for j := 0; ; j++ {
				code, body, err := doWith(client, "POST", "/v1/events/created", fmt.Sprintf(`{"order_id":"w-%d-%d"}`, i, j))
				if err != nil || code != 201 && code != 503 && code != 429 {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%d %s %v", code, body, err))
					mu.Unlock()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	release := func() {
		if held {
			held = false
			close(stop)
			orderstore.HoldAdmission(app, 0)
			wg.Wait()
		}
	}
	defer release()
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if n := orderstore.AdmissionWaiting(app); n == 0 {
			return errors.New("no POST waits in line")
		} else if n := written.Load() - sent; n < int64(posts) {
			return fmt.Errorf("%d of %d POSTs sent", n, posts)
		}
		return nil
	})
	if code, body, err := do("GET", "/readyz", ""); code != 200 {
		t.Fatalf("/readyz while POSTs wait in line = %d %s %v, want 200", code, body, err)
	}
	if code, body, err := do("GET", "/v1/orders/x", ""); code != 200 {
		t.Fatalf("GET /v1/orders/x while POSTs wait in line = %d %s %v, want 200", code, body, err)
	}
	if n := orderstore.AdmissionWaiting(app); n == 0 {
		t.Fatal("the line emptied while held: the reads proved nothing")
	}
	release()
	if len(wrong) > 0 {
		t.Errorf("%d POSTs in line answered %q..., want 201 once released (or 429, or 503: no ack in time)", len(wrong), wrong[:1])
	}
	if code, body, err := do("POST", "/v1/events/created", `{"order_id":"after"}`); code != 201 {
		t.Fatalf("POST after the line = %d %s %v", code, body, err)
	}
}
