// Command groupcommit measures what a durable ack costs: nats-server and orderstore with each
// durability side by side, under a Go load generator and natscli's `nats bench`. bench/README.md,
// "Group commit", says what each target and cell is and holds the figures.
//
//	go run ./bench/groupcommit                 # about 8 minutes on 2 cores
package main

import (
	"bufio"
	"cmp"
	"context"
	_ "embed"
	"encoding/csv"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
)

var (
	dir       = flag.String("dir", "", "directory for the stores (default: a temporary one under $TMPDIR); its disk is what is measured")
	cell      = flag.Duration("cell", 3*time.Second, "how long each load cell runs")
	producers = flag.String("producers", "1,8,64", "concurrent producers per cell")
	sizes     = flag.String("sizes", "128,1024", "event sizes in bytes")
	window    = flag.Int("window", 16, "extra cells with this many async publishes in flight per producer (64 producers, -window-sizes); 0 skips them")
	winSizes  = flag.String("window-sizes", "128", "event sizes in bytes of the -window cells")
	natsMsgs  = flag.Int("nats-bench-msgs", 20000, "messages per natscli `nats bench js pub async` run (sync runs take a tenth); 0 skips natscli")
	cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	noProc    = flag.Bool("no-processor", false, "run orderstore without its processor (the ingest path alone)")
	verbose   = flag.Bool("v", false, "print group commit's syncs per cell")
	reps      = flag.Int("reps", 3, "runs of each cell per target, in alternating order; the median is reported")
	processes = flag.Bool("processes", false, "run each target in a process of its own (this program again, with -serve), the load generator in this one: a target then has its own Go scheduler and GOMAXPROCS, as orderstore run or nats-server beside their clients; without it every target shares this process with the load generator, as in a Go program embedding orderstore")
	serve     = flag.String("serve", "", "internal (-processes): run this target on -dir, print its client URL, then answer a line on stdin with the events its processor handled")
	only      = flag.String("only", "", "comma-separated targets to run (nats-always, orderstore-always, orderstore-group-commit, nats-relaxed; orderstore-relaxed (sync_interval 2m: the embedding's cost without group commit), nats-layout-relaxed (stock nats-server, sync_interval 2m, with orderstore's account layout: the layout's own cost), orderstore-group-commit-validated and orderstore-group-commit-encrypted run only when named here)")
)

type target struct {
	name  string
	start func(dir string) (url string, stop func(), projected func() uint64, err error)
	// validated: the target refuses what orderCreatedSchema refuses, so
	// it runs only cells whose events are order-created events.
	validated bool
}

// validatedTarget is group commit with schema validation at ingest.
const validatedTarget = "orderstore-group-commit-validated"

type result struct {
	target, load string
	rate         float64
	p50, p99     time.Duration
	projected    float64 // events/s the processor acked in the cell
	backlog      uint64  // events not yet processed at the cell's end
	hasProc      bool
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	defer benchkit.TempDir(dir, "groupcommit-")()
	if *cpuProf != "" {
		stop, err := benchkit.CPUProfile(*cpuProf)
		if err != nil {
			log.Fatal(err)
		}
		defer stop()
	}
	targets := targets()
	if *serve != "" {
		serveTarget(targets)
		return
	}
	natsCLI := ""
	if *natsMsgs > 0 {
		natsCLI = findNATS()
	}
	where := map[bool]string{false: "in this process", true: "each in a process of its own"}[*processes]
	fmt.Printf("group commit figures: nats-server %s, %d CPU, stores in %s, %s per cell, %d reps (median), targets %s\n\n", server.VERSION, runtime.NumCPU(), *dir, *cell, *reps, where)
	// Every target runs at once (an idle one costs nothing); each load cell
	// runs on every target in turn, in an order that alternates between
	// reps, so that drift of the disk's fsync time favours none.
	type running struct {
		target
		url, dir  string
		projected func() uint64
	}
	var live []running
	for i, t := range targets {
		if !slices.Contains(strings.Split(*only, ","), t.name) && (*only != "" || i >= defaultTargets) {
			continue
		}
		d := filepath.Join(*dir, fmt.Sprintf("%d-%s", i, t.name))
		start := t.start
		if *processes {
			start = childTarget(t.name)
		}
		url, stop, projected, err := start(d)
		if err != nil {
			log.Fatalf("%s: %v", t.name, err)
		}
		defer stop()
		live = append(live, running{t, url, d, projected})
	}
	type cellSpec struct{ p, w, size int }
	var cells []cellSpec
	for _, size := range mustInts("sizes", *sizes) {
		for _, p := range mustInts("producers", *producers) {
			cells = append(cells, cellSpec{p, 1, size})
		}
	}
	if *window > 1 {
		for _, size := range mustInts("window-sizes", *winSizes) {
			cells = append(cells, cellSpec{64, *window, size})
		}
	}
	var results []result
	// runCell runs one cell on every live target but the validated one
	// when !orders (its events would be refused).
	runCell := func(orders bool, run func(rt running) result) {
		targets := slices.DeleteFunc(slices.Clone(live), func(rt running) bool { return rt.validated && !orders })
		byTarget := map[string][]result{}
		for rep := range *reps {
			order := slices.Clone(targets)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, rt := range order {
				r := run(rt)
				print(r)
				byTarget[rt.name] = append(byTarget[rt.name], r)
			}
		}
		for _, rt := range targets {
			results = append(results, benchkit.Middle(byTarget[rt.name], func(a, b result) int { return cmp.Compare(a.rate, b.rate) }))
		}
	}
	for _, c := range cells {
		payloads, orders := events(c.size)
		if !orders && slices.ContainsFunc(live, func(rt running) bool { return rt.validated }) {
			fmt.Printf("%d B is too small for an order-created event: %s skips the %d B cells\n", c.size, validatedTarget, c.size)
		}
		runCell(orders, func(rt running) result { return load(rt.url, rt.name, c.p, c.w, c.size, payloads, rt.projected) })
	}
	if natsCLI != "" {
		for _, mode := range []string{"sync", "async"} {
			// orders.bench: a type without a schema, accepted.
			runCell(true, func(rt running) result { return natsBench(natsCLI, rt.url, rt.name, mode, rt.dir) })
		}
	}
	table(results)
	validationCost(results)
}

// defaultTargets: the first targets run without -only, the others only when it names them.
const defaultTargets = 4

// targets is every target bench/groupcommit knows; each orderstore target
// that validates reads the schema from -dir.
func targets() []target {
	schema := filepath.Join(*dir, "order-created.schema.json")
	if err := os.WriteFile(schema, []byte(orderCreatedSchema), 0o644); err != nil {
		log.Fatal(err)
	}
	return []target{
		{"nats-always", natsTarget(0), false},
		{"orderstore-always", orderstoreTarget(orderstore.DurabilityAlways, ""), false},
		{"orderstore-group-commit", orderstoreTarget(orderstore.DurabilityGroupCommit, ""), false},
		{"nats-relaxed", natsTarget(2 * time.Minute), false},
		{"orderstore-relaxed", orderstoreTarget(orderstore.DurabilityInterval, "", func(c *orderstore.Config) {
			c.JetStream.SyncInterval = 2 * time.Minute
		}), false},
		{"nats-layout-relaxed", natsLayoutTarget(2 * time.Minute), false},
		{validatedTarget, orderstoreTarget(orderstore.DurabilityGroupCommit, schema), true},
		// group commit on a store encrypted at rest (chacha20-poly1305)
		{"orderstore-group-commit-encrypted", orderstoreTarget(orderstore.DurabilityGroupCommit, "", func(c *orderstore.Config) {
			c.JetStream.EncryptionKey = "groupcommit-bench-key-0123456789abcdef"
		}), false},
	}
}

// childTarget starts target name in a process of its own (-processes):
// this program again with -serve, on dir.
func childTarget(name string) func(string) (string, func(), func() uint64, error) {
	return func(dir string) (string, func(), func() uint64, error) {
		c, err := benchkit.StartChild(nil, dir, os.Stderr, "-serve", name,
			"-no-processor="+strconv.FormatBool(*noProc), "-v="+strconv.FormatBool(*verbose))
		if err != nil {
			return "", nil, nil, err
		}
		var projected func() uint64
		if len(c.Ready) > 1 && c.Ready[1] == "processor" {
			projected = func() uint64 {
				fmt.Fprintln(c.In, "processed?")
				for c.Out.Scan() {
					if n, ok := strings.CutPrefix(c.Out.Text(), "processed "); ok {
						v, _ := strconv.ParseUint(n, 10, 64)
						return v
					}
					fmt.Println(c.Out.Text()) // -v's lines
				}
				log.Fatalf("%s: its process ended: %v", name, c.Out.Err())
				return 0
			}
		}
		return c.Ready[0], c.Stop, projected, nil
	}
}

// serveTarget is -serve: it runs the target named by -serve on -dir, prints "READY <url>
// processor|-", answers each line on stdin with "processed <n>" (the events its processor handled)
// and stops the target when stdin ends.
func serveTarget(targets []target) {
	i := slices.IndexFunc(targets, func(t target) bool { return t.name == *serve })
	if i < 0 {
		log.Fatalf("-serve: no target %q", *serve)
	}
	url, stop, projected, err := targets[i].start(*dir)
	if err != nil {
		log.Fatalf("%s: %v", *serve, err)
	}
	defer stop()
	proc := "-"
	if projected != nil {
		proc = "processor"
	}
	fmt.Println("READY", url, proc)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n uint64
		if projected != nil {
			n = projected()
		}
		fmt.Println("processed", n)
	}
}

// validationCost prints, per load, the validated target's rate and
// latencies against orderstore-group-commit's of the same run.
func validationCost(results []result) {
	plain := byLoad(results, "orderstore-group-commit")
	head := false
	for _, r := range results {
		p, ok := plain[r.load]
		if r.target != validatedTarget || !ok || p.rate == 0 {
			continue
		}
		if !head {
			fmt.Printf("\n| load | group commit msgs/s | validated msgs/s | validated / unvalidated | p50 (unvalidated / validated) | p99 (unvalidated / validated) |\n|---|---|---|---|---|---|\n")
			head = true
		}
		fmt.Printf("| %s | %.0f | %.0f | %.3f | %s / %s | %s / %s |\n", r.load, p.rate, r.rate, r.rate/p.rate, benchkit.Ms(p.p50), benchkit.Ms(r.p50), benchkit.Ms(p.p99), benchkit.Ms(r.p99))
	}
}

// byLoad is target's results by load.
func byLoad(results []result, target string) map[string]result {
	m := map[string]result{}
	for _, r := range results {
		if r.target == target {
			m[r.load] = r
		}
	}
	return m
}

func print(r result) {
	extra := ""
	if r.hasProc {
		extra = fmt.Sprintf(", projected %.0f/s, backlog %d", r.projected, r.backlog)
	}
	fmt.Printf("%-24s %-34s %9.0f msgs/s  p50 %-9s p99 %-9s%s\n", r.target, r.load, r.rate, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), extra)
}

// table prints the results as markdown, each rate also as a ratio against
// nats-always under the same load (results come a load at a time).
func table(results []result) {
	base := byLoad(results, "nats-always")
	lat := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return benchkit.Ms(d)
	}
	fmt.Printf("\n| load | target | msgs/s | × nats-server always | p50 | p99 | processor projected/s (backlog at end) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		ratio := "-"
		if b := base[r.load].rate; b > 0 {
			ratio = fmt.Sprintf("%.2f", r.rate/b)
		}
		proc := "-"
		if r.hasProc {
			proc = fmt.Sprintf("%.0f (%d)", r.projected, r.backlog)
		}
		fmt.Printf("| %s | %s | %.0f | %s | %s | %s | %s |\n", r.load, r.target, r.rate, ratio, lat(r.p50), lat(r.p99), proc)
	}
}

// natsTarget is a standalone nats-server with the given sync interval (0:
// always) and ORDER_EVENTS declared as orderstore declares it.
func natsTarget(syncInterval time.Duration) func(string) (string, func(), func() uint64, error) {
	return func(dir string) (string, func(), func() uint64, error) {
		opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
			JetStreamMaxStore: 10 << 30, JetStreamMaxMemory: 256 << 20, MaxPayload: 1 << 20}
		opts.SyncAlways, opts.SyncInterval = syncInterval == 0, syncInterval
		return startStock(opts)
	}
}

// layoutAccounts is orderstore's account layout in nats' config syntax, which bench/layout.sh
// reads too.
//
//go:embed layout.conf
var layoutAccounts string

// natsLayoutTarget is the stock nats-server with orderstore's account layout and no orderstore
// code: the stream in one account, the clients in another that imports the stream's subjects, the
// JetStream API and acks as services and _INBOX.> as a stream (as bench/layout.sh). Against
// nats-relaxed it prices the layout; against orderstore-relaxed, what orderstore adds to it
// (admission, its hooks).
func natsLayoutTarget(syncInterval time.Duration) func(string) (string, func(), func() uint64, error) {
	return func(dir string) (string, func(), func() uint64, error) {
		conf := fmt.Sprintf(`max_payload: 1048576
jetstream { store_dir: %q, sync_interval: "%s", max_file_store: 10GB, max_memory_store: 256MB }
`, filepath.Join(dir, "store"), syncInterval) + layoutAccounts
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, nil, err
		}
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return "", nil, nil, err
		}
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			return "", nil, nil, err
		}
		opts.Host, opts.Port, opts.NoSigs, opts.NoLog = "127.0.0.1", -1, true, true
		return startStock(opts, nats.UserInfo("os", "os"))
	}
}

// startStock starts the stock nats-server with opts and declares
// ORDER_EVENTS as orderstore declares it, signed in with auth.
func startStock(opts *server.Options, auth ...nats.Option) (string, func(), func() uint64, error) {
	url, stop, err := benchkit.StartNATS(opts, func(ctx context.Context, js jetstream.JetStream) error {
		cfg := orderstore.DefaultConfig()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream.Name, Subjects: cfg.Stream.Subjects,
			Storage: jetstream.FileStorage, MaxAge: cfg.Stream.MaxAge, MaxBytes: cfg.Stream.MaxBytes, Duplicates: cfg.Stream.DuplicateWindow})
		return err
	}, auth...)
	return url, stop, nil, err
}

// orderstoreTarget is orderstore with durability; schema, when set, is
// the JSON Schema file every orders.created event is validated against.
func orderstoreTarget(durability, schema string, opts ...func(*orderstore.Config)) func(string) (string, func(), func() uint64, error) {
	return func(dir string) (string, func(), func() uint64, error) {
		cfg := benchkit.Config(dir)
		cfg.JetStream.Durability = durability
		for _, o := range opts {
			o(&cfg)
		}
		if schema != "" {
			cfg.Validation = orderstore.ValidationConfig{Schemas: map[string]string{"created": schema}, UnknownTypes: "accept"}
		}
		cfg.Processor.Enabled = !*noProc
		cfg.Logger = slog.New(slog.DiscardHandler)
		app, err := benchkit.Start(context.Background(), cfg)
		if err != nil {
			return "", nil, nil, err
		}
		lastSyncs, lastAcked := uint64(0), uint64(0)
		stats := func() uint64 {
			if *verbose {
				if st, err := benchkit.Status(app); err == nil && st.Ingest != nil && st.Ingest.Syncs > lastSyncs {
					in := st.Ingest
					fmt.Printf("    syncs %d (%.0f events/sync) p50 %.2fms p99 %.2fms mean %.2fms\n", in.Syncs-lastSyncs,
						float64(in.Acked-lastAcked)/float64(in.Syncs-lastSyncs), in.SyncP50Seconds*1000, in.SyncP99Seconds*1000, in.SyncSeconds.Sum/float64(in.SyncSeconds.Count)*1000)
					lastSyncs, lastAcked = in.Syncs, in.Acked
				}
			}
			return app.Stats().Processed
		}
		return app.ClientURL(), func() { benchkit.Stop(app) }, stats, nil
	}
}

// load runs p producers, each with w publishes in flight, for one cell,
// publishing payloads in turn on orders.created.
func load(url, name string, p, w, size int, payloads [][]byte, projected func() uint64) result {
	jss := make([]jetstream.JetStream, p)
	for i := range jss {
		nc, err := nats.Connect(url)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		defer nc.Close()
		jss[i], _ = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(w, 1)))
	}
	var before uint64
	if projected != nil {
		before = projected()
	}
	var n atomic.Int64
	lats := make([][]time.Duration, p)
	ctx, cancel := context.WithTimeout(context.Background(), *cell)
	defer cancel()
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range p {
		wg.Go(func() {
			js := jss[i]
			k := i
			if w <= 1 {
				for ctx.Err() == nil {
					k++
					t := time.Now()
					msg := &nats.Msg{Subject: "orders.created", Data: payloads[k%len(payloads)]}
					if _, err := js.PublishMsg(context.Background(), msg); err != nil {
						log.Fatalf("%s: publish: %v", name, err)
					}
					lats[i] = append(lats[i], time.Since(t))
					n.Add(1)
				}
				return
			}
			type fl struct {
				f jetstream.PubAckFuture
				t time.Time
			}
			var inflight []fl
			for ctx.Err() == nil || len(inflight) > 0 {
				for ctx.Err() == nil && len(inflight) < w {
					k++
					f, err := js.PublishAsync("orders.created", payloads[k%len(payloads)])
					if err != nil {
						log.Fatalf("%s: publish: %v", name, err)
					}
					inflight = append(inflight, fl{f, time.Now()})
				}
				head := inflight[0]
				inflight = inflight[1:]
				select {
				case <-head.f.Ok():
				case err := <-head.f.Err():
					log.Fatalf("%s: publish: %v", name, err)
				}
				lats[i] = append(lats[i], time.Since(head.t))
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	all := slices.Concat(lats...)
	slices.Sort(all)
	mode := "sync"
	if w > 1 {
		mode = fmt.Sprintf("async ×%d", w)
	}
	r := result{target: name, load: fmt.Sprintf("go: %d producers %s, %d B", p, mode, size), rate: float64(n.Load()) / elapsed.Seconds(), p50: benchkit.Quantile(all, 0.5), p99: benchkit.Quantile(all, 0.99)}
	if projected != nil {
		r.hasProc = true
		r.projected = float64(projected()-before) / elapsed.Seconds()
		// Backlog: what was stored and not yet processed.
		r.backlog = backlog(jss[0].Conn())
		catchUp(jss[0].Conn())
	}
	return r
}

// backlog is what the processor's consumer has not yet processed.
func backlog(nc *nats.Conn) uint64 {
	js, _ := jetstream.New(nc)
	c, err := js.Consumer(context.Background(), "ORDER_EVENTS", "order-processor")
	if err != nil {
		return 0
	}
	ci, err := c.Info(context.Background())
	if err != nil {
		return 0
	}
	return ci.NumPending + uint64(ci.NumAckPending)
}

// catchUp waits (up to a minute) until the processor has processed every
// event, so that cells do not inherit each other's backlog.
func catchUp(nc *nats.Conn) {
	for i := 0; i < 600 && backlog(nc) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// natsBench runs natscli's `nats bench js pub sync|async` on orders.bench
// into ORDER_EVENTS and reads its CSV.
func natsBench(cli, url, name, mode, dir string) result {
	if nc, err := nats.Connect(url); err == nil {
		catchUp(nc) // a processor still working off the cell before would slow this one
		defer func() { catchUp(nc); nc.Close() }()
	}
	msgs := *natsMsgs
	args := []string{"--server", url, "bench", "js", "pub", mode, "orders.bench", "--stream", "ORDER_EVENTS", "--size", "128", "--no-progress"}
	if mode == "sync" {
		msgs /= 10
	} else {
		args = append(args, "--batch", "500")
	}
	out := filepath.Join(dir, "natsbench-"+mode+".csv")
	args = append(args, "--msgs", strconv.Itoa(msgs), "--csv", out)
	cmd := exec.Command(cli, args...)
	cmd.Env = append(os.Environ(), "NATS_CONTEXT=")
	if b, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("%s: nats %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		log.Fatalf("%s: nats bench CSV: %v", name, err)
	}
	col := func(h string) float64 { // 0 when missing
		for i, c := range rows[0] {
			if strings.EqualFold(strings.TrimSpace(c), h) && i < len(rows[1]) {
				v, _ := strconv.ParseFloat(strings.TrimSpace(rows[1][i]), 64)
				return v
			}
		}
		return 0
	}
	return result{target: name, load: fmt.Sprintf("nats bench js pub %s, 128 B", mode), rate: col("MsgsPerSec"),
		p50: time.Duration(col("P50LatencyMicroSecs") * float64(time.Microsecond)),
		p99: time.Duration(col("P99LatencyMicroSecs") * float64(time.Microsecond))}
}

func findNATS() string {
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, "go", "bin", "nats")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	fmt.Println("natscli `nats` not found: its runs are skipped (go install github.com/nats-io/natscli/nats@v0.5.0)")
	return ""
}

func mustInts(name, s string) []int {
	n, err := benchkit.Ints(name, s)
	if err != nil {
		log.Fatal(err)
	}
	return n
}
