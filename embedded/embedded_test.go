package embedded_test

import (
	"context"
	"errors"
	"fmt"
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
	waitFor(t, 5*time.Second, func() error {
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
// the design card: embedded is a leaf.
func TestEmbeddedImportsOnlyNATSAndStdlib(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/orderstore/orderstore/embedded").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "github.com/orderstore/orderstore/embedded":
		case strings.HasPrefix(p, "github.com/orderstore/"):
			t.Errorf("embedded depends on %s", p)
		case strings.Contains(p, "BurntSushi/toml"), strings.Contains(p, "prometheus"), strings.Contains(p, "oklog"):
			t.Errorf("embedded depends on %s", p)
		}
	}
}

func waitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	embeddedtest.WaitFor(t, timeout, f)
}
