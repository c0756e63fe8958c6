package orderstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

// adminSend sends a request with a JSON body to app's admin listener and
// decodes the answer into out.
func adminSend(t *testing.T, app *orderstore.Appliance, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+app.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

// publishOrders publishes n events over ids (round robin, every third
// event with a status) and returns what it published.
func publishOrders(t *testing.T, js jetstream.JetStream, ids []string, from, n int) {
	t.Helper()
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		id := ids[i%len(ids)]
		typ := []string{"created", "paid", "shipped"}[i%3]
		body := fmt.Sprintf(`{"order_id":%q,"i":%d}`, id, i)
		if i%3 == 1 {
			body = fmt.Sprintf(`{"order_id":%q,"status":"s-%d","i":%d}`, id, i, i)
		}
		if _, err := js.Publish(ctx, "orders."+typ, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
}

func waitProjected(t *testing.T, app *orderstore.Appliance) {
	t.Helper()
	embeddedtest.WaitFor(t, 2*time.Minute, func() error {
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

// streamOracle reads a stream: every valid event per order, in stream
// order.
func streamOracle(t *testing.T, js jetstream.JetStream, stream string) map[string][]testkit.OracleEvent {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]testkit.OracleEvent{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var b struct {
			OrderID string `json:"order_id"`
			Status  string `json:"status"`
		}
		if json.Unmarshal(m.Data, &b) != nil || b.OrderID == "" {
			continue // poison: never applied
		}
		out[b.OrderID] = append(out[b.OrderID], testkit.OracleEvent{Seq: m.Sequence, Subject: m.Subject, Status: b.Status, Data: m.Data, Time: m.Time.UTC()})
	}
	return out
}

// checkProjectionIsTheFold compares every order's projected state with an
// independent fold of the stream.
func checkProjectionIsTheFold(t *testing.T, app *orderstore.Appliance) {
	t.Helper()
	want := streamOracle(t, embeddedtest.JetStream(t, app), "ORDER_EVENTS")
	for id, evs := range want {
		got, err := app.Order(context.Background(), id)
		if err != nil {
			t.Fatalf("order %s: %v", id, err)
		}
		w := testkit.FoldOrder(id, evs)
		got.UpdatedAt = time.Time{}
		if got != w {
			t.Fatalf("order %s:\n got  %+v\n want %+v", id, got, w)
		}
		h, err := app.OrderEvents(context.Background(), id, 0, 1000)
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		if h.Total != len(evs) {
			t.Fatalf("history of %s: %d events, the stream holds %d", id, h.Total, len(evs))
		}
		for i, e := range h.Events {
			if e.Sequence != evs[i].Seq {
				t.Fatalf("history of %s: event %d is %d, the stream's is %d", id, i, e.Sequence, evs[i].Seq)
			}
		}
	}
}

// A projection folded wrongly (records written by a "buggy handler", one
// deleted) is rebuilt over HTTP while producers go on publishing: readers
// see every order all along (never a 404, never fewer events than it had
// before the rebuild), the rebuilt projection equals an independent fold
// of the stream, history included, the shadow is gone, and status and
// metrics tell what happened.
func TestRebuildProjection(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Admin.Listen = "127.0.0.1:0"
		c.JetStream.MaxFileStore = 4 << 30 // room for the shadow bucket's reservation
		orderstore.SetRebuildPace(c, 20*time.Millisecond)
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("o-%d", i)
	}
	ids[0] = "hot"
	publishOrders(t, js, ids, 0, 6000)
	waitProjected(t, app)

	// The "buggy handler": wrong statuses on 50 orders, one order gone.
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for i, id := range ids {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		before[id] = int(rec["events"].(float64))
		if i%6 == 0 {
			rec["status"] = "WRONG"
			data, _ := json.Marshal(rec)
			if _, err := kv.Put(ctx, id, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := kv.Delete(ctx, "o-7"); err != nil {
		t.Fatal(err)
	}
	delete(before, "o-7")

	// Readers, all along.
	stop := make(chan struct{})
	var reads atomic.Int64
	var readErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[i%len(ids)]
				o, err := app.Order(ctx, id)
				if id == "o-7" {
					continue
				}
				reads.Add(1)
				if err != nil {
					msg := fmt.Sprintf("order %s during the rebuild: %v", id, err)
					readErr.CompareAndSwap(nil, &msg)
					continue
				}
				if o.Events < before[id] {
					msg := fmt.Sprintf("order %s during the rebuild: %d events, it had %d before (a half-built projection)", id, o.Events, before[id])
					readErr.CompareAndSwap(nil, &msg)
				}
			}
		})
	}
	// Producers, all along.
	wg.Go(func() {
		for i := 6000; ; i += 50 {
			select {
			case <-stop:
				return
			default:
			}
			publishOrders(t, js, ids[1:], i, 50)
		}
	})

	var st status.Rebuild
	if code := adminSend(t, app, "POST", "/v1/projection/rebuild", "", &st); code != http.StatusAccepted {
		t.Fatalf("POST /v1/projection/rebuild: %d %+v", code, st)
	}
	if st.State != status.RebuildFolding || st.ID == "" {
		t.Fatalf("started: %+v", st)
	}
	// A second one is refused while it runs.
	var refused map[string]string
	if code := adminSend(t, app, "POST", "/v1/projection/rebuild", "", &refused); code != http.StatusConflict {
		t.Fatalf("second rebuild: %d %v, want 409", code, refused)
	}
	sawProgress := false
	embeddedtest.WaitFor(t, 3*time.Minute, func() error {
		var cur status.Rebuild
		if code := adminJSON(t, app, "/v1/projection/rebuild", &cur); code != 200 {
			return fmt.Errorf("GET: %d", code)
		}
		if cur.State == status.RebuildFolding && cur.Done > 0 && cur.Done < cur.Total && cur.Rate > 0 {
			sawProgress = true
		}
		if cur.State == status.RebuildFailed || cur.State == status.RebuildCanceled {
			t.Fatalf("rebuild %s: %s", cur.State, cur.Error)
		}
		if cur.State != status.RebuildDone {
			return fmt.Errorf("state %q (%d of %d) %s", cur.State, cur.Done, cur.Total, cur.Error)
		}
		st = cur
		return nil
	})
	close(stop)
	wg.Wait()
	if msg := readErr.Load(); msg != nil {
		t.Fatal(*msg)
	}
	if reads.Load() == 0 {
		t.Fatal("no reads during the rebuild")
	}
	if !sawProgress {
		t.Error("never saw the rebuild's progress (done of total, rate) while it folded")
	}
	waitProjected(t, app)
	checkProjectionIsTheFold(t, app)
	if st.Rebuilt != uint64(len(ids)) || st.Partial != 0 || st.Conflicts != 0 || st.Error != "" {
		t.Fatalf("rebuild's end: %+v", st)
	}
	for _, s := range []string{"KV_ORDERS_REBUILD", "KV_ORDERS_REBUILD_HISTORY"} {
		if _, err := js.Stream(ctx, s); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("shadow %s after the takeover: %v, want gone", s, err)
		}
	}
	var full status.Status
	adminJSON(t, app, "/v1/status", &full)
	if full.Rebuild == nil || full.Rebuild.ID != st.ID || full.Status != "ready" {
		t.Fatalf("/v1/status: %s, rebuild %+v", full.Status, full.Rebuild)
	}
	resp, err := http.Get("http://" + app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"orderstore_projection_rebuild_running 0", fmt.Sprintf("orderstore_projection_rebuild_events_done %d", st.Done)} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}
