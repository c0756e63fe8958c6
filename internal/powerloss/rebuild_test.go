//go:build linux

package powerloss_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/status"
)

// A power cut during a projection rebuild (docs/rebuild.md): the appliance
// runs on the power-loss file system (FUSE) with its admin listener;
// producers publish as in TestPowerLoss, a rebuild is started
// (POST /v1/projection/rebuild) while they do, and the power is cut at a
// random moment of one of its steps (cutAims, in turn): while the shadow
// folds (before and after its first checkpoint), during the takeover, or
// right after it ended. After the restart the same rebuild must end by
// itself (GET /v1/projection/rebuild: done, the same id; failed ends the
// test), and check must find what TestPowerLoss requires after any cut:
// every acknowledged event in the stream (strict modes; 1s: within its
// window), the projection equal to the fold of the stream (every mode),
// the history index equal to the stream (strict modes; logged in 1s).
//
// The stream is first filled with prefillEvents events, so that the
// first rebuild has something to fold; each cut's publishing adds more.
// Under -race a rebuild of a few thousand events takes 3 to 10 seconds
// here, most of it folding: a cut at a random moment within 2s of the
// start lands while it folds, hence the aims.

const prefillEvents = 3000

// rebuildConfig gives the appliance of TestPowerLossDuringRebuild an
// admin listener and room for the rebuild's shadow: max_file_store grows
// by what the shadow bucket and its history index reserve (the live
// ones' projection_max_bytes and history_max_bytes), as the 507 refusal
// asks.
func rebuildConfig(cfg *orderstore.Config) {
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.JetStream.MaxFileStore += cfg.Processor.ProjectionMaxBytes + cfg.Processor.HistoryMaxBytes
}

func TestPowerLossDuringRebuild(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-powerloss.seed %d repeats it), %d cuts per subtest", seed, seed, *cutsFlag)
	for i, m := range []syncMode{modes["group-commit"], modes["always"], modes["1s"]} {
		t.Run("fuse/"+m.name, func(t *testing.T) {
			runRebuildCuts(t, m, i, rand.New(rand.NewPCG(seed, uint64(100+len(m.name)))))
		})
	}
}

// runRebuildCuts starts the appliance, fills the stream, then *cutsFlag
// times: publishes, starts a rebuild, cuts the power while it folds,
// takes over or right after it ended (cutAims), restarts, waits for the
// rebuild to end and checks what came back.
func runRebuildCuts(t *testing.T, m syncMode, first int, r *rand.Rand) {
	t0 := time.Now()
	rg := newRig(t, false)
	l := &ledger{acked: map[uint64]*event{}}
	var tot totals
	env := envRebuild + "=1"
	c := rg.mustStart(t, m, 0, &tot, env)
	if c.admin == "" {
		t.Fatalf("the appliance's READY line names no admin address: %q", c.Ready)
	}
	prefill(t, c, l, prefillEvents)
	t.Logf("prefilled %d events in %s; %s", prefillEvents, time.Since(t0).Round(time.Millisecond), check(t, c, l, m, time.Time{}, &tot))
	atCut := map[string]int{}
	for cut := 1; cut <= *cutsFlag; cut++ {
		cycle := newCycle(t, c, l, cut)
		// Publish a while first, so that the rebuild folds and takes
		// over while events are in flight.
		before := time.Duration(200+r.IntN(800)) * time.Millisecond
		time.Sleep(before)
		if c.Exited() {
			t.Fatalf("cut %d: the appliance exited while publishing:\n%s", cut, c.Out.String())
		}
		aim := cutAims[(first+cut-1)%len(cutAims)]
		started := startRebuild(t, c, cut)
		postAt := time.Now()
		last := cutMoment(t, rg, c, cut, aim, postAt, r)
		after := time.Since(postAt).Round(time.Millisecond)
		rec := recorded(rg)
		stopAt := rg.powerCut(t, c)
		cycle.stop()
		acked := cycle.acked()
		tot.acked += acked
		state := "none"
		if last != nil {
			state = last.State
		}
		atCut[state]++
		t1 := time.Now()
		rg.restore(t)
		c = rg.mustStart(t, m, cut, &tot, env)
		t2 := time.Now()
		at := fmt.Sprintf("cut %d (aimed at %s), %s after the rebuild's start (%s of publishing before it), the last GET before the cut saw %s, rebuild.json said %s",
			cut, aim, after, before, describeRebuild(last), rec)
		firstState, end := waitRebuild(t, c, at, started.ID)
		t3 := time.Now()
		res := check(t, c, l, m, stopAt, &tot)
		t.Logf("%s; %d events acked in this run; after the restart the rebuild was %q, done %s later: %s; start %s, check %s; %s",
			at, acked, firstState, t3.Sub(t2).Round(time.Millisecond), describeRebuild(end),
			t2.Sub(t1).Round(time.Millisecond), time.Since(t3).Round(time.Millisecond), res)
		if t.Failed() {
			t.FailNow()
		}
	}
	var states []string
	for _, s := range slices.Sorted(maps.Keys(atCut)) {
		states = append(states, fmt.Sprintf("%s %d", s, atCut[s]))
	}
	fss := rg.fs.Stats()
	t.Logf("fuse/%s: %d cuts in %s, the rebuild at the cut: %s; %d events acked, %d lost (oldest lost acked %s before its cut); "+
		"projection mismatches after %d of the cuts, history index mismatches after %d; powerfs: %d writes, %d fsyncs, %d bytes and %d namespace entries discarded",
		m.name, *cutsFlag, time.Since(t0).Round(time.Millisecond), strings.Join(states, ", "), tot.acked, tot.lost, tot.maxLostAge.Round(time.Millisecond),
		tot.projMismatchCuts, tot.historyMismatchCuts, fss.Writes, fss.Fsyncs, fss.DiscardedBytes, fss.UndoneEntries)
}

// prefill publishes n events as fast as the appliance acks them and
// records them in the ledger.
func prefill(t *testing.T, c *child, l *ledger, n int) {
	t.Helper()
	nc, err := nats.Connect(c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(512))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(0, 1))
	type inflight struct {
		f  jetstream.PubAckFuture
		ev *event
	}
	for i := 0; i < n; {
		batch := make([]inflight, 0, 256)
		for ; len(batch) < cap(batch) && i < n; i++ {
			typ := eventTypes[r.IntN(len(eventTypes))]
			id := fmt.Sprintf("o-%d", r.IntN(orders))
			if r.IntN(4) == 0 {
				id = "hot"
			}
			body := map[string]string{"order_id": id, "event_id": fmt.Sprintf("pre-%d", i)}
			if r.IntN(3) == 0 {
				body["status"] = fmt.Sprintf("status-%d", r.IntN(5))
			}
			data, _ := json.Marshal(body)
			f, err := js.PublishAsync("orders."+typ, data)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, inflight{f, &event{subject: "orders." + typ, data: data}})
		}
		for _, b := range batch {
			select {
			case ack := <-b.f.Ok():
				b.ev.seq, b.ev.acked = ack.Sequence, time.Now()
				l.mu.Lock()
				l.acked[ack.Sequence] = b.ev
				l.mu.Unlock()
			case err := <-b.f.Err():
				t.Fatalf("prefill: %v", err)
			case <-time.After(time.Minute):
				t.Fatal("prefill: no ack in a minute")
			}
		}
	}
}

// Where the cuts aim, in turn (each subtest begins at another): a random
// moment within 2s of the rebuild's start (it folds then: the shadow is
// made, nothing is recorded of the fold yet), a random moment within
// 500ms of its first checkpoint (rebuild.json records a position), a
// random moment of the takeover (the copy lasts a few hundred
// milliseconds), and a random moment right after it ended. The last GET
// before the cut says where it landed.
const (
	aimStart      = "folding, within 2s of the start"
	aimCheckpoint = "folding, after a checkpoint"
	aimTakeover   = "taking over"
	aimDone       = "done"
)

var cutAims = []string{aimStart, aimCheckpoint, aimTakeover, aimDone}

// cutMoment waits for the moment to cut the power, aimed at a step of the
// rebuild started at postAt, and returns what the last GET before it saw.
func cutMoment(t *testing.T, rg *rig, c *child, cut int, aim string, postAt time.Time, r *rand.Rand) *status.Rebuild {
	t.Helper()
	var last *status.Rebuild
	get := func() {
		st, err := rebuildState(c)
		switch {
		case err != nil:
			t.Logf("cut %d: GET /v1/projection/rebuild: %v", cut, err)
		case st != nil:
			last = st
			if st.State == status.RebuildFailed || st.State == status.RebuildCanceled {
				t.Fatalf("cut %d: before the cut the rebuild ended %s: %s\n%s", cut, st.State, describeRebuild(st), rebuildLog(c))
			}
		}
	}
	// wait polls until cutAt.
	wait := func(cutAt time.Time) {
		for get(); time.Now().Before(cutAt); get() {
			time.Sleep(min(20*time.Millisecond, time.Until(cutAt)))
		}
	}
	// until polls closely until reached, or the rebuild is past state.
	until := func(state string, reached func() bool) bool {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
			get()
			switch {
			case reached():
				return true
			case last != nil && last.State != state && (state == status.RebuildFolding || last.State == status.RebuildDone):
				return false // past it
			case c.Exited():
				t.Fatalf("cut %d: the appliance exited during the rebuild:\n%s", cut, c.Out.String())
			case time.Now().After(deadline):
				t.Fatalf("cut %d: the rebuild did not reach %q in 2m: %s\n%s", cut, aim, describeRebuild(last), rebuildLog(c))
			}
		}
	}
	is := func(state string) func() bool { return func() bool { return last != nil && last.State == state } }
	switch aim {
	case aimStart:
		wait(postAt.Add(time.Duration(r.IntN(2000)) * time.Millisecond))
	case aimCheckpoint:
		if until(status.RebuildFolding, func() bool {
			rec := recorded(rg)
			return rec.State == status.RebuildFolding && rec.FromSeq > 0 && rec.Position >= rec.FromSeq
		}) {
			wait(time.Now().Add(time.Duration(r.IntN(500)) * time.Millisecond))
		}
	case aimTakeover:
		if until(status.RebuildTakingOver, is(status.RebuildTakingOver)) {
			wait(time.Now().Add(time.Duration(r.IntN(300)) * time.Millisecond))
		}
	case aimDone:
		if until(status.RebuildDone, is(status.RebuildDone)) {
			wait(time.Now().Add(time.Duration(r.IntN(300)) * time.Millisecond))
		}
	}
	return last
}

// rebuildFile is what the test reads of store_dir/rebuild.json, the
// rebuild's durable state: Fresh, the shadow is yet to be made.
type rebuildFile struct {
	State    string `json:"state"`
	FromSeq  uint64 `json:"from_seq"`
	Position uint64 `json:"position"`
	Fresh    bool   `json:"fresh"`
}

func (f rebuildFile) String() string {
	if f.State == "" {
		return "nothing"
	}
	s := fmt.Sprintf("%s at position %d", f.State, f.Position)
	if f.Fresh {
		s += " (fresh: no shadow yet)"
	}
	return s
}

// recorded is the rebuild's durable state as the appliance last wrote it
// (State "" when there is none).
func recorded(rg *rig) rebuildFile {
	var f rebuildFile
	if data, err := os.ReadFile(filepath.Join(rg.store, "rebuild.json")); err == nil {
		json.Unmarshal(data, &f)
	}
	return f
}

var adminClient = &http.Client{Timeout: 10 * time.Second}

// startRebuild posts a rebuild to the appliance's admin listener: it must
// be accepted (202).
func startRebuild(t *testing.T, c *child, cut int) *status.Rebuild {
	t.Helper()
	resp, err := adminClient.Post("http://"+c.admin+"/v1/projection/rebuild", "application/json", nil)
	if err != nil {
		t.Fatalf("cut %d: POST /v1/projection/rebuild: %v", cut, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cut %d: POST /v1/projection/rebuild: %s: %s", cut, resp.Status, body)
	}
	var st status.Rebuild
	if err := json.Unmarshal(body, &st); err != nil || st.ID == "" {
		t.Fatalf("cut %d: POST /v1/projection/rebuild: %s (%v)", cut, body, err)
	}
	return &st
}

// rebuildState is GET /v1/projection/rebuild: nil when none ran on the
// store (404).
func rebuildState(c *child) (*status.Rebuild, error) {
	resp, err := adminClient.Get("http://" + c.admin + "/v1/projection/rebuild")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var st status.Rebuild
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("%s: %v", body, err)
	}
	return &st, nil
}

// waitRebuild waits, after a restart, until the rebuild started before
// the cut (id) is done: it must go on by itself, as the same rebuild. It
// returns the state the first answer gave and the end.
func waitRebuild(t *testing.T, c *child, at, id string) (first string, end *status.Rebuild) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for ; ; time.Sleep(50 * time.Millisecond) {
		if c.Exited() {
			t.Fatalf("%s: the appliance exited while the rebuild should go on:\n%s", at, rebuildLog(c))
		}
		st, err := rebuildState(c)
		switch {
		case err != nil:
			t.Fatalf("%s: after the restart, GET /v1/projection/rebuild: %v", at, err)
		case st == nil:
			t.Fatalf("%s: after the restart no rebuild has run on this store (404), though the POST was accepted (202, rebuild %s):\n%s",
				at, id, rebuildLog(c))
		case st.ID != id:
			t.Fatalf("%s: after the restart the rebuild is %s (%s), not the one started before the cut (%s):\n%s",
				at, st.ID, describeRebuild(st), id, rebuildLog(c))
		}
		if first == "" {
			first = st.State
		}
		switch st.State {
		case status.RebuildDone:
			return first, st
		case status.RebuildFailed, status.RebuildCanceled:
			t.Fatalf("%s: after the restart the rebuild ended %s: %s\n%s", at, st.State, describeRebuild(st), rebuildLog(c))
		}
		if time.Now().After(deadline) {
			c.Quit(t)
			t.Fatalf("%s: the rebuild is not done 3m after the restart: %s\n%s", at, describeRebuild(st), rebuildLog(c))
		}
	}
}

func describeRebuild(st *status.Rebuild) string {
	if st == nil {
		return "no rebuild"
	}
	s := fmt.Sprintf("%s (position %d, %d of %d events", st.State, st.Position, st.Done, st.Total)
	if st.ToCopy > 0 {
		s += fmt.Sprintf(", copied %d of %d orders", st.Copied, st.ToCopy)
	}
	if st.State == status.RebuildDone {
		s += fmt.Sprintf(", rebuilt %d, partial %d, conflicts %d, untouched %d", st.Rebuilt, st.Partial, st.Conflicts, st.Untouched)
	}
	if st.Error != "" {
		s += ", error: " + st.Error
	}
	return s + ")"
}

// rebuildLog is what the appliance's output says of the rebuild and of
// its start-up: the lines naming the rebuild, and every warning and
// error (its whole output follows when the test fails).
func rebuildLog(c *child) string {
	var out []string
	for _, line := range strings.Split(c.Out.String(), "\n") {
		var rec struct{ Level, Msg, Component string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			if strings.HasPrefix(line, "START FAILED") || strings.HasPrefix(line, "hint:") {
				out = append(out, line)
			}
			continue
		}
		if rec.Component == "rebuild" || strings.Contains(rec.Msg, "rebuild") || strings.Contains(line, "_REBUILD") || rec.Level == "WARN" || rec.Level == "ERROR" {
			out = append(out, line)
		}
	}
	return "the appliance's log (rebuild, warnings, errors):\n" + strings.Join(out, "\n")
}
