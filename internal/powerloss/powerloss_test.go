//go:build linux

package powerloss_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/processor"

	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/internal/testkit"
)

var (
	cutsFlag   = flag.Int("powerloss.cuts", 3, "power cuts per variant and sync mode (the issue's long run: -powerloss.cuts=50)")
	strictFlag = flag.Bool("powerloss.strict", false, "strict POSIX namespace model: a name is durable only once its directory is fsynced "+
		"(nats and orderstore do not fsync the directories they create: expect losses)")
	seedFlag = flag.Uint64("powerloss.seed", 0, "random seed; 0 takes one from the clock (it is logged)")
)

const (
	envStore = "ORDERSTORE_POWERLOSS_STORE"
	envSync  = "ORDERSTORE_POWERLOSS_SYNC"
	// envRebuild "1": the appliance for TestPowerLossDuringRebuild (an
	// admin listener, room for a rebuild's shadow; rebuildConfig).
	envRebuild = "ORDERSTORE_POWERLOSS_REBUILD"
)

// With ORDERSTORE_POWERLOSS_STORE set the test binary is the appliance: it
// starts on that store, prints "READY <client url>" (with
// ORDERSTORE_POWERLOSS_REBUILD: "READY <client url> <admin address>") and
// runs until killed.
func TestMain(m *testing.M) {
	if store := os.Getenv(envStore); store != "" {
		os.Exit(runChild(store, os.Getenv(envSync)))
	}
	os.Exit(m.Run())
}

// applianceConfig is what the child runs: a store that fits a small disk
// (stream.max_bytes 256MiB + dead letters 256MiB + projection 512MiB +
// history index 64MiB = max_file_store 1GiB + 64MiB), an admin listener
// on a random loopback port (the order index is read over it), a random
// port, and redelivery within seconds of a restart.
func applianceConfig(store string, m syncMode) orderstore.Config {
	cfg := orderstore.DefaultConfig()
	cfg.JetStream.StoreDir = store
	cfg.JetStream.MaxFileStore = 1<<30 + 64<<20
	cfg.Processor.HistoryMaxBytes = 64 << 20
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.JetStream.Durability = m.durability
	cfg.JetStream.SyncInterval = m.interval
	if m.encrypted {
		cfg.JetStream.EncryptionKey = "powerloss-test-key-0123456789abcdef"
	}
	cfg.Stream.MaxBytes = 256 << 20
	cfg.Server.Port = -1
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Processor.AckWait = 2 * time.Second
	cfg.Processor.Backoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond}
	return cfg
}

func runChild(store, mode string) int {
	m, ok := modes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		return 2
	}
	cfg := applianceConfig(store, m)
	rebuild := os.Getenv(envRebuild) != ""
	if rebuild {
		rebuildConfig(&cfg)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	app, err := orderstore.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "START FAILED: %v\n", err)
		var h interface{ Hint() string }
		if errors.As(err, &h) {
			fmt.Fprintf(os.Stderr, "hint: %s\n", h.Hint())
		}
		return 1
	}
	fmt.Printf("READY %s %s\n", app.ClientURL(), app.AdminAddr())
	err = app.Wait()
	fmt.Fprintf(os.Stderr, "STOPPED: %v\n", err)
	return 1
}

type variant struct {
	name string
	ext4 bool
}

type syncMode struct {
	name       string
	durability string        // jetstream.durability
	interval   time.Duration // jetstream.sync_interval ("interval" only)
	encrypted  bool          // the store encrypted at rest
}

// strict reports whether the mode promises that no acknowledged event is
// lost.
func (m syncMode) strict() bool { return m.durability != orderstore.DurabilityInterval }

var modes = map[string]syncMode{
	"group-commit": {"group-commit", orderstore.DurabilityGroupCommit, 0, false},
	"always":       {"always", orderstore.DurabilityAlways, 0, false},
	"1s":           {"1s", orderstore.DurabilityInterval, time.Second, false},
	// Group commit on an encrypted store: nats encrypts each block as it
	// writes it, and one sync still covers every ack it releases.
	"group-commit-encrypted": {"group-commit-encrypted", orderstore.DurabilityGroupCommit, 0, true},
}

func TestPowerLoss(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-powerloss.seed %d repeats it), %d cuts per subtest", seed, seed, *cutsFlag)
	for _, v := range []variant{{"fuse", false}, {"ext4", true}} {
		for _, m := range []syncMode{modes["group-commit"], modes["always"], modes["1s"], modes["group-commit-encrypted"]} {
			t.Run(v.name+"/"+m.name, func(t *testing.T) {
				runCuts(t, v, m, rand.New(rand.NewPCG(seed, uint64(len(v.name)*10+len(m.name)))))
			})
		}
	}
}

// runCuts starts the appliance, publishes, cuts the power at a random
// moment, restarts it and checks what came back, *cutsFlag times.
func runCuts(t *testing.T, v variant, m syncMode, r *rand.Rand) {
	t0 := time.Now()
	rg := newRig(t, v.ext4)
	l := &ledger{acked: map[uint64]*event{}}
	var tot totals
	c := rg.mustStart(t, m, 0, &tot)
	check(t, c, l, m, time.Time{}, &tot)
	for cut := 1; cut <= *cutsFlag; cut++ {
		cycle := newCycle(t, c, l, cut)
		// The cut comes at a random moment, somewhere in the second
		// sync interval in relaxed mode, while events are in flight.
		runFor := time.Duration(300+r.IntN(1700)) * time.Millisecond
		deadline := time.Now().Add(runFor)
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if c.Exited() {
				t.Fatalf("cut %d: the appliance exited while publishing:\n%s", cut, c.Out.String())
			}
			if cycle.acked() == 0 || time.Now().Before(deadline) {
				return fmt.Errorf("%d acked", cycle.acked())
			}
			return nil
		})
		stopAt := rg.powerCut(t, c)
		cycle.stop()
		acked := cycle.acked()
		tot.acked += acked
		t1 := time.Now()
		rg.restore(t)
		t2 := time.Now()
		c = rg.mustStart(t, m, cut, &tot)
		t3 := time.Now()
		res := check(t, c, l, m, stopAt, &tot)
		t.Logf("cut %d after %s: %d events acked in this run; restore %s, start %s, check %s; %s", cut, runFor, acked,
			t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond), time.Since(t3).Round(time.Millisecond), res)
		if t.Failed() {
			t.FailNow()
		}
	}
	fss := rg.fs.Stats()
	t.Logf("%s/%s: %d cuts in %s: %d events acked, %d lost (oldest lost acked %s before its cut); "+
		"%d starts refused by the recovery check; projection mismatches after %d of the cuts, order index mismatches after %d; powerfs: %d writes, %d fsyncs, %d bytes and %d namespace entries discarded",
		v.name, m.name, *cutsFlag, time.Since(t0).Round(time.Millisecond), tot.acked, tot.lost, tot.maxLostAge.Round(time.Millisecond),
		tot.refused, tot.projMismatchCuts, tot.indexMismatchCuts, fss.Writes, fss.Fsyncs, fss.DiscardedBytes, fss.UndoneEntries)
}

// rig is the power-loss file system and, for the ext4 variant, the ext4
// file system on a loop device on it.
type rig struct {
	fs    *FS
	ext4  bool
	image string // on the FUSE mount
	mnt   string // where ext4 is mounted
	loop  *Loop
	store string
}

func newRig(t *testing.T, ext4 bool) *rig {
	t.Helper()
	if ext4 {
		testenv.Require(t, testenv.Ext4())
	}
	mode := Journal
	if *strictFlag {
		mode = Strict
	}
	p := mount(t, mode)
	rg := &rig{fs: p, ext4: ext4, store: filepath.Join(p.Mountpoint(), "store")}
	if !ext4 {
		return rg
	}
	rg.image = filepath.Join(p.Mountpoint(), "disk.img")
	rg.mnt = filepath.Join(t.TempDir(), "ext4")
	rg.store = filepath.Join(rg.mnt, "store")
	// 1.5GiB, sparse: room for max_file_store 1GiB plus the headroom.
	if err := MkfsExt4(rg.image, 3<<29); err != nil {
		t.Fatal(err)
	}
	fsync(t, p.Mountpoint()) // the image's name, for the strict model
	rg.attach(t)
	t.Cleanup(func() {
		if err := rg.detach(); err != nil {
			t.Errorf("unmount ext4: %v", err)
		}
	})
	return rg
}

func (rg *rig) attach(t *testing.T) {
	t.Helper()
	var err error
	if rg.loop, err = AttachLoop(rg.image); err != nil {
		t.Fatal(err)
	}
	if err := MountExt4(rg.loop.Path(), rg.mnt); err != nil {
		t.Fatal(errors.Join(err, rg.loop.Detach()))
	}
}

func (rg *rig) detach() error {
	if rg.loop == nil {
		return nil
	}
	err := errors.Join(Unmount(rg.mnt), rg.loop.Detach())
	rg.loop = nil
	return err
}

// mustStart starts the appliance. After any cut, in any durability mode,
// it must start by itself: a start it refuses ends the test.
func (rg *rig) mustStart(t *testing.T, m syncMode, cut int, tot *totals, env ...string) *child {
	t.Helper()
	c, err := rg.start(t, m.name, env...)
	if err != nil {
		tot.refused++
		t.Fatalf("cut %d: the appliance did not start on the store (%s):\n%s", cut, rg.store, err)
	}
	return c
}

// powerCut stops the appliance (so that it acks nothing after the cut),
// cuts the power and kills it. It returns when the appliance stopped.
func (rg *rig) powerCut(t *testing.T, c *child) time.Time {
	t.Helper()
	c.StopProcess(t)
	stopAt := time.Now()
	rg.fs.Cut()
	c.Kill(t)
	return stopAt
}

// restore brings the file systems back with what was durable at the cut;
// ext4 replays its journal when it is mounted again.
func (rg *rig) restore(t *testing.T) {
	t.Helper()
	if rg.ext4 {
		if err := rg.detach(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rg.fs.Restore(); err != nil {
		t.Fatal(err)
	}
	if rg.ext4 {
		rg.attach(t)
	}
}

// child is one appliance (or edge) process; url is what its READY line
// says: its client URL, and admin its admin listener's address when the
// line names one.
type child struct {
	*testkit.Child
	url, admin string
}

// start runs the test binary as the appliance on the store (env added)
// and waits until it is ready; the error is its output when it exited
// before.
func (rg *rig) start(t *testing.T, mode string, env ...string) (*child, error) {
	t.Helper()
	return startChild(t, "the appliance", append([]string{envStore + "=" + rg.store, envSync + "=" + mode}, env...)...)
}

// startChild runs the test binary with env added (which makes it a child
// of one kind: the appliance, an edge) and waits until it prints READY;
// the error is its output when it exited before. It is killed when the
// test ends (registered after the rig's cleanup: before the file systems
// are unmounted, also when the test fails).
func startChild(t *testing.T, what string, env ...string) (*child, error) {
	t.Helper()
	c, err := testkit.StartChild(t, what, env...)
	url, admin, _ := strings.Cut(c.Ready, " ")
	return &child{Child: c, url: url, admin: admin}, err
}

// recovered is what the appliance's log says it recovered at start-up:
// nats' "Restored ..." lines and every warning or error.
func (c *child) recovered() []string {
	var out []string
	for _, line := range strings.Split(c.Out.String(), "\n") {
		var rec struct {
			Level, Msg string
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if strings.Contains(rec.Msg, "Restored") || rec.Level == "WARN" || rec.Level == "ERROR" {
			out = append(out, strings.TrimSpace(rec.Level+" "+rec.Msg))
		}
	}
	return out
}

// event is one acknowledged publish.
type event struct {
	seq     uint64
	subject string
	data    []byte
	acked   time.Time
}

// ledger is every acknowledged event still expected in the stream, by
// stream sequence.
type ledger struct {
	mu    sync.Mutex
	acked map[uint64]*event
}

// cycle is one run of publishers between a start and a cut.
type cycle struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	nc     *nats.Conn
	mu     sync.Mutex
	n      int
}

const (
	publishers = 4
	window     = 16   // async publishes in flight per publisher
	rate       = 3000 // events per second at most, in total
	orders     = 300
)

var eventTypes = []string{"created", "paid", "packed", "shipped", "delivered", "cancelled"}

// newCycle starts the publishers: each publishes windows of async events
// at up to rate/publishers per second and records every ack.
func newCycle(t *testing.T, c *child, l *ledger, cut int) *cycle {
	t.Helper()
	nc, err := nats.Connect(c.url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cy := &cycle{cancel: cancel, nc: nc}
	for w := range publishers {
		cy.wg.Add(1)
		go func() {
			defer cy.wg.Done()
			r := rand.New(rand.NewPCG(uint64(cut), uint64(w)))
			start := time.Now()
			type inflight struct {
				f  jetstream.PubAckFuture
				ev *event
			}
			for i := 0; ctx.Err() == nil; {
				batch := make([]inflight, 0, window)
				for range window {
					typ := eventTypes[r.IntN(len(eventTypes))]
					id := fmt.Sprintf("o-%d", r.IntN(orders))
					if r.IntN(4) == 0 {
						id = "hot" // a quarter of the events: its history index seals chunks
					}
					body := map[string]string{"order_id": id, "event_id": fmt.Sprintf("c%d-p%d-%d", cut, w, i)}
					if r.IntN(3) == 0 {
						body["status"] = "status-" + strconv.Itoa(r.IntN(5))
					}
					i++
					data, _ := json.Marshal(body)
					f, err := js.PublishAsync("orders."+typ, data)
					if err != nil {
						break
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
						cy.mu.Lock()
						cy.n++
						cy.mu.Unlock()
					case <-b.f.Err():
					case <-ctx.Done():
						return
					}
				}
				// pace to rate/publishers events per second
				ahead := time.Duration(float64(i)/float64(rate/publishers)*float64(time.Second)) - time.Since(start)
				if ahead > 0 {
					select {
					case <-time.After(ahead):
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	t.Cleanup(cy.stop)
	return cy
}

func (cy *cycle) acked() int {
	cy.mu.Lock()
	defer cy.mu.Unlock()
	return cy.n
}

// stop ends the publishers: an ack that has not arrived is not counted.
func (cy *cycle) stop() {
	cy.cancel()
	cy.wg.Wait()
	cy.nc.Close()
}

type totals struct {
	acked, lost         int
	refused             int // starts refused by the recovery check
	maxLostAge          time.Duration
	projMismatchCuts    int
	indexMismatchCuts   int
	historyMismatchCuts int
}

// check verifies the appliance after a (re)start: every acked event is in
// the stream (relaxed: or was acked within the sync interval before
// stopAt), and once the processor caught up the projection is the fold.
// Lost events leave the ledger. It returns a one-line summary.
func check(t *testing.T, c *child, l *ledger, m syncMode, stopAt time.Time, tot *totals) string {
	t.Helper()
	nc, err := nats.Connect(c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := applianceConfig("", m)
	msgs := readStream(t, ctx, js, cfg.Stream.Name)

	// 1. acknowledged events
	l.mu.Lock()
	var lost []*event
	for seq, ev := range l.acked {
		if got, ok := msgs[seq]; !ok || got.subject != ev.subject || !bytes.Equal(got.data, ev.data) {
			lost = append(lost, ev)
			delete(l.acked, seq)
		}
	}
	expected := len(l.acked)
	l.mu.Unlock()
	slices.SortFunc(lost, func(a, b *event) int { return a.acked.Compare(b.acked) })
	var oldest time.Duration
	if len(lost) > 0 {
		oldest = stopAt.Sub(lost[0].acked)
	}
	tot.lost += len(lost)
	tot.maxLostAge = max(tot.maxLostAge, oldest)
	switch {
	case len(lost) > 0 && m.strict():
		for _, ev := range lost[:min(len(lost), 10)] {
			t.Errorf("acked event lost with durability %s: seq %d %s %s (acked %s before the cut)", m.name, ev.seq, ev.subject, ev.data, stopAt.Sub(ev.acked))
		}
		t.Errorf("%d acked events lost with durability %s", len(lost), m.name)
	case len(lost) > 0 && oldest > m.interval+time.Second:
		t.Errorf("%d acked events lost, the oldest acked %s before the cut: more than the documented window of sync_interval %s (+1s slack)", len(lost), oldest, m.interval)
	}

	// 2. the projection, once the processor caught up
	var ci *jetstream.ConsumerInfo
	caughtUp := func() error {
		if c.Exited() {
			t.Fatalf("the appliance exited:\n%s", c.Out.String())
		}
		cons, err := js.Consumer(ctx, cfg.Stream.Name, cfg.Processor.Durable)
		if err != nil {
			return err
		}
		if ci, err = cons.Info(ctx); err != nil {
			return err
		}
		if ci.NumPending != 0 || ci.NumAckPending != 0 {
			return fmt.Errorf("consumer %s: %d pending, %d ack pending", cfg.Processor.Durable, ci.NumPending, ci.NumAckPending)
		}
		return nil
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := caughtUp()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			// Where it stands, and every goroutine's stack (in the
			// appliance's output below).
			info, _ := json.MarshalIndent(ci, "", "  ")
			var sinfo []byte
			if s, err := js.Stream(ctx, cfg.Stream.Name); err == nil {
				sinfo, _ = json.MarshalIndent(s.CachedInfo().State, "", "  ")
			}
			c.Quit(t)
			t.Fatalf("the processor did not catch up in 90s: %v\nconsumer: %s\nstream: %s", err, info, sinfo)
		}
	}
	dead := map[uint64]bool{}
	dls, _, err := processor.ListDeadLetters(ctx, js, cfg.Processor.DeadLetterStream, 1, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dls {
		dead[d.OriginalSequence] = true
	}
	want := fold(msgs, dead)
	got := projection(t, ctx, js, cfg.Processor.ProjectionBucket)
	var diffs []string
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("%s: projection %+v, fold %+v", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: projection %+v, not in the fold", id, g))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		tot.projMismatchCuts++
		// In every mode the projection is the fold of what the stream
		// holds after the cut (orderstore rebuilds it when the store lost
		// what it had applied).
		for _, d := range diffs[:min(len(diffs), 10)] {
			t.Errorf("projection differs from the fold: %s", d)
		}
		t.Errorf("%d of %d orders differ from the fold (durability %s)", len(diffs), len(want), m.name)
	}
	// 3. the order index (GET /v1/orders): the projection's orders, each
	// in its status.
	var indexErr error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if indexErr = indexVsProjection(ctx, c.admin, got); indexErr == nil || time.Now().After(deadline) {
			break
		}
	}
	if indexErr != nil {
		tot.indexMismatchCuts++
		t.Errorf("the order index differs from the projection after the cut: %v", indexErr)
	}
	// 4. the history index: each order's indexed sequences are the
	// stream's events of that order (no hole, none foreign).
	holes := checkHistory(t, ctx, js, cfg, msgs, dead)
	if len(holes) > 0 {
		tot.historyMismatchCuts++
		for _, h := range holes[:min(len(holes), 10)] {
			if m.strict() {
				t.Errorf("history index differs from the stream: %s", h)
			} else {
				t.Logf("history index differs from the stream (durability %s: a chunk or a record written within the interval before the cut): %s", m.name, h)
			}
		}
	}
	var first uint64
	if len(msgs) > 0 {
		first = slices.Min(slices.Collect(maps.Keys(msgs)))
	}
	return fmt.Sprintf("after the restart: %d acked events expected and present, %d lost (oldest acked %s before the cut); stream %d events from seq %d; %d orders match the fold; %d orders' history differs; %d dead letters; appliance log: %s",
		expected, len(lost), oldest.Round(time.Millisecond), len(msgs), first, len(want)-len(diffs), len(holes), len(dls), strings.Join(c.recovered(), " | "))
}

// checkHistory compares each order's history index (the record's tail
// and its sealed chunks) with the stream's events of that order, and
// returns the differences.
func checkHistory(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg orderstore.Config, msgs map[uint64]storedMsg, dead map[uint64]bool) []string {
	t.Helper()
	want := map[string][]uint64{}
	for _, seq := range slices.Sorted(maps.Keys(msgs)) {
		if dead[seq] {
			continue
		}
		var b struct {
			OrderID string `json:"order_id"`
		}
		if json.Unmarshal(msgs[seq].data, &b) != nil || !processor.ValidOrderID(b.OrderID) {
			continue
		}
		want[b.OrderID] = append(want[b.OrderID], seq)
	}
	kv, err := js.KeyValue(ctx, cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, cfg.Processor.HistoryBucket())
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		e, err := kv.Get(ctx, id)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		var r struct {
			History       []uint64 `json:"history"`
			HistoryChunks int      `json:"history_chunks"`
		}
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for n := range r.HistoryChunks {
			c, err := hkv.Get(ctx, fmt.Sprintf("%s.%d", id, n))
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("%s: chunk %d of %d: %v", id, n, r.HistoryChunks, err))
				got = nil
				break
			}
			var seqs []uint64
			json.Unmarshal(c.Value(), &seqs)
			got = append(got, seqs...)
		}
		got = append(got, r.History...)
		slices.Sort(got)
		if !slices.Equal(got, want[id]) {
			diffs = append(diffs, fmt.Sprintf("%s: index lists %d sequences %v, the stream holds %d %v", id, len(got), clip(got), len(want[id]), clip(want[id])))
		}
	}
	return diffs
}

func clip(s []uint64) []uint64 { return s[:min(len(s), 8)] }

type storedMsg struct {
	subject string
	data    []byte
}

// readStream reads every message of the stream with an ordered consumer.
func readStream(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) map[uint64]storedMsg {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint64]storedMsg, info.State.Msgs)
	if info.State.Msgs == 0 {
		return out
	}
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := oc.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			t.Fatalf("read stream %s: %v (%d of %d read)", name, err, len(out), info.State.Msgs)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out[md.Sequence.Stream] = storedMsg{m.Subject(), m.Data()}
		if md.Sequence.Stream >= info.State.LastSeq {
			return out
		}
	}
}

// order is the part of a projected order the fold determines.
type order struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Events  int    `json:"events"`
	LastSeq uint64 `json:"last_seq"`
}

// fold computes the projection from the stream: per order, the status of
// its last event (its "status" field, else its type) and its event count,
// leaving out dead-lettered events.
func fold(msgs map[uint64]storedMsg, dead map[uint64]bool) map[string]order {
	seqs := slices.Sorted(maps.Keys(msgs))
	out := map[string]order{}
	for _, seq := range seqs {
		if dead[seq] {
			continue
		}
		m := msgs[seq]
		var body struct {
			OrderID string `json:"order_id"`
			Status  string `json:"status"`
		}
		if json.Unmarshal(m.data, &body) != nil || !processor.ValidOrderID(body.OrderID) {
			continue
		}
		o := out[body.OrderID]
		o.OrderID = body.OrderID
		o.Events++
		o.LastSeq = seq
		o.Status = body.Status
		if o.Status == "" {
			o.Status = m.subject[strings.LastIndexByte(m.subject, '.')+1:]
		}
		out[body.OrderID] = o
	}
	return out
}

// projection reads every order of the projection bucket.
func projection(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket string) map[string]order {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]order{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatalf("projection %q: %v", k, err)
		}
		var o order
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			t.Fatalf("projection %q: %v", k, err)
		}
		if o.Events == 0 {
			continue // only withheld (dead-lettered) events: no order
		}
		out[k] = o
	}
	return out
}

// indexVsProjection lists every order of the order index (GET /v1/orders,
// page by page, on the child's admin listener) and compares them with the
// projection's orders: the same orders, each in the same status.
func indexVsProjection(ctx context.Context, admin string, proj map[string]order) error {
	listed := map[string]string{}
	for cursor := ""; ; {
		u := "http://" + admin + "/v1/orders?limit=1000"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		var page struct {
			Orders []struct {
				OrderID string `json:"order_id"`
				Status  string `json:"status"`
			} `json:"orders"`
			Next  string `json:"next"`
			Error string `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("GET /v1/orders: %d %s (%v)", resp.StatusCode, page.Error, err)
		}
		for _, o := range page.Orders {
			if _, twice := listed[o.OrderID]; twice {
				return fmt.Errorf("%s listed twice", o.OrderID)
			}
			listed[o.OrderID] = o.Status
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	for id, o := range proj {
		if st, ok := listed[id]; !ok || st != o.Status {
			return fmt.Errorf("order %s: the projection says %q, the index %q (listed: %v)", id, o.Status, st, ok)
		}
	}
	if len(listed) != len(proj) {
		return fmt.Errorf("the index lists %d orders, the projection holds %d", len(listed), len(proj))
	}
	return nil
}
