package orderstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
)

// historyOracle reads the stream: every valid event per order, in stream
// order.
func historyOracle(t *testing.T, js jetstream.JetStream) map[string][]testkit.OracleEvent {
	t.Helper()
	return streamOracle(t, js, "ORDER_EVENTS")
}

// An order's history and its state as of random points, over HTTP and the
// library, equal an independent fold of the stream, before and after a
// restart; hostile paging and points get a clear 4xx.
func TestOrderHistoryMatchesTheStream(t *testing.T) {
	store := t.TempDir()
	cfgFn := func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Admin.Listen = "127.0.0.1:0"
	}
	app := orderstoretest.Start(t, cfgFn)
	r := rand.New(rand.NewPCG(9, 9))
	ids := []string{"hot/1", "A/b=c_d-e.f", "o-2", "o-3", "o-4"}
	publish := func(app *orderstore.Appliance, n int) {
		js := embeddedtest.JetStream(t, app)
		for i := range n {
			id := ids[r.IntN(len(ids))]
			if r.IntN(2) == 0 {
				id = "hot/1"
			}
			typ := []string{"created", "paid", "shipped"}[r.IntN(3)]
			body := fmt.Sprintf(`{"order_id":%q,"status":"s-%d","i":%d}`, id, i, i)
			if _, err := js.Publish(context.Background(), "orders."+typ, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		embeddedtest.WaitFor(t, 60*time.Second, func() error {
			l, err := app.Lag(context.Background())
			if err != nil {
				return err
			}
			if l.Pending+uint64(l.AckPending) != 0 {
				return fmt.Errorf("lag %+v", l)
			}
			return nil
		})
	}
	check := func(app *orderstore.Appliance) {
		t.Helper()
		want := historyOracle(t, embeddedtest.JetStream(t, app))
		for _, id := range ids {
			evs := want[id]
			if len(evs) == 0 {
				continue
			}
			var got []json.RawMessage
			for from := 0; ; {
				var page struct {
					Total, Next int
					Events      []json.RawMessage
				}
				path := fmt.Sprintf("/v1/orders/%s/events?from=%d&limit=%d&states=true", url.PathEscape(id), from, 1+r.IntN(150))
				if code := adminJSON(t, app, path, &page); code != 200 {
					t.Fatalf("GET %s: %d", path, code)
				}
				if page.Total != len(evs) {
					t.Fatalf("%s: total %d, the stream holds %d of its events", id, page.Total, len(evs))
				}
				got = append(got, page.Events...)
				if page.Next == 0 {
					break
				}
				from = page.Next
			}
			if len(got) != len(evs) {
				t.Fatalf("%s: %d events listed, the stream holds %d", id, len(got), len(evs))
			}
			for i, raw := range got {
				var e struct {
					Seq      uint64
					Retained bool
					Subject  string
					Data     json.RawMessage
					State    *orderstore.Order
				}
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatal(err)
				}
				w := testkit.FoldOrder(id, evs[:i+1])
				w.UpdatedAt = w.LastEventAt
				var data bytes.Buffer
				if err := json.Compact(&data, e.Data); err != nil {
					t.Fatal(err)
				}
				if e.Seq != evs[i].Seq || !e.Retained || e.Subject != evs[i].Subject || data.String() != string(evs[i].Data) || e.State == nil || *e.State != w {
					t.Fatalf("%s event %d: %s\nwant seq %d %s %s, state %+v\n got state %+v", id, i, raw, evs[i].Seq, evs[i].Subject, evs[i].Data, w, e.State)
				}
			}
			for range 5 {
				k := r.IntN(len(evs))
				w := testkit.FoldOrder(id, evs[:k+1])
				w.UpdatedAt = w.LastEventAt
				for _, q := range []string{fmt.Sprintf("as_of_seq=%d", evs[k].Seq), "as_of=" + url.QueryEscape(evs[k].Time.Format(time.RFC3339Nano))} {
					var o struct {
						orderstore.Order
						AsOf struct {
							Events   int
							Complete bool
						} `json:"as_of"`
					}
					path := "/v1/orders/" + url.PathEscape(id) + "?" + q
					if code := adminJSON(t, app, path, &o); code != 200 {
						t.Fatalf("GET %s: %d", path, code)
					}
					if o.Order != w || o.AsOf.Events != k+1 || !o.AsOf.Complete {
						t.Fatalf("GET %s:\n got %+v %+v\nwant %+v", path, o.Order, o.AsOf, w)
					}
				}
				st, err := app.OrderAsOf(context.Background(), id, orderstore.AsOf{Seq: evs[k].Seq})
				if err != nil || st.Order != w {
					t.Fatalf("OrderAsOf(%s, %d) = %+v, %v; want %+v", id, evs[k].Seq, st.Order, err, w)
				}
				// A fold of one's own code sees the same events.
				var seen []uint64
				if _, err := app.FoldOrderEvents(context.Background(), id, orderstore.AsOf{Seq: evs[k].Seq}, func(ev processor.Event) error {
					if ev.OrderID != id || string(ev.Data) != string(evs[len(seen)].Data) {
						return fmt.Errorf("event %d: %+v", len(seen), ev)
					}
					seen = append(seen, ev.Sequence)
					return nil
				}); err != nil || len(seen) != k+1 || seen[k] != evs[k].Seq {
					t.Fatalf("FoldOrderEvents(%s, %d): %v, saw %v", id, evs[k].Seq, err, seen)
				}
			}
			// Before its first event it did not exist.
			if _, err := app.OrderAsOf(context.Background(), id, orderstore.AsOf{Time: evs[0].Time.Add(-time.Nanosecond)}); !errors.Is(err, orderstore.ErrNotFound) {
				t.Fatalf("%s as of before its first event: %v", id, err)
			}
		}
	}
	publish(app, 700)
	check(app)

	// Hostile requests: a clear 4xx each, and the appliance keeps serving.
	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/orders/hot%2F1/events?from=-1", 400},
		{"/v1/orders/hot%2F1/events?from=x", 400},
		{"/v1/orders/hot%2F1/events?limit=0", 400},
		{"/v1/orders/hot%2F1/events?limit=1001", 400},
		{"/v1/orders/hot%2F1/events?limit=99999999999999999999999", 400},
		{"/v1/orders/hot%2F1/events?states=maybe", 400},
		{"/v1/orders/hot%2F1/events?from=99999999", 200},
		{"/v1/orders/hot%2F1?as_of=yesterday", 400},
		{"/v1/orders/hot%2F1?as_of_seq=0", 400},
		{"/v1/orders/hot%2F1?as_of_seq=-5", 400},
		{"/v1/orders/hot%2F1?as_of=1999-01-01T00:00:00Z", 404},
		// An id no order can have is a bad request.
		{"/v1/orders/" + strings.Repeat("x", 5000) + "/events", 400},
		{"/v1/orders/a%20b/events", 400},
		{"/v1/orders/a..b?as_of_seq=3", 400},
		{"/v1/orders/nobody/events", 404},
		{"/v1/orders/nobody/dlq", 200},
		{"/v1/orders/%FF%FE/dlq", 400},
	} {
		var answer map[string]any
		if code := adminJSON(t, app, c.path, &answer); code != c.code || code >= 400 && answer["error"] == nil {
			t.Errorf("GET %s: %d %v, want %d with an error", c.path[:min(len(c.path), 80)], code, answer, c.code)
		}
	}

	// Restart on the same store: the same answers, and more events.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, cfgFn)
	check(app)
	publish(app, 300)
	check(app)
}

// A config that gives the stream, the dead letters and the projection all
// of max_file_store (valid before the history index existed) still
// starts, without the index; the history calls say why.
func TestNoRoomForTheHistoryIndex(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.JetStream.MaxFileStore = 1 << 30
		c.Stream.MaxBytes = 1<<30 - c.Processor.DeadLetterMaxBytes - c.Processor.ProjectionMaxBytes
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"n-1"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		_, err := app.Order(ctx, "n-1")
		return err
	})
	if _, err := app.OrderEvents(ctx, "n-1", 0, 10); !errors.Is(err, orderstore.ErrNoHistory) || !strings.Contains(err.Error(), "max_file_store") {
		t.Errorf("history without room for the index: %v", err)
	}
	if _, err := js.Stream(ctx, "KV_ORDERS_HISTORY"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the index's stream: %v, want none", err)
	}
}

// countingFold is a library user's own handler: how many events of each
// order it applied, and which.
type countingFold struct {
	mu   sync.Mutex
	seqs map[string][]uint64
}

func (h *countingFold) Handle(_ context.Context, ev processor.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Contains(h.seqs[ev.OrderID], ev.Sequence) {
		return processor.ErrDuplicate
	}
	h.seqs[ev.OrderID] = append(h.seqs[ev.OrderID], ev.Sequence)
	return nil
}

// A custom Processor.Handler gets an order's history and its state as of
// a moment, through the library and HTTP: the projection runs beside it
// and keeps the index (it used to answer ErrNoHistory). The history lists
// what the handler applied; FoldOrderEvents hands the handler's own fold
// the same events; a restart keeps it all.
func TestHistoryWithACustomHandler(t *testing.T) {
	store := t.TempDir()
	h := &countingFold{seqs: map[string][]uint64{}}
	cfgFn := func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Admin.Listen = "127.0.0.1:0"
		c.Processor.Handler = h
	}
	app := orderstoretest.Start(t, cfgFn)
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	for i := range 120 {
		body := fmt.Sprintf(`{"order_id":"c-%d","status":"s-%d"}`, i%3, i)
		if _, err := js.Publish(ctx, "orders.paid", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if n := len(h.seqs["c-0"]) + len(h.seqs["c-1"]) + len(h.seqs["c-2"]); n != 120 {
			return fmt.Errorf("the handler applied %d of 120", n)
		}
		return nil
	})
	want := historyOracle(t, js)
	check := func(app *orderstore.Appliance) {
		t.Helper()
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			l, err := app.Lag(ctx)
			if err != nil {
				return err
			}
			if l.Pending+uint64(l.AckPending) != 0 {
				return fmt.Errorf("lag %+v", l)
			}
			return nil
		})
		for id, evs := range want {
			page, err := app.OrderEvents(ctx, id, 0, 1000)
			if err != nil {
				t.Fatalf("history of %s: %v", id, err)
			}
			var got []uint64
			for _, e := range page.Events {
				got = append(got, e.Sequence)
			}
			h.mu.Lock()
			applied := slices.Sorted(slices.Values(h.seqs[id]))
			h.mu.Unlock()
			if !slices.Equal(got, applied) || len(got) != len(evs) {
				t.Fatalf("history of %s lists %v; the handler applied %v; the stream holds %d", id, got, applied, len(evs))
			}
			mid := evs[len(evs)/2]
			st, err := app.OrderAsOf(ctx, id, orderstore.AsOf{Seq: mid.Seq})
			if err != nil {
				t.Fatalf("%s as of %d: %v", id, mid.Seq, err)
			}
			if w := testkit.FoldOrder(id, evs[:len(evs)/2+1]); st.Order.Status != w.Status || st.Order.Events != w.Events || !st.Complete {
				t.Errorf("%s as of %d: %+v, the fold %+v", id, mid.Seq, st, w)
			}
			// The handler's own fold of the same events: its count.
			n := 0
			if _, err := app.FoldOrderEvents(ctx, id, orderstore.AsOf{Seq: mid.Seq}, func(processor.Event) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != len(evs)/2+1 {
				t.Errorf("%s: the handler's fold up to %d got %d events, want %d", id, mid.Seq, n, len(evs)/2+1)
			}
			var httpPage struct{ Total int }
			if code := adminJSON(t, app, "/v1/orders/"+id+"/events", &httpPage); code != 200 || httpPage.Total != len(evs) {
				t.Errorf("GET /v1/orders/%s/events: %d, total %d, want 200 and %d", id, code, httpPage.Total, len(evs))
			}
		}
	}
	check(app)
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, cfgFn)
	check(app)
}
