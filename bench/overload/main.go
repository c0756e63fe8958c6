// Command overload offers orderstore and a standalone nats-server, each a child process (this
// program with -serve), ten times what orderstore sustains, and counts what became of every
// publish; -idle measures their idle memory instead. bench/README.md, "Overload", says how and
// holds the figures.
//
//	go run ./bench/overload                    # about 2 minutes on 2 cores
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/status"
)

var (
	dir        = flag.String("dir", "", "directory for the stores (default: a temporary one under $TMPDIR)")
	conns      = flag.Int("conns", 16, "pipelining client connections")
	window     = flag.Int("window", 256, "requests in flight per connection while the sustained rate is measured")
	factor     = flag.Float64("factor", 10, "offered load of the overload, as a multiple of orderstore's sustained acked rate")
	measure    = flag.Duration("measure", 10*time.Second, "how long the sustained rate is measured")
	duration   = flag.Duration("duration", 10*time.Second, "how long the overload is offered")
	quiet      = flag.Duration("quiet", 10*time.Second, "after a phase, answers are waited for until nothing changed (answers, events stored, orderstore's ingest waiting) for this long")
	late       = flag.Duration("late", 5*time.Second, "an answer later than this after its request is counted late (jetstream's default publish timeout)")
	size       = flag.Int("size", 128, "event size in bytes")
	only       = flag.String("only", "", "comma-separated targets to run (orderstore, nats-always); without orderstore, -rate sets the offered rate")
	rate       = flag.Float64("rate", 0, "offered rate of the overload in requests/s (default: -factor times orderstore's sustained rate)")
	serve      = flag.String("serve", "", "internal: run this target (orderstore or nats-always) in this process on -dir and print its URLs")
	logLevel   = flag.String("log", "warn", "what a target logs (to <dir>/<target>.log): error, warn or info")
	pprofAt    = flag.String("pprof", "", "serve net/http/pprof of each target on this address (e.g. 127.0.0.1:6060), to profile it under load")
	targetCPUs = flag.String("target-cpus", "", "run each target on these CPUs only (taskset -c syntax, e.g. 0), so that the load generator, run under taskset on the others, takes no CPU from it")
	idle       = flag.Duration("idle", 0, "instead of the load: start each target, leave it idle this long and report its resident memory (VmRSS), the standalone nats-server declaring every stream, consumer and bucket orderstore declares (issue 19: orderstore at most 1.3 times that)")
	natsBin    = flag.String("nats-server", "", "with -idle: a nats-server binary (v2.15.3: go install github.com/nats-io/nats-server/v2@v2.15.3) to measure as the standalone server instead of the one embedded in this program")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *serve != "" {
		if *pprofAt != "" {
			runtime.SetBlockProfileRate(int(time.Millisecond))
			go http.ListenAndServe(*pprofAt, nil)
		}
		runTarget(*serve, *dir)
		return
	}
	defer benchkit.TempDir(dir, "overload-")()
	names := []string{"orderstore", "nats-always"}
	if *only != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(strings.Split(*only, ","), n) })
	}
	if *idle > 0 {
		idleMemory(names)
		return
	}
	fmt.Printf("overload figures: nats-server %s, %d CPU, stores in %s; %d connections, %d B events; sustained: %d in flight per connection for %s; overload: %.0fx for %s; a phase ends when nothing changed for %s\n\n",
		server.VERSION, runtime.NumCPU(), *dir, *conns, *size, *window, *measure, *factor, *duration, *quiet)

	payload := []byte(`{"order_id":"ovl","pad":"`)
	payload = append(payload, strings.Repeat("x", max(0, *size-len(payload)-2))...)
	payload = append(payload, `"}`...)

	type report struct {
		name             string
		sustained        float64
		sustainedHWM     int64
		over             phase
		overHWM, overRSS int64
		guard            *status.GuardStats
	}
	var reports []report
	offered := *rate
	for _, name := range names {
		c, err := startChild(name, filepath.Join(*dir, name))
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		r := report{name: name}
		s := sustained(c, payload)
		r.sustained = s.acked / s.elapsed.Seconds()
		r.sustainedHWM, _ = c.mem()
		fmt.Printf("%-12s sustained: %8.0f acked/s (%d acked in %s; %d errors, %d unanswered, %d answered late), VmHWM %s\n",
			name, r.sustained, int64(s.acked), s.elapsed.Round(time.Millisecond), s.errs, s.unanswered, s.late, mib(r.sustainedHWM))
		if offered == 0 {
			if name != "orderstore" {
				log.Fatal("-rate is needed when orderstore does not run first")
			}
			offered = *factor * r.sustained
		}
		before := streamMsgs(c.url)
		r.over = overload(c, payload, offered)
		r.over.stored = streamMsgs(c.url) - before
		r.overHWM, r.overRSS = c.mem()
		if c.admin != "" {
			r.guard = adminStatus(c.admin).Guard
		}
		fmt.Printf("%-12s overload:  offered %.0f/s (sent %d in %s: %.0f/s), %.0f acked/s; %d acked, %d answered with an error %s, %d unanswered, %d answered after %s %s; %d stored; settled after %s; VmHWM %s (VmRSS %s at the end)%s\n",
			name, offered, r.over.sent, r.over.sendTime.Round(time.Millisecond), float64(r.over.sent)/r.over.sendTime.Seconds(),
			r.over.ackRate(), int64(r.over.acked), r.over.errs, codes(r.over.codes), r.over.unanswered, r.over.late, *late, codes(r.over.lateCodes), r.over.stored,
			r.over.elapsed.Round(time.Second), mib(r.overHWM), mib(r.overRSS), guardString(r.guard))
		c.Stop()
		reports = append(reports, r)
	}

	fmt.Printf("\n| target | sustained acked/s | offered/s (sent/s) | overload acked/s | answered with an error | unanswered | answered after %s | stored | peak RSS (VmHWM) |\n|---|---|---|---|---|---|---|---|---|\n", *late)
	for _, r := range reports {
		fmt.Printf("| %s | %.0f | %.0f (%.0f) | %.0f | %d %s | %d of %d | %d %s | %d | %s |\n", r.name, r.sustained, offered,
			float64(r.over.sent)/r.over.sendTime.Seconds(), r.over.ackRate(), r.over.errs, codes(r.over.codes), r.over.unanswered, r.over.sent,
			r.over.late, codes(r.over.lateCodes), r.over.stored, mib(r.overHWM))
	}
	fmt.Printf("\nreproduce: go run ./bench/overload -conns %d -window %d -factor %g -measure %s -duration %s -quiet %s -late %s -size %d\n",
		*conns, *window, *factor, *measure, *duration, *quiet, *late, *size)
}

// child is a target running in a process of its own.
type child struct {
	*benchkit.Child
	url, admin string
}

func startChild(name, d string) (*child, error) {
	logf, err := os.Create(d + ".log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var wrap []string
	if *targetCPUs != "" {
		wrap = []string{"taskset", "-c", *targetCPUs}
	}
	bc, err := benchkit.StartChild(wrap, d, logf, "-serve", name, "-log", *logLevel, "-pprof", *pprofAt, "-idle", idle.String())
	if err != nil {
		return nil, err
	}
	c := &child{Child: bc, url: bc.Ready[0]}
	if len(bc.Ready) > 1 {
		c.admin = bc.Ready[1]
	}
	return c, nil
}

// mem is the child's VmHWM and VmRSS in bytes.
func (c *child) mem() (hwm, rss int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Cmd.Process.Pid))
	if err != nil {
		return -1, -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmHWM:":
			hwm = kb << 10
		case "VmRSS:":
			rss = kb << 10
		}
	}
	return hwm, rss
}

// runTarget is the child: it starts the target on d, prints "READY <nats
// url> [<admin url>]" and runs until its stdin closes or a signal comes.
func runTarget(name, d string) {
	var url, admin string
	var stop func()
	switch name {
	case "orderstore":
		cfg := benchkit.Config(d)
		cfg.Admin.Listen = "127.0.0.1:0"
		var level slog.Level
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			log.Fatal(err)
		}
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		app, err := benchkit.Start(context.Background(), cfg)
		if err != nil {
			log.Fatalf("orderstore: %v", err)
		}
		url, admin = app.ClientURL(), "http://"+app.AdminAddr()
		stop = func() { benchkit.Stop(app) }
	case "nats-always":
		cfg := orderstore.DefaultConfig()
		opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: d, NoSigs: true, SyncAlways: true,
			JetStreamMaxStore: cfg.JetStream.MaxFileStore, JetStreamMaxMemory: 256 << 20, MaxPayload: int32(cfg.Server.MaxPayload),
			NoLog: *logLevel == "error"} // else to stderr: notices and warnings
		var err error
		url, stop, err = benchkit.StartNATS(opts, func(ctx context.Context, js jetstream.JetStream) error {
			if *idle > 0 {
				// What orderstore declares: the stream, the processor's
				// consumer, the dead letters, the projection and its history.
				_, err := bootstrap.Declare(ctx, js, cfg.DeclareSpec(), slog.New(slog.DiscardHandler))
				return err
			}
			_, err := js.CreateStream(ctx, cfg.DeclareSpec().Stream)
			return err
		})
		if err != nil {
			log.Fatalf("nats-server: %v", err)
		}
	default:
		log.Fatalf("unknown target %q", name)
	}
	fmt.Println("READY", url, admin)
	ctx, end := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() { io.Copy(io.Discard, os.Stdin); end() }()
	<-ctx.Done()
	stop()
}

// idleMemory starts each target in turn, leaves it idle for -idle and prints its resident memory,
// and orderstore's over the standalone server's.
func idleMemory(names []string) {
	fmt.Printf("idle memory: nats-server %s, %d CPU, stores in %s, each target idle for %s after it is ready\n\n| target | VmRSS | VmHWM |\n|---|---|---|\n",
		server.VERSION, runtime.NumCPU(), *dir, *idle)
	rss := map[string]int64{}
	for _, name := range names {
		start := startChild
		if name == "nats-always" && *natsBin != "" {
			start = startNATSServer
		}
		c, err := start(name, filepath.Join(*dir, name))
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		time.Sleep(*idle)
		hwm, r := c.mem()
		c.Stop()
		rss[name] = r
		fmt.Printf("| %s | %s | %s |\n", name, mib(r), mib(hwm))
	}
	if o, n := rss["orderstore"], rss["nats-always"]; o > 0 && n > 0 {
		fmt.Printf("\norderstore / standalone nats-server: %.2f (goal <= 1.3)\n", float64(o)/float64(n))
	}
}

// startNATSServer runs the -nats-server binary on d, with JetStream, on a
// free loopback port, and declares on it what orderstore declares.
func startNATSServer(_, d string) (*child, error) {
	port := benchkit.FreePorts(1)[0]
	cmd := exec.Command(*natsBin, "-js", "-sd", d, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	kill := func(err error) (*child, error) { cmd.Process.Kill(); cmd.Wait(); return nil, err }
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	for i := 0; ; i++ {
		if nc, err = nats.Connect(url); err == nil {
			break
		}
		if i == 100 {
			return kill(fmt.Errorf("%s did not start: %v", *natsBin, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := bootstrap.Declare(context.Background(), js, orderstore.DefaultConfig().DeclareSpec(), slog.New(slog.DiscardHandler)); err != nil {
		return kill(err)
	}
	return &child{Child: &benchkit.Child{Cmd: cmd, In: termOnClose{cmd, stdin}}, url: url}, nil
}

// termOnClose sends its process SIGTERM when closed: nats-server does not
// stop when its stdin closes, as the targets of this program do.
type termOnClose struct {
	cmd *exec.Cmd
	io.WriteCloser
}

func (t termOnClose) Close() error {
	t.WriteCloser.Close()
	return t.cmd.Process.Signal(syscall.SIGTERM)
}

// phase is what became of the requests of one phase.
type phase struct {
	sent, errs, unanswered int64
	late                   int64 // answered more than -late after they were sent
	stored                 int64 // events the stream gained in the phase
	acked                  float64
	codes, lateCodes       map[string]int64
	sendTime, elapsed      time.Duration
	start, lastAck         time.Time
}

// ackRate is acks per second from the phase's start to its last ack.
func (p phase) ackRate() float64 {
	if p.acked == 0 || !p.lastAck.After(p.start) {
		return 0
	}
	return p.acked / p.lastAck.Sub(p.start).Seconds()
}

// pipe is one client connection with a reply subject per request under
// one wildcard inbox subscription without pending limits.
type pipe struct {
	nc        *nats.Conn
	inbox     string
	answered  []atomic.Bool
	sentAt    []atomic.Int64 // UnixNano
	acked     atomic.Int64
	errs      atomic.Int64
	total     atomic.Int64
	late      atomic.Int64
	lastAck   atomic.Int64 // UnixNano
	mu        sync.Mutex
	codes     map[string]int64
	lateCodes map[string]int64 // what the late answers were
	slots     chan struct{}
}

// newPipes opens -conns pipes, each for max requests, slots of them in flight at most (0: any).
func newPipes(url string, max int, slots int) []*pipe {
	pipes := make([]*pipe, *conns)
	for i := range pipes {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			log.Fatal(err)
		}
		p := &pipe{nc: nc, inbox: nats.NewInbox(), answered: make([]atomic.Bool, max), sentAt: make([]atomic.Int64, max), codes: map[string]int64{}, lateCodes: map[string]int64{}}
		if slots > 0 {
			p.slots = make(chan struct{}, slots)
		}
		sub, err := nc.Subscribe(p.inbox+".*", p.onAnswer)
		if err != nil {
			log.Fatal(err)
		}
		sub.SetPendingLimits(-1, -1)
		if err := nc.Flush(); err != nil {
			log.Fatal(err)
		}
		pipes[i] = p
	}
	return pipes
}

func (p *pipe) onAnswer(m *nats.Msg) {
	i, err := strconv.Atoi(m.Subject[len(p.inbox)+1:])
	if err != nil || i < 0 || i >= len(p.answered) || p.answered[i].Swap(true) {
		return
	}
	now := time.Now().UnixNano()
	isLate := now-p.sentAt[i].Load() > int64(*late)
	if isLate {
		p.late.Add(1)
	}
	p.total.Add(1)
	if p.slots != nil {
		<-p.slots
	}
	code := "ack"
	if s := m.Header.Get("Status"); s != "" {
		code = "status " + s
	} else {
		var a struct {
			Seq   uint64 `json:"seq"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		switch json.Unmarshal(m.Data, &a); {
		case a.Error != nil:
			code = strconv.Itoa(a.Error.Code)
		case a.Seq == 0:
			code = "other"
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if isLate {
		p.lateCodes[code]++
	}
	if code == "ack" {
		p.acked.Add(1)
		p.lastAck.Store(now)
		return
	}
	p.errs.Add(1)
	p.codes[code]++
}

// request sends request i; false if the connection did not take it (it is not counted as sent).
func (p *pipe) request(subject string, i int, payload []byte) bool {
	p.sentAt[i].Store(time.Now().UnixNano())
	if err := p.nc.PublishRequest(subject, p.inbox+"."+strconv.Itoa(i), payload); err != nil {
		log.Printf("publish: %v (this connection stops sending)", err)
		return false
	}
	return true
}

// settle waits until every request sent is answered, or until nothing
// changed for -quiet: no answer came, the stream stored nothing more and
// (orderstore) admission's line holds nothing. It adds up the phase.
func settle(c *child, pipes []*pipe, sent []int, t0 time.Time, sendTime time.Duration) phase {
	want := int64(0)
	for i, p := range pipes {
		p.nc.FlushTimeout(time.Minute)
		want += int64(sent[i])
	}
	answered := func() int64 {
		n := int64(0)
		for _, p := range pipes {
			n += p.total.Load()
		}
		return n
	}
	state := func() string {
		s := fmt.Sprintf("%d %d", answered(), streamMsgs(c.url))
		if c.admin != "" {
			s += fmt.Sprintf(" %d", ingestWaiting(c.admin))
		}
		return s
	}
	last, lastChange := "", time.Now()
	for answered() < want {
		if st := state(); st != last {
			last, lastChange = st, time.Now()
		} else if time.Since(lastChange) > *quiet {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	ph := phase{sent: want, codes: map[string]int64{}, lateCodes: map[string]int64{}, sendTime: sendTime, elapsed: time.Since(t0), start: t0}
	for _, p := range pipes {
		ph.acked += float64(p.acked.Load())
		ph.errs += p.errs.Load()
		ph.late += p.late.Load()
		if l := time.Unix(0, p.lastAck.Load()); p.lastAck.Load() != 0 && l.After(ph.lastAck) {
			ph.lastAck = l
		}
		p.mu.Lock()
		for k, v := range p.codes {
			ph.codes[k] += v
		}
		for k, v := range p.lateCodes {
			ph.lateCodes[k] += v
		}
		p.mu.Unlock()
		p.nc.Close()
	}
	ph.unanswered = want - answered()
	return ph
}

// sustained keeps -window requests in flight on each of -conns
// connections for -measure; the acked rate is over -measure.
func sustained(c *child, payload []byte) phase {
	const maxPerConn = 4 << 20
	pipes := newPipes(c.url, maxPerConn, *window)
	sent := make([]int, len(pipes))
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := t0.Add(*measure)
	for i, p := range pipes {
		wg.Go(func() {
			for n := 0; n < maxPerConn && time.Now().Before(deadline); n++ {
				p.slots <- struct{}{}
				if !p.request("orders.sustained", n, payload) {
					return
				}
				sent[i]++
			}
		})
	}
	wg.Wait()
	sendTime := time.Since(t0)
	inWindow := int64(0) // acks within -measure
	for _, p := range pipes {
		inWindow += p.acked.Load()
	}
	ph := settle(c, pipes, sent, t0, sendTime)
	ph.acked, ph.elapsed = float64(inWindow), sendTime
	return ph
}

// overload pipelines requests paced at offered/s over -conns connections for -duration, as fast as
// the connections take them when they cannot keep the pace.
func overload(c *child, payload []byte, offered float64) phase {
	perConn := int(offered * duration.Seconds() / float64(*conns))
	pipes := newPipes(c.url, perConn, 0)
	sent := make([]int, len(pipes))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, p := range pipes {
		wg.Go(func() {
			per := offered / float64(*conns)
			for n := 0; n < perConn; {
				due := min(perConn, int(time.Since(t0).Seconds()*per)+1)
				for ; n < due; n++ {
					if !p.request("orders.overload", n, payload) {
						return
					}
					sent[i] = n + 1
				}
				if n < perConn {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return settle(c, pipes, sent, t0, time.Since(t0))
}

// adminStatus is orderstore's GET /v1/status on its admin listener.
func adminStatus(admin string) (st status.Status) {
	if resp, err := http.Get(admin + "/v1/status"); err == nil {
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&st)
	}
	return st
}

// ingestWaiting is orderstore's ingest.waiting: publishes waiting in admission's line.
func ingestWaiting(admin string) int64 {
	if in := adminStatus(admin).Ingest; in != nil {
		return in.Waiting
	}
	return -1
}

// streamMsgs is how many events ORDER_EVENTS holds.
func streamMsgs(url string) int64 {
	nc, err := nats.Connect(url)
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		return -1
	}
	return int64(s.CachedInfo().State.Msgs)
}

func guardString(g *status.GuardStats) string {
	if g == nil {
		return ""
	}
	return fmt.Sprintf("; guard held back %d, overloaded (429) %d, refused %d", g.HeldBack, g.Overloaded, g.Refused)
}

func codes(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}
