package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// handlerGet is GET path on the appliance's admin handler (no listener
// needed); it decodes the JSON body into out and returns the status code.
func handlerGet(t *testing.T, app *orderstore.Appliance, path string, out any) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1"+path, nil))
	if out != nil && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, rec.Body)
		}
	}
	return rec.Code, rec.Body.Bytes()
}

// listOrders pages through q on the appliance, limit at a time.
func listOrders(t *testing.T, app *orderstore.Appliance, q orderstore.OrdersQuery) []orderstore.OrderSummary {
	t.Helper()
	var out []orderstore.OrderSummary
	for range 10_000 {
		p, err := app.Orders(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Orders...)
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
	t.Fatal("the listing never ended")
	return nil
}

// checkIndexIsTheFold waits until the order index agrees with the
// projection (every order it lists is there, in that status, with that
// latest event) and with an independent fold of the stream (every order
// the stream names is listed once, as the fold has it), and its counts
// with its listing.
func checkIndexIsTheFold(t *testing.T, app *orderstore.Appliance, oracle map[string][]testkit.OracleEvent) {
	t.Helper()
	embeddedtest.WaitFor(t, time.Minute, func() error {
		got := listOrders(t, app, orderstore.OrdersQuery{Limit: 1000})
		listed := map[string]bool{}
		counts := map[string]int{}
		for i, e := range got {
			if listed[e.OrderID] {
				return fmt.Errorf("%s listed twice", e.OrderID)
			}
			listed[e.OrderID] = true
			counts[e.Status]++
			if i > 0 && e.LastEventAt.Before(got[i-1].LastEventAt) {
				return fmt.Errorf("not oldest first: %s before %s", got[i-1].OrderID, e.OrderID)
			}
			o, err := app.Order(context.Background(), e.OrderID)
			if err != nil {
				return fmt.Errorf("listed %s: %w", e.OrderID, err)
			}
			if o.Status != e.Status || !o.LastEventAt.Equal(e.LastEventAt) {
				return fmt.Errorf("index %+v, projection %+v", e, o)
			}
			if evs, ok := oracle[e.OrderID]; ok {
				if w := testkit.FoldOrder(e.OrderID, evs); w.Status != e.Status || !w.LastEventAt.Equal(e.LastEventAt) {
					return fmt.Errorf("index %+v, the stream's fold %+v", e, w)
				}
			}
		}
		for id := range oracle {
			if !listed[id] {
				return fmt.Errorf("order %s is not listed (%d listed)", id, len(got))
			}
		}
		cs, total, err := app.OrderCounts(context.Background())
		if err != nil {
			return err
		}
		gotCounts := map[string]int{}
		for _, c := range cs {
			gotCounts[c.Status] = c.Orders
		}
		if total != len(got) || !maps.Equal(gotCounts, counts) {
			return fmt.Errorf("counts %v (total %d), the listing %v (%d)", gotCounts, total, counts, len(got))
		}
		return nil
	})
}

// Orders by status and age: the listings, paging, stale orders, the
// counts in /v1/status and /metrics, the HTTP API's refusals, and the same
// index after a restart (loaded from the projection bucket).
func TestOrdersByStatus(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c *orderstore.Config) {
		c.JetStream.StoreDir = dir
		c.Processor.StaleAfter = map[string]time.Duration{"paid": time.Millisecond, "created": time.Hour}
	}
	app := orderstoretest.Start(t, cfg)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	pub := func(typ, body string, opts ...jetstream.PublishOpt) {
		t.Helper()
		if _, err := js.Publish(ctx, "orders."+typ, []byte(body), opts...); err != nil {
			t.Fatal(err)
		}
	}
	// 30 orders created; 20 of them paid, 10 of those shipped (with a
	// status of their own); a duplicate, and a poison event.
	var created, paid, shipped []string
	for i := range 30 {
		id := fmt.Sprintf("ord-%02d", i)
		pub("created", fmt.Sprintf(`{"order_id":%q}`, id))
		switch {
		case i < 10:
			created = append(created, id)
		case i < 20:
			paid = append(paid, id)
		default:
			shipped = append(shipped, id)
		}
	}
	for _, id := range append(slices.Clone(paid), shipped...) {
		pub("paid", fmt.Sprintf(`{"order_id":%q}`, id), jetstream.WithMsgID("pay-"+id))
	}
	pub("paid", fmt.Sprintf(`{"order_id":%q}`, paid[0]), jetstream.WithMsgID("pay-"+paid[0])) // a duplicate
	for _, id := range shipped {
		pub("dispatched", fmt.Sprintf(`{"order_id":%q,"status":"in transit"}`, id))
	}
	pub("created", `{"no":"order id"}`)
	waitProjected(t, app)
	oracle := streamOracle(t, js, "ORDER_EVENTS")
	checkIndexIsTheFold(t, app, oracle)

	ids := func(es []orderstore.OrderSummary) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.OrderID)
		}
		return out
	}
	for _, tc := range []struct {
		status string
		want   []string
	}{{"created", created}, {"paid", paid}, {"in transit", shipped}, {"shipped", nil}} {
		if got := ids(listOrders(t, app, orderstore.OrdersQuery{Status: tc.status, Limit: 3})); !slices.Equal(got, tc.want) {
			t.Errorf("status %q, oldest first: %v, want %v", tc.status, got, tc.want)
		}
		rev := slices.Clone(tc.want)
		slices.Reverse(rev)
		if got := ids(listOrders(t, app, orderstore.OrdersQuery{Status: tc.status, Limit: 4, Newest: true})); !slices.Equal(got, rev) {
			t.Errorf("status %q, newest first: %v, want %v", tc.status, got, rev)
		}
	}
	// Every paid order is past its 1ms; no created one past its hour.
	embeddedtest.WaitFor(t, time.Minute, func() error {
		got := listOrders(t, app, orderstore.OrdersQuery{Stale: true})
		if g := ids(got); !slices.Equal(g, paid) {
			return fmt.Errorf("stale: %v, want %v", g, paid)
		}
		for _, e := range got {
			if !e.Stale {
				return fmt.Errorf("listed stale but not marked: %+v", e)
			}
		}
		return nil
	})
	if got := listOrders(t, app, orderstore.OrdersQuery{OlderThan: time.Hour}); len(got) != 0 {
		t.Errorf("older than an hour: %v", ids(got))
	}

	// Over HTTP: a page and its cursor, the status, the metrics.
	var page orderstore.OrdersPage
	if code, _ := handlerGet(t, app, "/v1/orders?status=paid&limit=4", &page); code != 200 || len(page.Orders) != 4 || page.Next == "" {
		t.Fatalf("GET /v1/orders?status=paid&limit=4: %d %+v", code, page)
	}
	var next orderstore.OrdersPage
	if code, _ := handlerGet(t, app, "/v1/orders?status=paid&limit=100&cursor="+page.Next, &next); code != 200 || !slices.Equal(ids(append(page.Orders, next.Orders...)), paid) || next.Next != "" {
		t.Fatalf("the next page: %d %+v", code, next)
	}
	if code, _ := handlerGet(t, app, "/v1/orders?stale=true&order=newest&older_than=1d", &next); code != 200 || len(next.Orders) != 0 {
		t.Fatalf("stale for a day: %d %+v", code, next)
	}
	for _, q := range []string{"statuss=paid", "limit=0", "limit=1001", "older_than=-1h", "older_than=soon", "cursor=xyz", "order=random", "stale=maybe"} {
		var e map[string]string
		if code, _ := handlerGet(t, app, "/v1/orders?"+q, &e); code != http.StatusBadRequest || e["error"] == "" {
			t.Errorf("GET /v1/orders?%s: %d %v, want 400 with an error", q, code, e)
		}
	}
	var st status.Status
	if code, _ := handlerGet(t, app, "/v1/status", &st); code != 200 || st.Orders == nil || st.Orders.Total != 30 || st.Orders.Stale["paid"] != 10 || st.Orders.Stale["created"] != 0 {
		t.Fatalf("/v1/status orders: %d %+v", code, st.Orders)
	}
	_, metrics := handlerGet(t, app, "/metrics", nil)
	for _, line := range []string{`orderstore_orders{status="created"} 10`, `orderstore_orders{status="paid"} 10`, `orderstore_orders{status="in transit"} 10`,
		`orderstore_orders_stale{status="paid"} 10`, `orderstore_orders_stale{status="created"} 0`} {
		if !strings.Contains(string(metrics), "\n"+line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	// After a restart the index is loaded from the projection bucket.
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, cfg)
	checkIndexIsTheFold(t, app, oracle)
}

func TestNoOrderIndex(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Processor.OrderIndex = false })
	if _, err := app.Orders(context.Background(), orderstore.OrdersQuery{}); !errors.Is(err, orderstore.ErrNoOrderIndex) {
		t.Errorf("Orders: %v, want ErrNoOrderIndex", err)
	}
	var e map[string]string
	if code, _ := handlerGet(t, app, "/v1/orders", &e); code != http.StatusNotImplemented || !strings.Contains(e["error"], "order_index") {
		t.Errorf("GET /v1/orders: %d %v, want 501 naming processor.order_index", code, e)
	}
	var st status.Status
	if _, _ = handlerGet(t, app, "/v1/status", &st); st.Orders != nil {
		t.Errorf("/v1/status has orders without an index: %+v", st.Orders)
	}
}

// An order whose only event a custom handler failed until it was
// dead-lettered has a record of withheld events only (0 events, no
// status): Order does not find it, so the listings and counts must not list
// it either (they listed it with status "" and no latest event).
func TestOrdersLeaveOutWithheldOnlyRecords(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Processor.MaxDeliver = 2
		c.Processor.Backoff = []time.Duration{20 * time.Millisecond}
		c.Processor.Handler = processor.HandlerFunc(func(_ context.Context, ev processor.Event) error {
			if ev.OrderID == "doomed" {
				return errors.New("refused by the handler")
			}
			return nil
		})
	})
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	for _, id := range []string{"doomed", "fine"} {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":%q}`, id)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		dls, _, err := app.OrderDeadLetters(ctx, "doomed")
		if err != nil || len(dls) != 1 {
			return fmt.Errorf("dead letters of doomed: %d, %v", len(dls), err)
		}
		return nil
	})
	waitProjected(t, app)
	if _, err := app.Order(ctx, "doomed"); !errors.Is(err, orderstore.ErrNotFound) {
		t.Fatalf("Order(doomed): %v, want ErrNotFound", err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		got := listOrders(t, app, orderstore.OrdersQuery{})
		if len(got) != 1 || got[0].OrderID != "fine" {
			return fmt.Errorf("listed %+v, want only fine", got)
		}
		if cs, total, err := app.OrderCounts(ctx); err != nil || total != 1 || len(cs) != 1 || cs[0].Status != "created" {
			return fmt.Errorf("counts %+v (total %d), %v; want created: 1", cs, total, err)
		}
		return nil
	})
}
