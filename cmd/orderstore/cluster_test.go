package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Test 1 of the scale-out issue: a 3-node R3 cluster of real processes.
// While a producer publishes with acks, the stream leader is killed with
// SIGKILL: publishing resumes on a new leader, no acknowledged event is
// lost, the projection equals the fold of the stream, and the killed node
// restarts and catches up.
func TestClusterSIGKILLStreamLeader(t *testing.T) {
	bodies, urls := clusterNodes(t)
	dir := t.TempDir()
	cfgs := make([]string, 3)
	procs := make([]*proc, 3)
	for i := range 3 {
		cfgs[i] = writeConfig(t, dir, filepath.Join(dir, fmt.Sprint("store", i)), mergeTOML(bodies[i], "[admin]\nlisten = \"127.0.0.1:0\"\n"))
	}
	var wg sync.WaitGroup
	for i := range 3 {
		procs[i] = start(t, nil, "run", "-config", cfgs[i])
	}
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); procs[i].waitReady() }()
	}
	wg.Wait()

	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// leaderOf waits for ORDER_EVENTS to report a leader; the test fails
	// (naming when) if it has none within 60s, an election's bound many
	// times over.
	leaderOf := func(when string) string {
		t.Helper()
		var leader string
		embeddedtest.WaitFor(t, 60*time.Second, func() error {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := js.Stream(c, "ORDER_EVENTS")
			if err != nil {
				return fmt.Errorf("waiting for a leader of stream ORDER_EVENTS %s: stream info: %w", when, err)
			}
			cl := st.CachedInfo().Cluster
			if cl == nil || cl.Leader == "" {
				return fmt.Errorf("waiting for a leader of stream ORDER_EVENTS %s: stream info names none (cluster %+v)", when, cl)
			}
			leader = cl.Leader
			return nil
		})
		return leader
	}

	// The producer: each event is retried until acked (same Nats-Msg-Id,
	// so a retry whose first try was stored is a duplicate, not a second
	// event).
	statuses := []string{"created", "paid", "shipped", "delivered"}
	acked := map[string]bool{}
	var gap time.Duration // longest time from a failed try to the next ack
	publish := func(i int) {
		id := fmt.Sprintf("m-%d", i)
		data := fmt.Sprintf(`{"order_id":"o-%d","status":%q}`, i%40, statuses[(i/40)%4])
		var firstFail time.Time
		var lastErr error
		for {
			if !firstFail.IsZero() && time.Since(firstFail) > 90*time.Second {
				for k, p := range procs {
					t.Logf("node n%d log:\n%s", k+1, tail(p.stderr.String(), 4000))
				}
				t.Fatalf("event %s: no ack for 90s: %v", id, lastErr)
			}
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(c, "orders."+statuses[(i/40)%4], []byte(data), jetstream.WithMsgID(id))
			cancel()
			if err == nil {
				if !firstFail.IsZero() {
					gap = max(gap, time.Since(firstFail))
				}
				acked[id] = true
				return
			}
			lastErr = err
			if firstFail.IsZero() {
				firstFail = time.Now()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	const total = 600
	for i := range 200 {
		publish(i)
	}
	leader := leaderOf("before the kill")
	var killed int
	fmt.Sscanf(leader, "n%d", &killed)
	killed--
	procs[killed].cmd.Process.Signal(syscall.SIGKILL)
	procs[killed].wait(30 * time.Second)
	// A failure shows what every processor said, the killed one's too.
	all := append([]*proc(nil), procs...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for k, p := range append(all, procs[killed]) {
			var lines []string
			for _, l := range strings.Split(p.stderr.String(), "\n") {
				if strings.Contains(l, `"component":"processor"`) && !strings.Contains(l, `"level":"INFO"`) {
					lines = append(lines, l)
				}
			}
			name := fmt.Sprintf("n%d", k+1)
			if k == 3 {
				name = fmt.Sprintf("n%d after its restart", killed+1)
			}
			t.Logf("%s: processor warnings (%d):\n%s", name, len(lines), tail(strings.Join(lines, "\n"), 6000))
		}
	})
	t.Logf("killed the stream leader %s", leader)
	for i := 200; i < total; i++ {
		publish(i)
	}
	newLeader := leaderOf("after the kill")
	if newLeader == leader {
		t.Errorf("the leader is still %s after it was killed", leader)
	}
	t.Logf("new leader %s; longest wait for an ack across the kill: %s", newLeader, gap.Round(time.Millisecond))

	// Every acknowledged event is in the stream, once.
	fold := map[string]map[string]any{}
	seen := map[string]bool{}
	var st jetstream.Stream
	embeddedtest.WaitFor(t, 30*time.Second, func() (err error) { // the connection may be moving off the killed node
		st, err = js.Stream(ctx, "ORDER_EVENTS")
		return err
	})
	info := st.CachedInfo().State
	for seq := info.FirstSeq; seq <= info.LastSeq; seq++ {
		var m *jetstream.RawStreamMsg
		embeddedtest.WaitFor(t, 30*time.Second, func() (err error) {
			m, err = st.GetMsg(ctx, seq)
			return err
		})
		// Stored scoped to the producer's account ("ANONYMOUS:m-1").
		id := strings.TrimPrefix(m.Header.Get("Nats-Msg-Id"), "ANONYMOUS:")
		if seen[id] {
			t.Errorf("event %s stored twice", id)
		}
		seen[id] = true
		var ev map[string]any
		json.Unmarshal(m.Data, &ev)
		oid := ev["order_id"].(string)
		f := fold[oid]
		if f == nil {
			f = map[string]any{"events": 0, "seqs": []uint64(nil)}
			fold[oid] = f
		}
		f["status"], f["last_seq"], f["events"] = ev["status"], m.Sequence, f["events"].(int)+1
		f["seqs"] = append(fold[oid]["seqs"].([]uint64), m.Sequence) // for a failure's message
	}
	for id := range acked {
		if !seen[id] {
			t.Errorf("acknowledged event %s lost", id)
		}
	}
	if len(acked) != total {
		t.Errorf("%d acked, want %d", len(acked), total)
	}

	// The killed node comes back and catches up; then every node's
	// projection equals the fold.
	procs[killed] = start(t, nil, "run", "-config", cfgs[killed])
	procs[killed].waitReady()
	for i := range 3 {
		nci, err := nats.Connect(urls[i])
		if err != nil {
			t.Fatal(err)
		}
		defer nci.Close()
		jsi, _ := jetstream.New(nci)
		embeddedtest.WaitFor(t, 120*time.Second, func() error {
			kv, err := jsi.KeyValue(ctx, "ORDERS")
			if err != nil {
				return err
			}
			for oid, f := range fold {
				e, err := kv.Get(ctx, oid)
				if err != nil {
					return fmt.Errorf("node n%d: order %s: %w", i+1, oid, err)
				}
				var o struct {
					Status  string `json:"status"`
					LastSeq uint64 `json:"last_seq"`
					Events  int    `json:"events"`
				}
				json.Unmarshal(e.Value(), &o)
				if o.Status != f["status"] || o.LastSeq != f["last_seq"] || o.Events != f["events"] {
					dead := "unknown"
					if d, err := jsi.Stream(ctx, "ORDER_EVENTS_DLQ"); err == nil {
						dead = strconv.FormatUint(d.CachedInfo().State.Msgs, 10)
						// Why the first few were dead-lettered.
						for seq := d.CachedInfo().State.FirstSeq; seq > 0 && seq <= d.CachedInfo().State.LastSeq && seq < d.CachedInfo().State.FirstSeq+3; seq++ {
							if m, err := d.GetMsg(ctx, seq); err == nil {
								dead += fmt.Sprintf("; %s: %s", m.Header.Get("Orderstore-Original-Sequence"), m.Header.Get("Orderstore-Error"))
							}
						}
					}
					// Where the difference is: the bucket's replicas, the
					// consumer, and the order as the bucket's leader has it.
					where := ""
					if ks, err := jsi.Stream(ctx, "KV_ORDERS"); err == nil {
						ci := ks.CachedInfo()
						where += fmt.Sprintf("; bucket last_seq %d, cluster %+v", ci.State.LastSeq, ci.Cluster)
						for _, r := range ci.Cluster.Replicas {
							where += fmt.Sprintf(" replica %s current %v lag %d active %s", r.Name, r.Current, r.Lag, r.Active)
						}
					}
					if c, err := jsi.Consumer(ctx, "ORDER_EVENTS", "order-processor"); err == nil {
						ci := c.CachedInfo()
						where += fmt.Sprintf("; consumer ack floor %d, pending %d, ack pending %d, waiting %d", ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumWaiting)
					}
					if m, err := nci.Request("$JS.API.STREAM.MSG.GET.KV_ORDERS", []byte(`{"last_by_subj":"$KV.ORDERS.`+oid+`"}`), 5*time.Second); err == nil {
						where += "; the leader has " + tail(string(m.Data), 300)
					}
					return fmt.Errorf("node n%d: order %s = %s, fold %v (dead letters: %s%s)", i+1, oid, e.Value(), f, dead, where)
				}
			}
			return nil
		})
	}
	// Every node lists the orders by status as the fold has them (the
	// order index over its replica of the projection), and serves each
	// order's history.
	for i, p := range procs {
		admin := p.adminURL(t)
		embeddedtest.WaitFor(t, 60*time.Second, func() error {
			r := get(t, "GET", admin+"/v1/orders?limit=1000", "")
			var page struct {
				Orders []struct {
					OrderID string `json:"order_id"`
					Status  string `json:"status"`
				} `json:"orders"`
			}
			if r.code != 200 || json.Unmarshal(r.body, &page) != nil {
				return fmt.Errorf("node n%d: GET /v1/orders = %d %s", i+1, r.code, r.body)
			}
			if len(page.Orders) != len(fold) {
				return fmt.Errorf("node n%d lists %d orders, the fold has %d", i+1, len(page.Orders), len(fold))
			}
			for _, o := range page.Orders {
				if f := fold[o.OrderID]; f == nil || f["status"] != o.Status {
					return fmt.Errorf("node n%d lists %s in %q, the fold says %v", i+1, o.OrderID, o.Status, f)
				}
			}
			return nil
		})
		for oid, f := range fold {
			ev := getJSON(t, admin+"/v1/orders/"+oid+"/events?limit=1000", 200)
			if total, _ := ev["total"].(float64); int(total) != f["events"] {
				t.Errorf("node n%d: %s's history has %v events, the fold %v", i+1, oid, ev["total"], f["events"])
			}
			break // one order per node: the projection's comparison above covers the rest
		}
	}

	// Losing a node is no event's fault: nothing was dead-lettered, and no
	// node took its siblings' share of the durable for events taken by
	// someone else.
	if d, err := js.Stream(ctx, "ORDER_EVENTS_DLQ"); err != nil {
		t.Errorf("dead-letter stream: %v", err)
	} else if n := d.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d events dead-lettered across the kill of a node", n)
	}
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Errorf("exit %d", code)
		}
	}
	for k, p := range append(all, procs[killed]) {
		if strings.Contains(p.stderr.String(), "taken from the processor's durable") {
			t.Errorf("process %d logged events taken from the durable: a sibling's share taken for a thief's", k)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Backup and restore from the command line: `orderstore backup` against a
// running instance, `nats backup validate` on each stream's directory,
// `orderstore restore` into an empty store, which then starts with every
// event and the same projection.
func TestBackupRestoreCommands(t *testing.T) {
	cli := natsCLI(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[admin]\nlisten = \"127.0.0.1:0\"\n")
	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	adminURL := p.adminURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	for i := range 300 {
		if _, err := js.Publish(context.Background(), "orders.created", []byte(fmt.Sprintf(`{"order_id":"k-%d","status":"s%d"}`, i%17, i))); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	bdir := filepath.Join(dir, "backup")
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"backup", "-admin", adminURL, bdir}, &out, &errb); code != 0 {
		t.Fatalf("backup = %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ORDER_EVENTS\t300 messages") || !strings.Contains(errb.String(), "checksums verified") {
		t.Errorf("backup output:\n%s\n%s", out.String(), errb.String())
	}
	for _, s := range []string{"ORDER_EVENTS", "ORDER_EVENTS_DLQ", "KV_ORDERS"} {
		o, err := exec.Command(cli, "backup", "validate", filepath.Join(bdir, s)).CombinedOutput()
		if err != nil {
			t.Errorf("nats backup validate %s: %v\n%s", s, err, o)
		}
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)

	fresh := writeConfig(t, dir, filepath.Join(dir, "fresh"), "")
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"restore", "-config", fresh, bdir}, &out, &errb); code != 0 {
		t.Fatalf("restore = %d\n%s", code, errb.String())
	}
	// Into a store that holds streams: refused.
	if code := run(context.Background(), []string{"restore", "-config", fresh, bdir}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "already holds streams") {
		t.Errorf("restore into a full store = %d\n%s", code, errb.String())
	}
	p = start(t, nil, "run", "-config", fresh)
	url = p.waitReady()
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		kv, err := js.KeyValue(context.Background(), "ORDERS")
		if err != nil {
			return err
		}
		e, err := kv.Get(context.Background(), "k-16")
		if err != nil {
			return err
		}
		if !strings.Contains(string(e.Value()), `"status":"s288"`) {
			return fmt.Errorf("k-16 = %s", e.Value())
		}
		return nil
	})
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}
