package orderstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

func adminJSON(t *testing.T, app *orderstore.Appliance, path string, out any) int {
	t.Helper()
	resp, err := http.Get("http://" + app.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp.StatusCode
}

// An operator kicks orderstore's internal connections through the
// server's own API: all reconnect, the appliance keeps running, and a
// new event is projected.
func TestKickedInternalConnectionsReconnect(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Admin.Listen = "127.0.0.1:0"
		c.Server.SystemUser, c.Server.SystemPassword = "sys", "sys-secret"
	})
	ctx := context.Background()
	var varz struct {
		ID string `json:"server_id"`
	}
	adminJSON(t, app, "/varz", &varz)
	var connz struct {
		Conns []struct {
			CID  uint64 `json:"cid"`
			Name string `json:"name"`
		} `json:"connections"`
	}
	adminJSON(t, app, "/connz", &connz)
	sys, err := nats.Connect(app.ClientURL(), nats.UserInfo("sys", "sys-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	kicked := 0
	for _, c := range connz.Conns {
		if !strings.HasPrefix(c.Name, "orderstore-") {
			continue
		}
		req := fmt.Appendf(nil, `{"cid":%d}`, c.CID)
		if _, err := sys.Request("$SYS.REQ.SERVER."+varz.ID+".KICK", req, 5*time.Second); err != nil {
			t.Fatalf("kick %s: %v", c.Name, err)
		}
		kicked++
	}
	// admin (the internal connection), publisher and processor
	if kicked != 3 {
		t.Fatalf("kicked %d internal connections, want 3 (connz: %+v)", kicked, connz.Conns)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error { return app.Ready(ctx) })
	select {
	case <-app.Done():
		t.Fatalf("appliance stopped after the kick: %v", app.Wait())
	default:
	}
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"after-kick"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		_, err := app.Order(ctx, "after-kick")
		return err
	})
}

// An event that cannot be settled (its dead letter is refused) holds the
// ack floor: /readyz turns 503 naming the stuck floor, instead of 200.
func TestStuckAckFloorMakesUnready(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Admin.Listen = "127.0.0.1:0"
		c.Processor.AckWait = 500 * time.Millisecond
		c.Processor.MaxDeliver = 2
		c.Processor.Backoff = []time.Duration{100 * time.Millisecond}
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	// The dead-letter stream refuses what comes next.
	dlq, err := js.Stream(ctx, "ORDER_EVENTS_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	cfg := dlq.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, "poison %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var ready struct {
		Status string `json:"status"`
		Checks []struct {
			Name, Reason string
			OK           bool
		} `json:"checks"`
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if code := adminJSON(t, app, "/readyz", &ready); code != 503 {
			return fmt.Errorf("/readyz = %d %+v", code, ready)
		}
		return nil
	})
	found := false
	for _, c := range ready.Checks {
		if c.Name == "progress" && !c.OK && strings.Contains(c.Reason, "stuck at 1") {
			found = true
		}
	}
	if !found {
		t.Errorf("/readyz checks %+v, want a failed progress check naming floor 1", ready.Checks)
	}
	// Freeing the dead-letter stream lets it settle; ready again.
	cfg.MaxMsgs = -1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error { return app.Ready(ctx) })
}

// Events the stream's limits remove before the processor sees them are
// counted, logged and shown by /v1/status and /metrics.
func TestRetentionRemovedUnprocessedIsCounted(t *testing.T) {
	cfg := orderstoretest.Config(t)
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Stream.MaxMsgs = 10
	ctx := context.Background()
	// The processor's consumer exists (a first run declared it), then the
	// processor is down while events pile up beyond max_msgs.
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Processor.Enabled = false
	app, err = orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(app.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	for i := range 25 {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Processor.Enabled = true
	app = orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if st := app.Stats(); st.RemovedUnprocessed != 15 || st.Processed != 10 {
			return fmt.Errorf("stats %+v, want 15 removed unprocessed and 10 processed", st)
		}
		return nil
	})
	var st status.Status
	adminJSON(t, app, "/v1/status", &st)
	if st.Processor == nil || st.Processor.RemovedUnprocessed != 15 {
		t.Errorf("/v1/status processor = %+v, want removed_unprocessed 15", st.Processor)
	}
	resp, err := http.Get("http://" + app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	if !strings.Contains(b.String(), "orderstore_processor_events_removed_unprocessed_total 15") {
		t.Errorf("/metrics lacks orderstore_processor_events_removed_unprocessed_total 15")
	}
}

// A full projection bucket makes the node unready, naming it; the events
// that could not be applied are dead-lettered, not lost. A restart then
// finds them dead-lettered, not lost from the projection (no rebuild).
func TestFullProjectionBucketIsReported(t *testing.T) {
	cfg := orderstoretest.Config(t)
	cfg.Processor.ProjectionMaxBytes = 16 << 10
	cfg.Processor.AckWait = 500 * time.Millisecond
	cfg.Processor.MaxDeliver = 2
	cfg.Processor.Backoff = []time.Duration{50 * time.Millisecond}
	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	js := embeddedtest.JetStream(t, app)
	const n = 200
	for i := range n {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"order-%04d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		err := app.Ready(ctx)
		if err == nil || !strings.Contains(err.Error(), "is full") {
			return fmt.Errorf("Ready = %v, want the projection bucket full", err)
		}
		return nil
	})
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		st := app.Stats()
		if st.Processed+st.DeadLettered != n {
			return fmt.Errorf("stats %+v: %d of %d settled", st, st.Processed+st.DeadLettered, n)
		}
		return nil
	})
	if st := app.Stats(); st.DeadLettered == 0 {
		t.Errorf("stats %+v: no event dead-lettered, yet the bucket is full", st)
	}
	js.Conn().Close()
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	app = orderstoretest.Start(t, func(c *orderstore.Config) { *c = cfg })
	if notes := app.Recovery(); len(notes) > 0 {
		t.Errorf("restart after dead-lettering: recovery notes %q, want none", notes)
	}
}

// With discard "new", a full stream refuses publishers (an error, not a
// hang) and drops nothing it acknowledged.
func TestDiscardNewRefusesAtTheLimit(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Stream.Discard = "new"
		c.Stream.MaxMsgs = 5
	})
	ctx := context.Background()
	js := embeddedtest.JetStream(t, app)
	acked := 0
	var refused error
	for i := range 8 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Publish(pctx, "orders.created", fmt.Appendf(nil, `{"order_id":"n-%d"}`, i))
		cancel()
		if err != nil {
			refused = err
			continue
		}
		acked++
	}
	if acked != 5 || refused == nil || !strings.Contains(refused.Error(), "maximum messages exceeded") {
		t.Fatalf("acked %d, last refusal %v; want 5 acked and the rest refused with maximum messages exceeded", acked, refused)
	}
	if err := app.Ready(ctx); err == nil || !strings.Contains(err.Error(), "max_msgs") {
		t.Errorf("Ready with the stream full and discard new = %v, want not ready naming max_msgs", err)
	}
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		for i := range 5 {
			if _, err := app.Order(ctx, fmt.Sprintf("n-%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if st := app.Stats(); st.RemovedUnprocessed != 0 {
		t.Errorf("stats %+v: discard new removed events", st)
	}
}
