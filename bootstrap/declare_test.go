package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

func TestDeclareIsIdempotent(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	spec := orderstore.DefaultConfig().DeclareSpec()
	ctx := context.Background()
	res, err := bootstrap.Declare(ctx, js, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 5 {
		t.Errorf("created %q, want stream, dlq, bucket, history, consumer", res.Created)
	}
	res, err = bootstrap.Declare(ctx, js, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Changes) != 0 {
		t.Errorf("second Declare created %q changed %v, want nothing", res.Created, res.Changes)
	}
	if err := bootstrap.Verify(ctx, js, spec); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestDeclareAppliesSafeChangesAsDiff(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	cfg := orderstore.DefaultConfig()
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		t.Fatal(err)
	}
	cfg.Stream.MaxAge = 72 * time.Hour
	cfg.Stream.MaxBytes = 1 << 30
	cfg.Stream.Subjects = []string{"orders.>", "returns.>"}
	cfg.Processor.MaxAckPending = 2000
	cfg.Processor.AckWait = time.Minute
	res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range res.Changes {
		got[c.Field] = c.Before + " -> " + c.After
	}
	want := map[string]string{
		"max_age":         "168h0m0s -> 72h0m0s",
		"max_bytes":       "8GiB -> 1GiB",
		"subjects":        `["orders.>"] -> ["orders.>" "returns.>"]`,
		"max_ack_pending": "8000 -> 2000",
		"ack_wait":        "30s -> 1m0s",
		"ttl":             "168h0m0s -> 72h0m0s", // the projection bucket follows the stream's max_age
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("change %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("changes = %v, want exactly %v", got, want)
	}
	s, _ := js.Stream(ctx, "ORDER_EVENTS")
	if info, _ := s.Info(ctx); info.Config.MaxAge != 72*time.Hour || info.Config.MaxBytes != 1<<30 {
		t.Errorf("stored config not updated: %+v", info.Config)
	}
	c, _ := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
	if c.CachedInfo().Config.MaxAckPending != 2000 {
		t.Errorf("consumer max_ack_pending = %d", c.CachedInfo().Config.MaxAckPending)
	}
}

// A size that changes by less than its printed rounding is still a change:
// 1536MiB and 1546MiB both print as 1.5GiB.
func TestDeclareAppliesSizeChangesBelowRounding(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	cfg := orderstore.DefaultConfig()
	cfg.Stream.MaxBytes = 1536 << 20
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		t.Fatal(err)
	}
	cfg.Stream.MaxBytes = 1546 << 20
	res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.Changes {
		got = append(got, c.Object+" "+c.Field+": "+c.Before+" -> "+c.After)
	}
	if want := `stream "ORDER_EVENTS" max_bytes: 1536MiB -> 1546MiB`; !slices.Contains(got, want) {
		t.Errorf("changes %q, want %q among them", got, want)
	}
	s, _ := js.Stream(ctx, "ORDER_EVENTS")
	if info, _ := s.Info(ctx); info.Config.MaxBytes != 1546<<20 {
		t.Errorf("stored max_bytes %d, want %d", info.Config.MaxBytes, 1546<<20)
	}
}

// processor.max_deliver lives in the consumer's metadata (the consumer's
// own max_deliver stays -1: the processor enforces the limit), so a changed
// or missing value there is a safe change, applied and logged as a diff.
func TestDeclareAppliesMaxDeliverMetadata(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	cfg := orderstore.DefaultConfig()
	cfg.Processor.MaxDeliver = 5
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		t.Fatal(err)
	}
	const obj = `consumer "order-processor" on stream "ORDER_EVENTS"`
	stored := func() jetstream.ConsumerConfig {
		t.Helper()
		c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config
	}

	tests := []struct {
		name       string
		before     func() // what is stored before the Declare
		maxDeliver int
		change     bootstrap.Change
	}{
		{"changed 5 -> 7", func() {}, 7, bootstrap.Change{Object: obj, Field: "max_deliver", Before: "5", After: "7"}},
		{"missing on the stored consumer", func() {
			c := stored()
			delete(c.Metadata, "orderstore_max_deliver")
			if _, err := js.UpdateConsumer(ctx, "ORDER_EVENTS", c); err != nil {
				t.Fatal(err)
			}
			if _, ok := stored().Metadata["orderstore_max_deliver"]; ok {
				t.Fatal("could not remove the metadata to set up the test")
			}
		}, 7, bootstrap.Change{Object: obj, Field: "max_deliver", Before: "unset", After: "7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			cfg.Processor.MaxDeliver = tt.maxDeliver
			var logs strings.Builder
			logger := slog.New(slog.NewJSONHandler(&logs, nil))
			res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), logger)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Changes) != 1 || res.Changes[0] != tt.change {
				t.Errorf("changes = %+v, want exactly %+v", res.Changes, tt.change)
			}
			if want := fmt.Sprintf(`"key":"max_deliver","before":%q,"after":%q`, tt.change.Before, tt.change.After); !strings.Contains(logs.String(), want) {
				t.Errorf("log %s lacks the diff %s", logs.String(), want)
			}
			c := stored()
			if got, want := c.Metadata["orderstore_max_deliver"], fmt.Sprint(tt.maxDeliver); got != want {
				t.Errorf("stored metadata orderstore_max_deliver = %q, want %q", got, want)
			}
			if c.MaxDeliver != -1 {
				t.Errorf("consumer's own max_deliver = %d, want -1 (the processor enforces the limit)", c.MaxDeliver)
			}
			// Applied: declaring the same again changes nothing.
			res, err = bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Changes) != 0 {
				t.Errorf("Declare after the change changed %+v again, want nothing", res.Changes)
			}
		})
	}
}

func TestDeclareRefusesDestructiveChanges(t *testing.T) {
	tests := []struct {
		name   string
		change func(*jetstream.StreamConfig)
		field  string
	}{
		{"storage", func(s *jetstream.StreamConfig) { s.Storage = jetstream.MemoryStorage }, "storage"},
		{"retention", func(s *jetstream.StreamConfig) { s.Retention = jetstream.WorkQueuePolicy }, "retention"},
		{"subject removed", func(s *jetstream.StreamConfig) { s.Subjects = []string{"orders.created"} }, "subjects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := embeddedtest.JetStream(t, embeddedtest.Start(t))
			ctx := context.Background()
			spec := orderstore.DefaultConfig().DeclareSpec()
			if _, err := bootstrap.Declare(ctx, js, spec, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"1"}`)); err != nil {
				t.Fatal(err)
			}
			tt.change(&spec.Stream)
			_, err := bootstrap.Declare(ctx, js, spec, nil)
			var drift *bootstrap.DriftError
			if !errors.As(err, &drift) {
				t.Fatalf("Declare = %v, want *DriftError", err)
			}
			if len(drift.Changes) != 1 || drift.Changes[0].Field != tt.field {
				t.Errorf("drift = %+v, want one change of %s", drift.Changes, tt.field)
			}
			if !strings.Contains(err.Error(), "stored") || drift.Hint() == "" {
				t.Errorf("error %q / hint %q do not show the difference and the remedy", err, drift.Hint())
			}
			// The remedy works with orderstore stopped (it refused to
			// start): its own backup, not nats commands that need it.
			if !strings.Contains(drift.Hint(), "orderstore backup -offline DIR") || strings.Contains(drift.Hint(), "nats stream") {
				t.Errorf("hint %q: want orderstore's backup, no nats stream commands", drift.Hint())
			}
			// Nothing was changed: the event is still there.
			s, _ := js.Stream(ctx, "ORDER_EVENTS")
			info, _ := s.Info(ctx)
			if info.State.Msgs != 1 || info.Config.Storage != jetstream.FileStorage {
				t.Errorf("stream changed after a refused declare: %+v %+v", info.State, info.Config.Storage)
			}
		})
	}
}

func TestDeclareRefusesForeignConsumer(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	spec := orderstore.DefaultConfig().DeclareSpec()
	if _, err := js.CreateStream(ctx, spec.Stream); err != nil {
		t.Fatal(err)
	}
	// What `nats consumer add` with --ack none would leave behind.
	if _, err := js.CreateConsumer(ctx, "ORDER_EVENTS", jetstream.ConsumerConfig{Durable: "order-processor", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	_, err := bootstrap.Declare(ctx, js, spec, nil)
	var drift *bootstrap.DriftError
	if !errors.As(err, &drift) || !strings.Contains(drift.Hint(), "nats consumer rm ORDER_EVENTS order-processor") {
		t.Fatalf("Declare = %v (hint %q), want a drift naming the consumer rm command", err, hintOf(err))
	}
}

// After a power cut with a relaxed sync the stream can lose its tail while
// the durable remembers acks for the lost events (nats-server#5412): it
// would skip the next events published. Verify refuses that state.
func TestVerifyCatchesAckFloorAheadOfStream(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	spec := orderstore.DefaultConfig().DeclareSpec()
	if _, err := bootstrap.Declare(ctx, js, spec, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "orders.created", fmt.Appendf(nil, `{"order_id":"%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(3, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.AckFloor.Stream != 3 {
		t.Fatalf("ack floor after acking all 3 events = %d, want 3", ci.AckFloor.Stream)
	}
	// Acked up to the stream's last sequence: nothing to report.
	if err := bootstrap.Verify(ctx, js, spec); err != nil {
		t.Fatalf("Verify with the ack floor at the last sequence: %v", err)
	}

	// The stream loses events 2 and 3; the durable keeps its ack floor.
	// JetStream cannot lower a stream's last sequence in place (a purge
	// keeps it), and nats-server reconciles an R1 durable with a rolled
	// back stream when it restarts, so the state is built through the API:
	// the stream again, with event 1 only, and the durable back at the ack
	// floor it reached above.
	if err := js.DeleteStream(ctx, "ORDER_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, spec.Stream); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"0"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "ORDER_EVENTS", jetstream.ConsumerConfig{Durable: "order-processor", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: ci.AckFloor.Stream + 1}); err != nil {
		t.Fatal(err)
	}
	err = bootstrap.Verify(ctx, js, spec)
	if err == nil || !strings.Contains(err.Error(), "ack floor 3 is ahead of the stream's last sequence 1") {
		t.Fatalf("Verify = %v, want ack floor 3 ahead of last sequence 1", err)
	}
	if h := hintOf(err); !strings.Contains(h, "nats consumer rm ORDER_EVENTS order-processor") {
		t.Errorf("hint %q does not say how to reset the consumer", h)
	}
}

func hintOf(err error) string {
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// A projection bucket declared before orderstore asked for markers of
// expired records gets them (a watch of the bucket, the order index, then
// sees a record expire); a paused durable stays paused through a declare
// that updates it (a cluster's rebuild pauses it during its takeover).
func TestDeclareAddsExpiryMarkersAndKeepsAPause(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	cfg := orderstore.DefaultConfig()
	old := cfg.DeclareSpec()
	if old.Projection.LimitMarkerTTL == 0 {
		t.Fatal("the projection bucket is declared without markers of expired records")
	}
	old.Projection.LimitMarkerTTL = 0
	if _, err := bootstrap.Declare(ctx, js, old, nil); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC()
	if _, err := js.PauseConsumer(ctx, "ORDER_EVENTS", "order-processor", until); err != nil {
		t.Fatal(err)
	}
	cfg.Processor.AckWait = time.Minute // a change that updates the consumer
	res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range res.Changes {
		got[c.Field] = c.Before + " -> " + c.After
	}
	if got["limit_marker_ttl"] != "none -> 1h0m0s" || got["ack_wait"] != "30s -> 1m0s" {
		t.Errorf("changes %v, want limit_marker_ttl none -> 1h0m0s and ack_wait 30s -> 1m0s", got)
	}
	s, err := js.Stream(ctx, "KV_ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != time.Hour {
		t.Errorf("the bucket's stream: allow_msg_ttl %v, subject_delete_marker_ttl %s", c.AllowMsgTTL, c.SubjectDeleteMarkerTTL)
	}
	c, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor")
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); !ci.Paused || ci.Config.AckWait != time.Minute {
		t.Errorf("after the declare: paused %v (until %v), ack_wait %s; want still paused, 1m", ci.Paused, ci.Config.PauseUntil, ci.Config.AckWait)
	}
	if res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil || len(res.Changes) != 0 {
		t.Errorf("declared again: %v %v, want no change", res.Changes, err)
	}
}

// A hub's aggregate stream sources each stream through one subject
// transform per stream subject, and sources only what those match: a
// subject added to stream.subjects must reach the stored sources too, or
// the aggregate (and the processor reading it) never sees its events.
func TestDeclareUpdatesHubSourcesForAddedSubject(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	cfg := orderstore.DefaultConfig()
	cfg.Hub = orderstore.HubConfig{Stream: "ORDER_EVENTS_ALL"}
	cfg.Stream.MaxBytes = 1 << 20 // the aggregate takes as much again
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		t.Fatal(err)
	}
	cfg.Stream.Subjects = []string{"orders.>", "returns.>"}
	if _, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil {
		t.Fatal(err)
	}
	if res, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), nil); err != nil || len(res.Changes) > 0 {
		t.Fatalf("declared again: %v, changes %v; want none", err, res.Changes)
	}
	if _, err := js.Publish(ctx, "returns.created", []byte(`{"order_id":"1"}`)); err != nil {
		t.Fatal(err)
	}
	agg, err := js.Stream(ctx, "ORDER_EVENTS_ALL")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := agg.Info(ctx)
	if got := fmt.Sprint(info.Config.Sources[0].SubjectTransforms); !strings.Contains(got, "returns.>") {
		t.Fatalf("stored aggregate source transforms %s: returns.> is not sourced", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := agg.GetLastMsgForSubject(ctx, orderstore.HubLocalPrefix+".returns.created"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the aggregate never sourced returns.created: %v", err)
		}
	}
}
