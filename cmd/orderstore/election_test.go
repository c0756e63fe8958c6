package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Reliability row 11, the election: a 3-node R3 cluster of real
// processes under acked load, producers on the two nodes that stay up,
// publishing with nats.go's default options (js.Publish without a
// deadline: the client's 5 s timeout), two more on each starting at the
// kill. The stream leader is killed with SIGKILL. Until a new leader is
// elected the stream's subjects have no subscriber, which nats answers
// "no responders" at once; the ingest service waits that out and
// publishes again, so no producer sees a "no responders" failure. Every
// acknowledged event is in the stream once after the election. The
// other failures (publishes lost with the leader, timeouts) are counted
// and logged, not asserted.
func TestClusterElectionProducersSeeNoNoResponders(t *testing.T) {
	bodies, urls := clusterNodes(t)
	dir := t.TempDir()
	procs := make([]*proc, 3)
	for i := range 3 {
		cfg := writeConfig(t, dir, filepath.Join(dir, fmt.Sprint("store", i)), bodies[i]+"[admin]\nlisten = \"127.0.0.1:0\"\n")
		procs[i] = start(t, nil, "run", "-config", cfg)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { procs[i].waitReady() })
	}
	wg.Wait()
	dumpLogs := func() {
		for k, p := range procs {
			t.Logf("node n%d log:\n%s", k+1, tail(p.stderr.String(), 4000))
		}
	}

	ctx := context.Background()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	leaderOf := func() (string, error) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(c, "ORDER_EVENTS")
		if err != nil {
			return "", err
		}
		if cl := st.CachedInfo().Cluster; cl != nil && cl.Leader != "" {
			return cl.Leader, nil
		}
		return "", errors.New("the stream has no leader")
	}
	var leader string
	embeddedtest.WaitFor(t, 30*time.Second, func() (err error) {
		leader, err = leaderOf()
		return err
	})
	var killed int
	if _, err := fmt.Sscanf(leader, "n%d", &killed); err != nil {
		t.Fatalf("leader %q", leader)
	}
	killed--

	// Producers on the nodes that stay up, each publishing its own events
	// one at a time with the default options, retrying a failed one with
	// the same Nats-Msg-Id until it is acked.
	type failure struct {
		err       error
		took      time.Duration
		sinceKill time.Duration // when it was sent, from the kill (negative: before)
		producer  string
	}
	var (
		mu       sync.Mutex
		acked    = map[string]uint64{} // event id -> stream sequence
		failures []failure
		killedAt time.Time
		slowest  time.Duration // the longest successful publish after the kill
		// Failures whose event the retry found stored already (a
		// duplicate ack), by the failure's message.
		storedAnyway = map[string]int{}
	)
	ackedAfterKill := 0
	stop := make(chan struct{})
	var producers sync.WaitGroup
	statuses := []string{"created", "paid", "shipped", "delivered"}
	// produce starts a producer named name on each node that stays up.
	produce := func(name string) {
		for k := range 3 {
			if k == killed {
				continue
			}
			pnc, err := nats.Connect(urls[k])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pnc.Close)
			pjs, _ := jetstream.New(pnc)
			producer := fmt.Sprintf("n%d-%s", k+1, name)
			producers.Go(func() {
				for i := 0; ; i++ {
					id := fmt.Sprintf("%s-%d", producer, i)
					st := statuses[i%4]
					data := fmt.Appendf(nil, `{"order_id":"e-%d-%d","status":%q,"event_id":%q}`, k, i%20, st, id)
					var lastErr error
					for {
						select {
						case <-stop:
							return
						default:
						}
						began := time.Now()
						ack, err := pjs.Publish(context.Background(), "orders."+st, data, jetstream.WithMsgID(id))
						took := time.Since(began)
						mu.Lock()
						after := !killedAt.IsZero() && began.After(killedAt)
						var since time.Duration
						if !killedAt.IsZero() {
							since = began.Sub(killedAt)
						}
						if err == nil {
							if lastErr != nil && ack.Duplicate {
								storedAnyway[lastErr.Error()]++
							}
							acked[id] = ack.Sequence
							if after {
								ackedAfterKill++
								slowest = max(slowest, took)
							}
							mu.Unlock()
							break
						}
						failures = append(failures, failure{err, took, since, producer})
						lastErr = err
						mu.Unlock()
						select { // pace the retries of a failing publish
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				}
			})
		}
	}
	produce("w0")
	produce("w1")
	stopProducers := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		producers.Wait()
	}
	defer stopProducers()
	count := func() (all, afterKill int) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked), ackedAfterKill
	}
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if n, _ := count(); n < 200 {
			return fmt.Errorf("%d events acked before the kill", n)
		}
		return nil
	})

	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	procs[killed].cmd.Process.Signal(syscall.SIGKILL)
	// The producers above may wait on publishes the killed leader never
	// answers; two more start now, into the election.
	produce("p0")
	produce("p1")
	if code := procs[killed].wait(30 * time.Second); code != -int(syscall.SIGKILL) {
		t.Fatalf("the leader %s exited %d, want killed by SIGKILL", leader, code)
	}
	t.Logf("killed the stream leader %s under load", leader)

	// The load goes on until a new leader took over and producers were
	// acked by it.
	var newLeader string
	embeddedtest.WaitFor(t, 90*time.Second, func() error {
		l, err := leaderOf()
		if err != nil {
			return err
		}
		if l == leader {
			return fmt.Errorf("the leader is still %s", l)
		}
		newLeader = l
		if _, after := count(); after < 300 {
			return fmt.Errorf("new leader %s, %d events acked since the kill", l, after)
		}
		return nil
	})
	stopProducers()

	mu.Lock()
	defer mu.Unlock()
	kinds := map[string]int{}
	worst := map[string]time.Duration{}
	noResponders, immediate := 0, 0
	for i, f := range failures {
		msg := f.err.Error()
		if errors.Is(f.err, jetstream.ErrNoStreamResponse) || errors.Is(f.err, nats.ErrNoResponders) || strings.Contains(msg, "no responders") {
			noResponders++
		}
		if f.took < time.Second {
			immediate++
		}
		kinds[msg]++
		worst[msg] = max(worst[msg], f.took)
		if i < 30 {
			t.Logf("producer %s: a publish sent %s after the kill failed after %s: %v", f.producer, f.sinceKill.Round(time.Millisecond), f.took.Round(time.Millisecond), f.err)
		}
	}
	var lines []string
	for msg, n := range kinds {
		lines = append(lines, fmt.Sprintf("%5d x %q (slowest answer %s)", n, msg, worst[msg].Round(time.Millisecond)))
	}
	sort.Strings(lines)
	t.Logf("new leader %s; %d events acked, %d after the kill; slowest ack after the kill %s; %d failed publishes (%d answered within 1s, %d no responders)%s",
		newLeader, len(acked), ackedAfterKill, slowest.Round(time.Millisecond), len(failures), immediate, noResponders,
		strings.Join(append([]string{""}, lines...), "\n  "))
	for msg, n := range storedAnyway {
		t.Logf("%d publishes that failed with %q were stored all the same (the retry was acked as a duplicate)", n, msg)
	}
	if noResponders > 0 {
		dumpLogs()
		t.Errorf("%d publishes failed with no responders during the election: producers should wait for the new leader", noResponders)
	}

	// Every acknowledged event is in the stream, once.
	seen := map[string]int{}
	byIngest := map[string]map[string]int{}
	var st jetstream.Stream
	embeddedtest.WaitFor(t, 30*time.Second, func() (err error) {
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
		var ev struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.EventID == "" {
			t.Errorf("seq %d: not one of the test's events: %s", seq, m.Data)
			continue
		}
		seen[ev.EventID]++
		// Which node's ingest service stored it (each run stamps its own
		// epoch), by the node the producer is connected to.
		node, _, _ := strings.Cut(ev.EventID, "-")
		if byIngest[node] == nil {
			byIngest[node] = map[string]int{}
		}
		byIngest[node][m.Header.Get("Orderstore-Epoch")]++
	}
	for node, epochs := range byIngest {
		t.Logf("events of the producers on %s, by the epoch of the ingest service that stored them: %v", node, epochs)
	}
	lost, twice := 0, 0
	for id, n := range seen {
		if n > 1 {
			twice++
			if twice <= 5 {
				t.Errorf("event %s stored %d times", id, n)
			}
		}
	}
	for id := range acked {
		if seen[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged event %s lost", id)
			}
		}
	}
	if lost+twice > 0 {
		t.Errorf("%d of %d acknowledged events lost, %d events stored more than once", lost, len(acked), twice)
	}

	// What the ingest services counted: republishes while the stream had
	// no leader.
	for k, p := range procs {
		if k == killed {
			continue
		}
		s := getJSON(t, p.adminURL(t)+"/v1/status", 200)
		t.Logf("node n%d: guard %v", k+1, s["guard"])
	}
	for k, p := range procs {
		if k == killed {
			continue
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Errorf("node n%d exit %d", k+1, code)
		}
	}
}
