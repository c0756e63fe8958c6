package orderstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/processor"
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

// checkProjectionIsTheFold compares every order's projected state, its
// history and the order index with an independent fold of the stream.
func checkProjectionIsTheFold(t *testing.T, app *orderstore.Appliance) {
	t.Helper()
	want := streamOracle(t, embeddedtest.JetStream(t, app), "ORDER_EVENTS")
	if err := projectionVsFold(app, want); err != nil {
		t.Fatal(err)
	}
	checkIndexIsTheFold(t, app, want)
}

// projectionVsFold is the first order whose projected state or history
// differs from the fold want.
func projectionVsFold(app *orderstore.Appliance, want map[string][]testkit.OracleEvent) error {
	for id, evs := range want {
		got, err := app.Order(context.Background(), id)
		if err != nil {
			return fmt.Errorf("order %s: %v", id, err)
		}
		w := testkit.FoldOrder(id, evs)
		got.UpdatedAt = time.Time{}
		if got != w {
			return fmt.Errorf("order %s:\n got  %+v\n want %+v", id, got, w)
		}
		h, err := app.OrderEvents(context.Background(), id, 0, 1000)
		if err != nil {
			return fmt.Errorf("history of %s: %v", id, err)
		}
		if h.Total != len(evs) {
			return fmt.Errorf("history of %s: %d events, the stream holds %d", id, h.Total, len(evs))
		}
		for i, e := range h.Events {
			if e.Sequence != evs[i].Seq {
				// The neighbourhood on both sides, to tell a missing, an
				// extra and a swapped event apart.
				var got, want []uint64
				for j := max(0, i-3); j < min(len(h.Events), i+4); j++ {
					got = append(got, h.Events[j].Sequence)
				}
				for j := max(0, i-3); j < min(len(evs), i+4); j++ {
					want = append(want, evs[j].Seq)
				}
				return fmt.Errorf("history of %s: event %d is %d, the stream's is %d (events %d on: history %v, stream %v; %d events, %d listed)",
					id, i, e.Sequence, evs[i].Seq, max(0, i-3), got, want, h.Total, len(h.Events))
			}
		}
		// As of its second event: the fold of its first two.
		if len(evs) >= 2 {
			st, err := app.OrderAsOf(context.Background(), id, orderstore.AsOf{Seq: evs[1].Seq})
			if err != nil {
				return fmt.Errorf("%s as of seq %d: %v", id, evs[1].Seq, err)
			}
			if w := testkit.FoldOrder(id, evs[:2]); st.Order.Status != w.Status || st.Order.Events != 2 || !st.Complete {
				return fmt.Errorf("%s as of seq %d: %+v, want the fold of its first two events %+v", id, evs[1].Seq, st, w)
			}
		}
	}
	return nil
}

// A projection folded wrongly (records written by a "buggy handler", one
// deleted) is rebuilt over HTTP while producers go on publishing: readers
// see every order all along (never a 404, never fewer events than it had
// before the rebuild), the rebuilt projection equals an independent fold
// of the stream, history included, the shadow is gone, and status and
// metrics tell what happened.
// In every durability mode.
func TestRebuildProjection(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) { testRebuildProjection(t, mode.set) })
	}
}

func testRebuildProjection(t *testing.T, mode func(*orderstore.Config)) {
	app := orderstoretest.Start(t, mode, func(c *orderstore.Config) {
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
	// Producers, all along (at most 2,500 events/s: the test's paced
	// rebuild must be able to catch up with them).
	wg.Go(func() {
		for i := 6000; ; i += 50 {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
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

// With rebuildKillEnvStore set the test binary is an appliance on that
// store whose rebuilds go slowly: the parent kills it with SIGKILL in the
// middle of one.
const rebuildKillEnvStore = "ORDERSTORE_REBUILDKILL_STORE"

func init() {
	if store := os.Getenv(rebuildKillEnvStore); store != "" {
		os.Exit(rebuildKillChild(store))
	}
}

func rebuildKillConfig(store string) orderstore.Config {
	cfg := orderstore.DefaultConfig() // durability group-commit
	cfg.JetStream.StoreDir = store
	cfg.JetStream.MaxFileStore = 4 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 1 << 30
	cfg.Server.Port = -1
	cfg.Admin.Listen = "127.0.0.1:0"
	return cfg
}

func rebuildKillChild(store string) int {
	cfg := rebuildKillConfig(store)
	orderstore.SetRebuildPace(&cfg, 300*time.Millisecond)
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	app, err := orderstore.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "START FAILED: %v\n", err)
		return 1
	}
	fmt.Printf("READY %s %s\n", app.ClientURL(), app.AdminAddr())
	err = app.Wait()
	fmt.Fprintf(os.Stderr, "STOPPED: %v\n", err)
	return 1
}

// A rebuild killed with SIGKILL half-way goes on from its durable
// position at the next start (the same rebuild, not a new one), and the
// projection it hands over equals an independent fold of the stream.
func TestRebuildResumesAfterKill(t *testing.T) {
	store := t.TempDir()
	c, err := testkit.StartChild(t, "the appliance", rebuildKillEnvStore+"="+store)
	if err != nil {
		t.Fatal(err)
	}
	url, adminAddr, _ := strings.Cut(c.Ready, " ")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("k-%d", i)
	}
	publishOrders(t, js, ids, 0, 20000)
	get := func(path string, out any) int {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode
	}
	embeddedtest.WaitFor(t, 2*time.Minute, func() error {
		var st status.Status
		get("/v1/status", &st)
		if st.Consumer == nil || st.Consumer.Pending+uint64(st.Consumer.AckPending) != 0 || st.Stream.LastSeq != 20000 {
			return fmt.Errorf("not projected yet: %+v", st.Consumer)
		}
		return nil
	})
	kv, err := js.KeyValue(context.Background(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:100] {
		if err := kv.Delete(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+adminAddr+"/v1/projection/rebuild", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var started status.Rebuild
	json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %+v", resp.StatusCode, started)
	}
	var mid status.Rebuild
	embeddedtest.WaitFor(t, time.Minute, func() error {
		get("/v1/projection/rebuild", &mid)
		if mid.State != status.RebuildFolding || mid.Done < 4000 {
			return fmt.Errorf("not half-way yet: %s %d of %d", mid.State, mid.Done, mid.Total)
		}
		return nil
	})
	c.Kill(t)
	t.Logf("killed at %d of %d events", mid.Done, mid.Total)

	cfg := rebuildKillConfig(store)
	cfg.Logger = embeddedtest.Logger(t)
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close(context.Background()) })
	var end *status.Rebuild
	embeddedtest.WaitFor(t, 2*time.Minute, func() error {
		end = app.RebuildStatus()
		if end == nil || end.State != status.RebuildDone {
			return fmt.Errorf("rebuild after the restart: %+v", end)
		}
		return nil
	})
	if end.ID != started.ID {
		t.Fatalf("the rebuild after the restart is %s, want the one killed (%s) going on", end.ID, started.ID)
	}
	if end.Rebuilt != uint64(len(ids)) || end.Error != "" {
		t.Fatalf("rebuild's end: %+v", end)
	}
	waitProjected(t, app)
	checkProjectionIsTheFold(t, app)
}

// The storage budget that cannot hold the shadow beside the live
// projection refuses a rebuild up front, with the numbers, over HTTP
// (507) and in the library (ErrRebuildNoRoom); nothing is created.
func TestRebuildRefusedWithoutRoom(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" }) // 2 GiB max_file_store
	var body map[string]string
	if code := adminSend(t, app, "POST", "/v1/projection/rebuild", "", &body); code != http.StatusInsufficientStorage {
		t.Fatalf("POST: %d %v, want 507", code, body)
	}
	for _, want := range []string{"512MiB", "raise jetstream.max_file_store by 256MiB", "processor.projection_max_bytes"} {
		if !strings.Contains(body["error"], want) {
			t.Errorf("refusal %q does not name %q", body["error"], want)
		}
	}
	if _, err := app.RebuildProjection(context.Background(), status.RebuildRequest{}); !errors.Is(err, orderstore.ErrRebuildNoRoom) {
		t.Fatalf("library: %v, want ErrRebuildNoRoom", err)
	}
	if _, err := embeddedtest.JetStream(t, app).Stream(context.Background(), "KV_ORDERS_REBUILD"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("shadow after a refusal: %v", err)
	}
	if _, err := app.RebuildProjection(context.Background(), status.RebuildRequest{FromSeq: 1 << 40}); !errors.Is(err, orderstore.ErrRebuildBadRequest) {
		t.Fatalf("from_seq past the end: %v, want ErrRebuildBadRequest", err)
	}
	// A from_time after every event would fold nothing and keep every
	// order as it is: refused, naming the last event's time.
	if _, err := app.RebuildProjection(context.Background(), status.RebuildRequest{FromTime: time.Now().Add(time.Hour)}); !errors.Is(err, orderstore.ErrRebuildBadRequest) || !strings.Contains(err.Error(), "after every event") {
		t.Fatalf("from_time after every event: %v, want ErrRebuildBadRequest", err)
	}
	if code := adminSend(t, app, "GET", "/v1/projection/rebuild", "", &body); code != http.StatusNotFound {
		t.Fatalf("GET with none run: %d", code)
	}
	if code := adminSend(t, app, "DELETE", "/v1/projection/rebuild", "", &body); code != http.StatusConflict {
		t.Fatalf("DELETE with none running: %d", code)
	}
	for _, bad := range []string{`{"from_seq":"x"}`, `{"nope":1}`, `{"from_seq":5,"from_time":"2026-01-01T00:00:00Z"}`} {
		if code := adminSend(t, app, "POST", "/v1/projection/rebuild", bad, &body); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", bad, code)
		}
	}
}

func roomyConfig(c *orderstore.Config) {
	c.Admin.Listen = "127.0.0.1:0"
	c.JetStream.MaxFileStore = 4 << 30
}

// A canceled rebuild drops its shadow and leaves the live projection as
// it was, and says so.
func TestRebuildCancel(t *testing.T) {
	app := orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) { orderstore.SetRebuildPace(c, time.Second) })
	js := embeddedtest.JetStream(t, app)
	publishOrders(t, js, []string{"c-1", "c-2", "c-3"}, 0, 9000)
	waitProjected(t, app)
	ctx := context.Background()
	kv, _ := js.KeyValue(ctx, "ORDERS")
	if err := kv.Delete(ctx, "c-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if st := app.RebuildStatus(); st.Done == 0 {
			return fmt.Errorf("not folding yet: %+v", st)
		}
		return nil
	})
	var st status.Rebuild
	if code := adminSend(t, app, "DELETE", "/v1/projection/rebuild", "", &st); code != http.StatusAccepted {
		t.Fatalf("DELETE: %d", code)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if st := app.RebuildStatus(); st.State != status.RebuildCanceled {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	if _, err := js.Stream(ctx, "KV_ORDERS_REBUILD"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("shadow after cancel: %v", err)
	}
	if _, err := app.Order(ctx, "c-2"); !errors.Is(err, orderstore.ErrNotFound) {
		t.Fatalf("c-2 after a canceled rebuild: %v, want it still gone (the live projection as it was)", err)
	}
	if err := app.CancelRebuild(); !errors.Is(err, orderstore.ErrNoRebuild) {
		t.Fatalf("cancel again: %v", err)
	}
}

// Dead letters are not folded: a poison event, an event in the
// dead-letter stream, and one replayed from it (its original is skipped,
// the replay folded in its place): the rebuilt projection holds what the
// live one would, not the events twice.
func TestRebuildSkipsDeadLetters(t *testing.T) {
	// Replayed: the rebuild reads every event's headers to find the
	// replay. Not: the dead-letter stream holds every dead letter it
	// ever held, so there is no replay to find and no such scan.
	for _, replay := range []bool{true, false} {
		t.Run(fmt.Sprintf("replayed=%v", replay), func(t *testing.T) { testRebuildSkipsDeadLetters(t, replay) })
	}
}

func testRebuildSkipsDeadLetters(t *testing.T, replay bool) {
	app := orderstoretest.Start(t, roomyConfig)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	ids := []string{"d-1", "d-2", "d-3"}
	publishOrders(t, js, ids, 0, 30)
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"no_order_id":1}`)); err != nil {
		t.Fatal(err)
	}
	// Two valid events the processor "dead-lettered": their dead letters
	// name them. One stays, one is replayed.
	var dead []uint64
	for i := range 2 {
		ack, err := js.Publish(ctx, "orders.paid", fmt.Appendf(nil, `{"order_id":"d-%d","status":"late"}`, i+1))
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, ack.Sequence)
	}
	publishOrders(t, js, ids, 100, 30)
	waitProjected(t, app)
	var dlqSeqs []uint64
	for i, seq := range dead {
		m := nats.NewMsg("dlq.ORDER_EVENTS_DLQ.orders.paid")
		m.Data = fmt.Appendf(nil, `{"order_id":"d-%d","status":"late"}`, i+1)
		m.Header.Set("Orderstore-Original-Stream", "ORDER_EVENTS")
		m.Header.Set("Orderstore-Original-Subject", "orders.paid")
		m.Header.Set("Orderstore-Original-Sequence", strconv.FormatUint(seq, 10))
		m.Header.Set("Orderstore-Error", "test: exhausted")
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		dlqSeqs = append(dlqSeqs, ack.Sequence)
	}
	var replayed uint64
	if replay {
		var err error
		if replayed, err = app.ReplayDeadLetter(ctx, dlqSeqs[1]); err != nil {
			t.Fatal(err)
		}
	}
	waitProjected(t, app)
	end := rebuildToTheEnd(t, app, status.RebuildRequest{})
	if end.Poison != 1 || end.DeadLettered != 2 {
		t.Fatalf("skipped: poison %d, dead letters %d; want 1 and 2 (%+v)", end.Poison, end.DeadLettered, end)
	}
	want := streamOracle(t, js, "ORDER_EVENTS")
	for id, evs := range want {
		kept := evs[:0:0]
		for _, e := range evs {
			if e.Seq != dead[0] && e.Seq != dead[1] {
				kept = append(kept, e)
			}
		}
		w := testkit.FoldOrder(id, kept)
		got, err := app.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got.UpdatedAt = time.Time{}
		if got != w {
			t.Fatalf("order %s after the rebuild:\n got  %+v\n want %+v (the dead letters %v left out, the replay %d in)", id, got, w, dead, replayed)
		}
	}
}

// Orders whose early events the stream no longer holds (purged, or before
// from_seq) cannot be re-folded: the rebuild counts them as partial and
// keeps their state, unless asked to replace it.
func TestRebuildKeepsWhatTheStreamNoLongerHolds(t *testing.T) {
	app := orderstoretest.Start(t, roomyConfig)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	publishOrders(t, js, []string{"old-1", "old-2"}, 0, 20) // seqs 1-20
	publishOrders(t, js, []string{"old-1", "new-1", "new-2"}, 20, 30)
	waitProjected(t, app)
	s, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(11)); err != nil { // keeps 11 on
		t.Fatal(err)
	}
	before := map[string]orderstore.Order{}
	for _, id := range []string{"old-1", "old-2", "new-1", "new-2"} {
		if before[id], err = app.Order(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	run := func(req status.RebuildRequest) *status.Rebuild { return rebuildToTheEnd(t, app, req) }
	end := run(status.RebuildRequest{})
	if end.FromSeq != 11 || end.Partial != 2 || end.Rebuilt != 2 {
		t.Fatalf("after a purge: %+v, want from 11, 2 partial (old-1, old-2), 2 rebuilt", end)
	}
	for id, o := range before {
		got, _ := app.Order(ctx, id)
		if got.Events != o.Events || got.Status != o.Status || got.FirstSeq != o.FirstSeq {
			t.Errorf("order %s after the rebuild: %+v, was %+v", id, got, o)
		}
	}
	// Told otherwise, and from a later sequence: old-1 and new-1 become
	// the fold of what is folded.
	end = run(status.RebuildRequest{FromSeq: 30, ReplacePartial: true})
	if end.FromSeq != 30 || end.Rebuilt != 3 || end.Partial != 0 || end.Untouched != 1 {
		t.Fatalf("from 30, replacing: %+v, want 3 rebuilt (old-1, new-1, new-2), old-2 untouched", end)
	}
	want := streamOracle(t, js, "ORDER_EVENTS")
	for _, id := range []string{"old-1", "new-1"} {
		var evs []testkit.OracleEvent
		for _, e := range want[id] {
			if e.Seq >= 30 {
				evs = append(evs, e)
			}
		}
		w := testkit.FoldOrder(id, evs)
		got, _ := app.Order(ctx, id)
		got.UpdatedAt = time.Time{}
		if got != w {
			t.Fatalf("order %s replaced:\n got  %+v\n want %+v", id, got, w)
		}
	}
}

// versionedFold is a library user's handler that keeps its projection in
// memory: version "v1" counts an order's events, "v2" sums their "i"
// fields. It is a processor.Rebuilder: its shadow is a second map.
type versionedFold struct {
	version string
	mu      sync.Mutex
	live    map[string]int
	seen    map[uint64]bool
	shadow  map[string]int
	sseen   map[uint64]bool
}

func newVersionedFold(version string) *versionedFold {
	return &versionedFold{version: version, live: map[string]int{}, seen: map[uint64]bool{}}
}

func (h *versionedFold) Version() string { return h.version }

func (h *versionedFold) apply(m map[string]int, seen map[uint64]bool, ev processor.Event) {
	if seen[ev.Sequence] {
		return
	}
	seen[ev.Sequence] = true
	if h.version == "v1" {
		m[ev.OrderID]++
		return
	}
	var b struct{ I int }
	json.Unmarshal(ev.Data, &b)
	m[ev.OrderID] += b.I
}

func (h *versionedFold) Handle(_ context.Context, ev processor.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.apply(h.live, h.seen, ev)
	return nil
}

func (h *versionedFold) Shadow(_ context.Context, fresh bool) (processor.Handler, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fresh || h.shadow == nil {
		h.shadow, h.sseen = map[string]int{}, map[uint64]bool{}
	}
	return processor.HandlerFunc(func(_ context.Context, ev processor.Event) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.apply(h.shadow, h.sseen, ev)
		return nil
	}), nil
}

func (h *versionedFold) Takeover(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shadow != nil {
		h.live, h.seen, h.shadow, h.sseen = h.shadow, h.sseen, nil, nil
	}
	return nil
}

func (h *versionedFold) Discard(context.Context) error {
	h.mu.Lock()
	h.shadow, h.sseen = nil, nil
	h.mu.Unlock()
	return nil
}

func (h *versionedFold) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.live)
}

// A library user's handler declares its version: a start with a new one
// rebuilds its projection in the background, the old one serving until
// the new one takes over, and records the version (the next start does
// not rebuild again). The built-in projection's version works the same.
func TestRebuildOnNewHandlerVersion(t *testing.T) {
	store := t.TempDir()
	ctx := context.Background()
	ids := []string{"v-1", "v-2", "v-3"}
	v1 := newVersionedFold("v1")
	app := orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Processor.Handler = v1
	})
	publishOrders(t, embeddedtest.JetStream(t, app), ids, 0, 300)
	waitProjected(t, app)
	if app.RebuildStatus() != nil {
		t.Fatalf("a rebuild on the first start: %+v", app.RebuildStatus())
	}
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	counts := v1.snapshot()
	if counts["v-1"] != 100 {
		t.Fatalf("v1 fold: %v", counts)
	}

	// v2 starts from what v1 built (its storage survived the restart).
	v2 := newVersionedFold("v2")
	v2.live = maps.Clone(counts)
	for seq := uint64(1); seq <= 300; seq++ {
		v2.seen[seq] = true
	}
	app = orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Processor.Handler = v2
	})
	var end *status.Rebuild
	embeddedtest.WaitFor(t, time.Minute, func() error {
		// The projection read first: if the state read after it says the
		// takeover had not begun, it had not when it was read.
		got := v2.snapshot()
		end = app.RebuildStatus()
		if end == nil || end.State == status.RebuildFolding {
			if !maps.Equal(got, counts) {
				t.Fatalf("before the takeover the old projection must be served: %v, was %v", got, counts)
			}
		}
		if end == nil || end.State != status.RebuildDone {
			return fmt.Errorf("rebuild: %+v", end)
		}
		return nil
	})
	if !strings.Contains(end.Reason, `from "v1" to "v2"`) || end.Version != "v2" {
		t.Fatalf("rebuild: reason %q, version %q", end.Reason, end.Version)
	}
	want := map[string]int{}
	for i := range 300 {
		want[ids[i%3]] += i
	}
	if got := v2.snapshot(); !maps.Equal(got, want) {
		t.Fatalf("after the takeover: %v, want the v2 fold %v", got, want)
	}
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Processor.Handler = v2
	})
	if st := app.RebuildStatus(); st == nil || st.ID != end.ID {
		t.Fatalf("the same version started again: %+v, want the last rebuild (%s) and no new one", st, end.ID)
	}
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The built-in projection, as built by an older fold.
	store2 := t.TempDir()
	app = orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) { c.JetStream.StoreDir = store2 })
	publishOrders(t, embeddedtest.JetStream(t, app), ids, 0, 30)
	waitProjected(t, app)
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store2, "projection.json"), []byte(`{"version":"orders/0"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) { c.JetStream.StoreDir = store2 })
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if end = app.RebuildStatus(); end == nil || end.State != status.RebuildDone {
			return fmt.Errorf("rebuild: %+v", end)
		}
		return nil
	})
	if !strings.Contains(end.Reason, `"orders/0" to "`+processor.ProjectionVersion+`"`) || end.Rebuilt != 3 {
		t.Fatalf("built-in rebuild: %+v", end)
	}
	data, _ := os.ReadFile(filepath.Join(store2, "projection.json"))
	if !strings.Contains(string(data), processor.ProjectionVersion) {
		t.Fatalf("projection.json after the rebuild: %s", data)
	}
	checkProjectionIsTheFold(t, app)
}

// A hub rebuilds its projection from its aggregate stream (every edge's
// events), and an edge from its own stream, while the edge keeps
// forwarding.
func TestRebuildOnHubAndEdge(t *testing.T) {
	leaf := orderstoretest.Addrs(t, 1)[0]
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf), func(c *orderstore.Config) { c.JetStream.MaxFileStore = 4 << 30 })
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"))
	ctx := context.Background()
	ids := []string{"h-1", "h-2", "h-3"}
	publishOrders(t, embeddedtest.JetStream(t, edge), ids, 0, 90)
	embeddedtest.WaitFor(t, time.Minute, func() error {
		o, err := hub.Order(ctx, "h-3")
		if err != nil || o.Events != 30 {
			return fmt.Errorf("hub's h-3: %+v %v", o, err)
		}
		return nil
	})
	waitProjected(t, hub)
	for _, app := range []*orderstore.Appliance{hub, edge} {
		kv, err := embeddedtest.JetStream(t, app).KeyValue(ctx, "ORDERS")
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "h-2"); err != nil {
			t.Fatal(err)
		}
		if _, err := app.RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	publishOrders(t, embeddedtest.JetStream(t, edge), ids, 90, 30)
	for _, app := range []*orderstore.Appliance{hub, edge} {
		embeddedtest.WaitFor(t, time.Minute, func() error {
			if st := app.RebuildStatus(); st.State != status.RebuildDone {
				return fmt.Errorf("rebuild: %+v", st)
			}
			return nil
		})
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		o, err := hub.Order(ctx, "h-3")
		if err != nil || o.Events != 40 {
			return fmt.Errorf("hub's h-3: %+v %v", o, err)
		}
		return nil
	})
	waitProjected(t, hub)
	waitProjected(t, edge)
	for _, c := range []struct {
		app    *orderstore.Appliance
		stream string
	}{{hub, "ORDER_EVENTS_ALL"}, {edge, "ORDER_EVENTS"}} {
		want := streamOracle(t, embeddedtest.JetStream(t, c.app), c.stream)
		for _, id := range ids {
			got, err := c.app.Order(ctx, id)
			if err != nil {
				t.Fatalf("%s: order %s: %v", c.stream, id, err)
			}
			got.UpdatedAt = time.Time{}
			if w := testkit.FoldOrder(id, want[id]); got != w || w.Events != 40 {
				t.Fatalf("%s: order %s:\n got  %+v\n want %+v", c.stream, id, got, w)
			}
		}
	}
}

// The takeover replaces what the live projection holds of a rebuilt
// order whole: history chunks past the rebuilt record's are deleted, a
// live record that cannot be read is replaced (not a takeover that fails
// at every try), and an order the stream no longer names stays as it is.
func TestRebuildTakeoverReplacesStaleState(t *testing.T) {
	app := orderstoretest.Start(t, roomyConfig)
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	ids := []string{"s-1", "s-2", "s.dotted.3"}
	publishOrders(t, js, ids, 0, 30)
	waitProjected(t, app)
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, "ORDERS_HISTORY")
	if err != nil {
		t.Fatal(err)
	}
	// s-1's live record claims three sealed chunks of history, which a
	// buggy handler wrote; s-2's record is damaged; "ghost" is an order
	// the stream does not name.
	e, err := kv.Get(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["history_chunks"] = 3
	data, _ := json.Marshal(rec)
	if _, err := kv.Put(ctx, "s-1", data); err != nil {
		t.Fatal(err)
	}
	for n := range 3 {
		if _, err := hkv.Put(ctx, fmt.Sprintf("s-1.%d", n), []byte(`[1,2,3]`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "s-2", []byte(`{"events":`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ghost", []byte(`{"order_id":"ghost","status":"kept","events":1,"first_seq":1}`)); err != nil {
		t.Fatal(err)
	}

	end := rebuildToTheEnd(t, app, status.RebuildRequest{})
	if end.Rebuilt != uint64(len(ids)) || end.Untouched != 1 || end.Partial != 0 || end.Conflicts != 0 {
		t.Fatalf("rebuild's end: %+v; want %d rebuilt, 1 untouched", end, len(ids))
	}
	for n := range 3 {
		if _, err := hkv.Get(ctx, fmt.Sprintf("s-1.%d", n)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("stale history chunk s-1.%d after the rebuild: %v, want it deleted", n, err)
		}
	}
	if g, err := kv.Get(ctx, "ghost"); err != nil || !strings.Contains(string(g.Value()), `"kept"`) {
		t.Errorf("an order the stream does not name: %v, want it as it was", err)
	}
	checkProjectionIsTheFold(t, app)
}

// Orderstore-Replay-Of is orderstore's own: the rebuild leaves out the
// event a replay names (it was a dead letter, the replay is folded in its
// place). A producer that sets it on its own event, in any spelling and
// in every durability mode, must not make a rebuild drop another order's
// acknowledged event: the ingest service drops the header.
func TestRebuildIgnoresForgedReplayOf(t *testing.T) {
	for _, mode := range integrityModes {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, roomyConfig, mode.set)
			js := embeddedtest.JetStream(t, app)
			ctx := context.Background()
			victim, err := js.Publish(ctx, "orders.paid", []byte(`{"order_id":"victim","status":"paid"}`))
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range []string{processor.HeaderReplayOf, "orderstore-replay-of"} {
				m := &nats.Msg{Subject: "orders.created", Data: fmt.Appendf(nil, `{"order_id":"forger-%d"}`, i),
					Header: nats.Header{name: {strconv.FormatUint(victim.Sequence, 10)}}}
				ack, err := js.PublishMsg(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				s, err := js.Stream(ctx, "ORDER_EVENTS")
				if err != nil {
					t.Fatal(err)
				}
				stored, err := s.GetMsg(ctx, ack.Sequence)
				if err != nil {
					t.Fatal(err)
				}
				for k := range stored.Header {
					if strings.EqualFold(k, processor.HeaderReplayOf) {
						t.Errorf("stored event %d carries the producer's %s header %v", ack.Sequence, k, stored.Header[k])
					}
				}
			}
			waitProjected(t, app)
			// A handler bug lost the victim's record: the rebuild is
			// what brings it back.
			kv, err := js.KeyValue(ctx, "ORDERS")
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "victim"); err != nil {
				t.Fatal(err)
			}
			end := rebuildToTheEnd(t, app, status.RebuildRequest{})
			if end.DeadLettered != 0 || end.Rebuilt != 3 {
				t.Errorf("rebuild's end: %d left out as dead letters, %d rebuilt; want 0 and 3 (%+v)", end.DeadLettered, end.Rebuilt, end)
			}
			o, err := app.Order(ctx, "victim")
			if err != nil {
				t.Fatalf("the victim's order after the rebuild: %v (its acknowledged event %d was dropped)", err, victim.Sequence)
			}
			if o.Status != "paid" || o.Events != 1 {
				t.Fatalf("the victim's order after the rebuild: %+v, want its one event folded", o)
			}
			checkProjectionIsTheFold(t, app)
		})
	}
}

// rebuildToTheEnd rebuilds app's projection as req says and waits until
// the rebuild is done.
func rebuildToTheEnd(t *testing.T, app *orderstore.Appliance, req status.RebuildRequest) *status.Rebuild {
	t.Helper()
	if _, err := app.RebuildProjection(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var end *status.Rebuild
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if end = app.RebuildStatus(); end.State != status.RebuildDone {
			return fmt.Errorf("state %+v", end)
		}
		return nil
	})
	return end
}

// An edge's replay of a dead letter reaches a hub with an
// Orderstore-Replay-Of that names a sequence of the edge's stream, not of
// the hub's: a hub's rebuild folds it like any other event, as the hub's
// live processor did, and leaves no hub event out on its word.
func TestRebuildOnHubIgnoresEdgeReplays(t *testing.T) {
	leaf := orderstoretest.Addrs(t, 1)[0]
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf), func(c *orderstore.Config) { c.JetStream.MaxFileStore = 4 << 30 })
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"))
	ctx := context.Background()
	ejs := embeddedtest.JetStream(t, edge)
	ids := []string{"r-1", "r-2", "r-3"}
	publishOrders(t, ejs, ids, 0, 30)
	late, err := ejs.Publish(ctx, "orders.paid", []byte(`{"order_id":"r-1","status":"late"}`))
	if err != nil {
		t.Fatal(err)
	}
	// The edge's processor "dead-lettered" it; the edge replays it.
	m := nats.NewMsg("dlq.ORDER_EVENTS_DLQ.orders.paid")
	m.Data = []byte(`{"order_id":"r-1","status":"late"}`)
	m.Header.Set("Orderstore-Original-Stream", "ORDER_EVENTS")
	m.Header.Set("Orderstore-Original-Subject", "orders.paid")
	m.Header.Set("Orderstore-Original-Sequence", strconv.FormatUint(late.Sequence, 10))
	m.Header.Set("Orderstore-Error", "test: exhausted")
	dl, err := ejs.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := edge.ReplayDeadLetter(ctx, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	// 10 events of r-1, the late one and its replay, all at the hub.
	embeddedtest.WaitFor(t, time.Minute, func() error {
		o, err := hub.Order(ctx, "r-1")
		if err != nil || o.Events != 12 {
			return fmt.Errorf("hub's r-1: %+v %v", o, err)
		}
		return nil
	})
	waitProjected(t, hub)
	hjs := embeddedtest.JetStream(t, hub)
	kv, err := hjs.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "r-1"); err != nil {
		t.Fatal(err)
	}
	end := rebuildToTheEnd(t, hub, status.RebuildRequest{})
	if end.DeadLettered != 0 {
		t.Errorf("the hub's rebuild left out %d events as dead letters, want 0 (%+v)", end.DeadLettered, end)
	}
	want := streamOracle(t, hjs, "ORDER_EVENTS_ALL")
	for _, id := range ids {
		got, err := hub.Order(ctx, id)
		if err != nil {
			t.Fatalf("hub's %s after the rebuild: %v", id, err)
		}
		got.UpdatedAt = time.Time{}
		if w := testkit.FoldOrder(id, want[id]); got != w {
			t.Fatalf("hub's %s after the rebuild:\n got  %+v\n want %+v (every event of the hub's stream)", id, got, w)
		}
	}
	// The hub's history, as-of and order index: the fold of its aggregate
	// stream.
	if err := projectionVsFold(hub, want); err != nil {
		t.Fatal(err)
	}
	checkIndexIsTheFold(t, hub, want)
}

// Events the stream's limits remove during a rebuild, before the fold reached them (a purge here):
// the orders that had them keep their state (partial), as those whose events were gone before it
// began, instead of being replaced by a fold that misses them.
func TestRebuildKeepsWhatTheStreamLosesMeanwhile(t *testing.T) {
	app := orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) { orderstore.SetRebuildPace(c, time.Second) })
	js := embeddedtest.JetStream(t, app)
	ctx := context.Background()
	ids := []string{"f-1", "f-2", "f-3"}
	publishOrders(t, js, ids, 0, 6000) // seqs 1-6000
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"gone-1"}`)); err != nil {
		t.Fatal(err)
	}
	publishOrders(t, js, ids, 6001, 3000) // seqs 6002-9001
	if _, err := js.Publish(ctx, "orders.shipped", []byte(`{"order_id":"gone-1"}`)); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, app)
	before := map[string]orderstore.Order{}
	for _, id := range append(ids, "gone-1") {
		o, err := app.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = o
	}
	if _, err := app.RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if st := app.RebuildStatus(); st.Done == 0 {
			return fmt.Errorf("not folding yet: %+v", st)
		}
		return nil
	})
	// The fold is at 1000 (3000 read ahead at most), and pauses a second a step.
	s, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(8001)); err != nil { // keeps 8001 on
		t.Fatal(err)
	}
	var end *status.Rebuild
	embeddedtest.WaitFor(t, 2*time.Minute, func() error {
		if end = app.RebuildStatus(); end.State != status.RebuildDone {
			return fmt.Errorf("state %+v", end)
		}
		return nil
	})
	for id, o := range before {
		got, _ := app.Order(ctx, id)
		if got.Events != o.Events || got.Status != o.Status || got.FirstSeq != o.FirstSeq {
			t.Errorf("order %s after the rebuild: %+v, was %+v (its events below 8001 were purged while the rebuild ran)", id, got, o)
		}
	}
	if end.Partial != 4 || end.Rebuilt != 0 {
		t.Errorf("rebuild: %+v, want the 4 orders partial, none rebuilt", end)
	}
}

// A rebuild folding when orderstore stops, resumed by a start with a new version of the fold,
// starts over with the new one: a shadow folded half by each would take over, recorded as the
// old version's.
func TestRebuildResumedByNewVersionStartsOver(t *testing.T) {
	store := t.TempDir()
	ctx := context.Background()
	ids := []string{"w-1", "w-2", "w-3"}
	v1 := newVersionedFold("v1")
	app := orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Processor.Handler = v1
		orderstore.SetRebuildPace(c, time.Second)
	})
	publishOrders(t, embeddedtest.JetStream(t, app), ids, 0, 5000)
	waitProjected(t, app)
	if _, err := app.RebuildProjection(ctx, status.RebuildRequest{}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if st := app.RebuildStatus(); st.Done == 0 || st.State != status.RebuildFolding {
			return fmt.Errorf("not folding yet: %+v", st)
		}
		return nil
	})
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// v2 starts from what v1 left (its storage, the shadow too, survived).
	v2 := newVersionedFold("v2")
	v1.mu.Lock()
	v2.live, v2.seen, v2.shadow, v2.sseen = maps.Clone(v1.live), maps.Clone(v1.seen), maps.Clone(v1.shadow), maps.Clone(v1.sseen)
	v1.mu.Unlock()
	if len(v2.shadow) == 0 {
		t.Fatal("v1 left no shadow")
	}
	app = orderstoretest.Start(t, roomyConfig, func(c *orderstore.Config) {
		c.JetStream.StoreDir = store
		c.Processor.Handler = v2
	})
	embeddedtest.WaitFor(t, time.Minute, func() error {
		if end := app.RebuildStatus(); end == nil || end.State != status.RebuildDone {
			return fmt.Errorf("rebuild: %+v", end)
		}
		return nil
	})
	want := map[string]int{}
	for i := range 5000 {
		want[ids[i%3]] += i
	}
	if got := v2.snapshot(); !maps.Equal(got, want) {
		t.Errorf("after the takeover: %v, want the v2 fold %v", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(store, "projection.json")); !strings.Contains(string(data), `"v2"`) {
		t.Errorf("projection.json after the rebuild: %s, want v2", data)
	}
}
