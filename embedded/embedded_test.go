package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testenv"
)

func TestStartClientURLAndClose(t *testing.T) {
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":-1") || strings.HasSuffix(url, ":0") {
		t.Fatalf("ClientURL() = %q, want nats://127.0.0.1:<real port>", url)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to ClientURL: %v", err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream not usable over TCP: %v", err)
	}
	nc.Close()

	// Close twice, concurrently, then once more: all nil, Wait nil.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = srv.Close() }()
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil {
			t.Errorf("Close #%d = %v, want nil", i, e)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close after Close = %v, want nil", err)
	}
	select {
	case <-srv.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := srv.Wait(); err != nil {
		t.Errorf("Wait after Close = %v, want nil", err)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), time.Second); err == nil {
		c.Close()
		t.Errorf("client port %s still accepts after Close", url)
	}
}

func TestWaitReportsUnexpectedStop(t *testing.T) {
	srv := embeddedtest.Start(t)
	srv.NATSServer().Shutdown() // behind the wrapper's back, as a crash would
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the server stopped on its own")
	}
	if err := srv.Wait(); err == nil {
		t.Fatal("Wait() = nil after an unexpected stop, want an error")
	}
	srv.Close() // the helper's cleanup must not report it twice
}

func TestDefaultsAreLoopbackAndSyncAlways(t *testing.T) {
	srv := embeddedtest.Start(t)
	if !srv.SyncAlways() {
		t.Error("SyncAlways() = false with SyncInterval 0, want true")
	}
	o := srv.NATSServer()
	vz, err := o.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if vz.Host != "127.0.0.1" {
		t.Errorf("host = %q, want 127.0.0.1", vz.Host)
	}
	if !vz.JetStream.Config.SyncAlways {
		t.Error("nats-server SyncAlways = false, want true")
	}
	if vz.JetStream.Config.MaxStore != 10<<30 {
		t.Errorf("MaxStore = %d, want the explicit 10GiB of the helper", vz.JetStream.Config.MaxStore)
	}
}

func TestSyncIntervalConfigured(t *testing.T) {
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.SyncInterval = time.Second })
	vz, err := srv.NATSServer().Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if vz.JetStream.Config.SyncAlways || vz.JetStream.Config.SyncInterval != time.Second {
		t.Errorf("sync always=%v interval=%v, want false, 1s", vz.JetStream.Config.SyncAlways, vz.JetStream.Config.SyncInterval)
	}
}

// With GroupCommit every acked publish was covered by a round, which
// GroupCommitRound reports with the stream's name; SyncAlways is false.
func TestGroupCommitConfigured(t *testing.T) {
	var mu sync.Mutex
	acked := map[string]int{}
	srv := embeddedtest.Start(t, func(c *embedded.Config) {
		c.GroupCommit = true
		c.GroupCommitRound = func(stream string, acks int, _ time.Duration) {
			mu.Lock()
			acked[stream] += acks
			mu.Unlock()
		}
	})
	if srv.SyncAlways() {
		t.Error("SyncAlways() = true with GroupCommit")
	}
	js := embeddedtest.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GC", Subjects: []string{"gc.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := js.Publish(ctx, "gc.x", []byte("x")); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	// Each ack was sent by a round, which reports after it sent them.
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if acked["GC"] != 5 {
			return fmt.Errorf("rounds of stream GC released %d acks, want 5", acked["GC"])
		}
		return nil
	})
}

func TestPortInUseFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	begin := time.Now()
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: t.TempDir(), Port: port})
	took := time.Since(begin)
	if err == nil {
		srv.Close()
		t.Fatal("Start on a busy port succeeded")
	}
	if want := fmt.Sprintf("127.0.0.1:%d", port); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the address %s", err, want)
	}
	if took > 2*time.Second {
		t.Errorf("Start took %s to report a busy port, want < 2s", took)
	}
}

func TestUnusableStoreDirFailsFast(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err := embedded.Start(context.Background(), embedded.Config{StoreDir: filepath.Join(file, "store"), Port: -1})
	if err == nil {
		t.Fatal("Start with a store dir below a regular file succeeded")
	}
	if !strings.Contains(err.Error(), "storage directory") {
		t.Errorf("error %q does not carry nats' reason", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("took %s, want the fatal at once", took)
	}
}

func TestCanceledContextLeavesNoListener(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	begin := time.Now()
	srv, err := embedded.Start(ctx, embedded.Config{StoreDir: t.TempDir(), Port: port})
	if err == nil {
		srv.Close()
		t.Fatal("Start with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled in the chain", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("Start took %s with a canceled context", took)
	}
	// The port is free again: nothing was left listening.
	embeddedtest.WaitFor(t, 5*time.Second, func() error {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		return l.Close()
	})
}

func TestValidateReportsEveryField(t *testing.T) {
	err := embedded.Config{Port: 70000, SyncInterval: -1, SystemUser: "admin"}.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"StoreDir", "Port", "SyncInterval", "SystemPassword"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, missing %s", err, want)
		}
	}
}

// A route or leaf URL that does not parse is named by its field, not
// shown: it may hold a password.
func TestValidateShowsNoURLPassword(t *testing.T) {
	err := embedded.Config{StoreDir: t.TempDir(), Cluster: embedded.Cluster{Name: "c", Routes: []string{"nats://ops:route-secret@h:bad"}},
		ServerName: "n", LeafNode: embedded.LeafNode{Remotes: []embedded.LeafRemote{{URL: "nats-leaf://e:leaf-secret@h:%zz"}}}}.Validate()
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "Cluster.Routes[0]") || !strings.Contains(err.Error(), "LeafNode.Remotes[0].URL") {
		t.Errorf("Validate() = %v; want both URLs named by field, no password", err)
	}
}

// No error of Start shows a route's or leaf remote's password, not even a part that url.Parse
// quotes (a password with '/' or '#' unescaped ends the URL's host there).
func TestStartShowsNoURLPassword(t *testing.T) {
	for _, cfg := range []embedded.Config{
		{ServerName: "n", Cluster: embedded.Cluster{Name: "c", Port: -1, Routes: []string{"nats-route://ops:route-secret/1@h:6222"}}},
		{ServerName: "n", Cluster: embedded.Cluster{Name: "c", Port: -1, Routes: []string{"nats-route://ops:route-secret#1@h:6222"}}},
		{LeafNode: embedded.LeafNode{Remotes: []embedded.LeafRemote{{URL: "nats-leaf://e:leaf-secret?1@h:7422"}}}},
		{LeafNode: embedded.LeafNode{Remotes: []embedded.LeafRemote{{URL: "nats-leaf://e:leaf-secret@h:7422", DenyImports: []string{"a..b"}}}}},
	} {
		cfg.StoreDir, cfg.Port = t.TempDir(), -1
		srv, err := embedded.Start(context.Background(), cfg)
		if err == nil {
			srv.Close()
		}
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("Start() = %v; want an error without the password", err)
		}
	}
}

func TestDontListenInProcess(t *testing.T) {
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.DontListen = true })
	if u := srv.ClientURL(); u != "" {
		t.Errorf("ClientURL() = %q with DontListen, want \"\"", u)
	}
	js := embeddedtest.JetStream(t, srv)
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("in-process JetStream: %v", err)
	}
}

func TestSystemUserCanReachSystemAccount(t *testing.T) {
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.SystemUser, c.SystemPassword = "admin", "s3cret" })
	// Anonymous clients still land in the JetStream-enabled account.
	js := embeddedtest.JetStream(t, srv)
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("anonymous JetStream with a system user configured: %v", err)
	}
	sys, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	msg, err := sys.Request("$SYS.REQ.SERVER.PING.VARZ", nil, 2*time.Second)
	if err != nil {
		t.Fatalf("system request (what `nats server info` sends): %v", err)
	}
	if !strings.Contains(string(msg.Data), `"server_name":"orderstore"`) {
		t.Errorf("VARZ reply lacks the server name: %.200s", msg.Data)
	}
}

// TestEmbeddedImportsOnlyNATSAndStdlib guards the dependency direction of
// the design card: embedded is a leaf, whose nats-server is orderstore's
// patched copy (natsserver/), never the upstream module.
func TestEmbeddedImportsOnlyNATSAndStdlib(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/orderstore/orderstore/embedded").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	patched := false
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "github.com/orderstore/orderstore/embedded":
		case p == "github.com/orderstore/orderstore/natsserver/server":
			patched = true
		case strings.HasPrefix(p, "github.com/orderstore/orderstore/natsserver/"):
		case strings.HasPrefix(p, "github.com/nats-io/nats-server/"):
			t.Errorf("embedded depends on upstream's %s, not orderstore's patched copy", p)
		case strings.HasPrefix(p, "github.com/orderstore/"):
			t.Errorf("embedded depends on %s", p)
		case strings.Contains(p, "BurntSushi/toml"), strings.Contains(p, "prometheus"), strings.Contains(p, "oklog"):
			t.Errorf("embedded depends on %s", p)
		}
	}
	if !patched {
		t.Errorf("embedded does not link github.com/orderstore/orderstore/natsserver/server:\n%s", out)
	}
}

// TestCanceledDuringNATSStartShutsItDown cancels ctx while nats-server is
// inside its own Start (just begun, or recovering a stream) and checks that
// Start returns only once that Start has returned and the server is shut
// down: no listener, no nats-server goroutine left (a stream store left
// open keeps one), and the store free for the next server at once.
//
// nats-server is held deterministically: the logger blocks it on one of
// its own log lines until the test releases it.
func TestCanceledDuringNATSStartShutsItDown(t *testing.T) {
	tests := []struct {
		name string
		hold string // nats-server log line to hold it on
	}{
		{"just started", "Starting nats-server"},
		{"recovering a stream", "Starting restore for stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const msgs = 50
			store := t.TempDir()
			ctx := context.Background()

			// A first server leaves a stream behind to recover.
			srv1, err := embedded.Start(ctx, embedded.Config{StoreDir: store, Port: -1})
			if err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect("", nats.InProcessServer(srv1))
			if err != nil {
				t.Fatal(err)
			}
			js, _ := jetstream.New(nc)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RECOVER", Subjects: []string{"recover.>"}}); err != nil {
				t.Fatal(err)
			}
			for i := range msgs {
				if _, err := js.Publish(ctx, "recover.x", fmt.Appendf(nil, "%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			nc.Close()
			if err := srv1.Close(); err != nil {
				t.Fatal(err)
			}
			embeddedtest.WaitFor(t, 10*time.Second, noNATSGoroutines)

			port := freePort(t)
			gate := newStartGate(tt.hold)
			t.Cleanup(gate.open) // never leave nats-server blocked, whatever failed
			startCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			type result struct {
				srv *embedded.Server
				err error
			}
			res := make(chan result, 1)
			go func() {
				srv, err := embedded.Start(startCtx, embedded.Config{StoreDir: store, Port: port, Logger: slog.New(gate)})
				res <- result{srv, err}
			}()

			select {
			case <-gate.held:
			case r := <-res:
				t.Fatalf("Start returned (err %v) before nats-server logged %q", r.err, tt.hold)
			case <-time.After(30 * time.Second):
				t.Fatalf("nats-server did not log %q within 30s", tt.hold)
			}
			cancel()

			var r result
			select {
			case r = <-res:
				t.Errorf("Start returned (err %v) while nats-server's own Start was still running (held at %q), want it to wait for that Start and shut the server down after it", r.err, tt.hold)
				gate.open()
			case <-gate.waiting:
				// Start saw ctx end and says it waits for nats-server's Start.
				gate.open()
				select {
				case r = <-res:
				case <-time.After(30 * time.Second):
					t.Fatal("Start did not return within 30s after nats-server was released")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Start neither returned nor said it waits for nats-server within 30s of the cancel")
			}
			if r.err == nil {
				r.srv.Close()
				t.Fatal("Start succeeded after its ctx was canceled")
			}
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("Start error = %v, want context.Canceled in the chain", r.err)
			}

			// Right after Start returned: nothing listens on the client port ...
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				c.Close()
				t.Errorf("client port %d accepts connections after Start returned an error", port)
			}
			// ... nats-server is gone (a stream store left open keeps a
			// goroutine; the polling only lets exiting ones finish) ...
			embeddedtest.WaitFor(t, 10*time.Second, noNATSGoroutines)
			// ... and the store opens at once, with everything in it.
			srv2 := embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
			s, err := embeddedtest.JetStream(t, srv2).Stream(ctx, "RECOVER")
			if err != nil {
				t.Fatalf("stream after the aborted start: %v", err)
			}
			if n := s.CachedInfo().State.Msgs; n != msgs {
				t.Errorf("stream holds %d messages after the aborted start, want %d", n, msgs)
			}
		})
	}
}

// noNATSGoroutines reports the goroutines running nats-server code. The
// tests of this package run one after the other, each closing its servers,
// so none is expected between servers.
func noNATSGoroutines() error {
	var left []string
	for _, g := range testenv.Goroutines() {
		if strings.Contains(g, "orderstore/natsserver/") || strings.Contains(g, "nats-io/nats-server/") {
			left = append(left, g)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%d nats-server goroutines still running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	return nil
}

// startGate is a slog.Handler that holds nats-server on the first log line
// containing hold until open is called, and notes when embedded.Start logs
// that it waits for nats-server's Start.
type startGate struct {
	hold                  string
	held, waiting, resume chan struct{}
	heldOnce, waitingOnce sync.Once
	resumeOnce            sync.Once
}

func newStartGate(hold string) *startGate {
	return &startGate{hold: hold, held: make(chan struct{}), waiting: make(chan struct{}), resume: make(chan struct{})}
}

func (g *startGate) open() { g.resumeOnce.Do(func() { close(g.resume) }) }

func (g *startGate) Enabled(context.Context, slog.Level) bool { return true }

func (g *startGate) Handle(_ context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, g.hold):
		first := false
		g.heldOnce.Do(func() { first = true; close(g.held) })
		if first {
			<-g.resume
		}
	case strings.Contains(r.Message, "waiting for nats-server"):
		g.waitingOnce.Do(func() { close(g.waiting) })
	}
	return nil
}

func (g *startGate) WithAttrs([]slog.Attr) slog.Handler { return g }
func (g *startGate) WithGroup(string) slog.Handler      { return g }

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A stream export limited to named accounts, and a stream import mapped
// onto other subjects: what account A publishes on x.<rest> reaches B's
// subscribers on y.<rest>, and only B may import it.
func TestStreamExportToAccountsAndMappedImport(t *testing.T) {
	users := []embedded.User{{Name: "a", Password: "pa", Account: "A"}, {Name: "b", Password: "pb", Account: "B"}}
	srv := embeddedtest.Start(t, func(c *embedded.Config) {
		c.Accounts = []embedded.Account{
			{Name: "A", Exports: []embedded.Export{{Subject: "x.>", Stream: true, Accounts: []string{"B"}}}},
			{Name: "B", Imports: []embedded.Import{{Account: "A", Subject: "x.>", To: "y.>", Stream: true}}},
		}
		c.Users = users
	})
	a, err := nats.Connect(srv.ClientURL(), nats.UserInfo("a", "pa"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := nats.Connect(srv.ClientURL(), nats.UserInfo("b", "pb"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.SubscribeSync("y.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("x.one.two", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || m.Subject != "y.one.two" || string(m.Data) != "hi" {
		t.Fatalf("B received %v, %v; want \"hi\" on y.one.two", m, err)
	}

	// A third account may not import what A exports to B alone.
	_, err = embedded.Start(context.Background(), embedded.Config{StoreDir: t.TempDir(), Port: -1, Users: users,
		Accounts: []embedded.Account{
			{Name: "A", Exports: []embedded.Export{{Subject: "x.>", Stream: true, Accounts: []string{"B"}}}},
			{Name: "B"},
			{Name: "C", Imports: []embedded.Import{{Account: "A", Subject: "x.>", Stream: true}}},
		}})
	if err == nil || !strings.Contains(err.Error(), `stream import "x.>"`) {
		t.Fatalf("an import of an export to another account: %v, want it refused", err)
	}
	// An export to an account that does not exist is a config error.
	cfg := embedded.Config{StoreDir: t.TempDir(), Accounts: []embedded.Account{{Name: "A", Exports: []embedded.Export{{Subject: "x.>", Stream: true, Accounts: []string{"NOPE"}}}}}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `export of "x.>" to unknown account "NOPE"`) {
		t.Fatalf("Validate: %v, want the unknown account named", err)
	}
}

// Two servers on one StoreDir both acknowledge publishes, and the store then holds only one of
// them: a second Start on a StoreDir a running server holds is refused, naming the dir, and the
// dir is free again once the first has closed.
func TestSecondStartOnAStoreDirInUseIsRefused(t *testing.T) {
	store := t.TempDir()
	first := embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
	second, err := embedded.Start(context.Background(), embedded.Config{StoreDir: store, Port: -1})
	if err == nil {
		second.Close()
		t.Fatalf("a second Start on %q, which a running server holds, succeeded", store)
	}
	if !errors.Is(err, embedded.ErrLocked) || !strings.Contains(err.Error(), store) || !strings.Contains(err.Error(), "this process") {
		t.Errorf("second Start = %v, want ErrLocked naming %q and this process as its holder", err, store)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = store })
}
