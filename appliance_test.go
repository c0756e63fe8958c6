package orderstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// A program in another module, importing only the root package and
// nats.go, starts the appliance, sees an order shipped, restarts on the
// same store and still sees it.
func TestProgramInAnotherModule(t *testing.T) {
	// The program's own module (testdata/embedprogram/go.mod, which
	// replaces orderstore with this checkout), as it is committed: `go run
	// .` there works for a reader as it does here, and a go.mod left
	// untidy by a change of orderstore's dependencies fails this test
	// (run go mod tidy in testdata/embedprogram).
	mod := filepath.Join("testdata", "embedprogram")
	const goTool = "go"
	env := append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	imports := exec.Command(goTool, "list", "-f", "{{join .Imports \" \"}}", ".")
	imports.Dir, imports.Env = mod, env
	out, err := imports.CombinedOutput()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s(hint: cd %s && go mod tidy)", mod, err, out, mod)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/orderstore/") && p != "github.com/orderstore/orderstore" {
			t.Errorf("the program imports %s; it should need only the root package", p)
		}
	}

	// It links orderstore's patched nats-server (natsserver/, with group
	// commit) with no replace directive of its own: a replace in
	// orderstore's go.mod would not reach it.
	deps := exec.Command(goTool, "list", "-deps", ".")
	deps.Dir, deps.Env = mod, env
	out, err = deps.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps in %s: %v\n%s", mod, err, out)
	}
	patched := false
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "github.com/orderstore/orderstore/natsserver/server":
			patched = true
		case strings.HasPrefix(p, "github.com/nats-io/nats-server/"):
			t.Errorf("the program links upstream's %s instead of orderstore's patched copy", p)
		}
	}
	if !patched {
		t.Errorf("the program does not link github.com/orderstore/orderstore/natsserver/server")
	}

	run := exec.Command(goTool, "run", ".", filepath.Join(t.TempDir(), "store"))
	run.Dir, run.Env = mod, env
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("go run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := "published orders.created as seq 1\npublished orders.shipped as seq 2\n" +
		"first run: order A-1001 is shipped after 2 events\n" +
		"after restart: order A-1001 is shipped after 2 events\n"
	if stdout.String() != want {
		t.Fatalf("program output:\n%s\nwant:\n%s\nstderr:\n%s", stdout.String(), want, stderr.String())
	}
}

// Close is idempotent and safe to call concurrently; every call returns
// the first one's result, and the store is free afterwards.
func TestCloseTwiceAndConcurrently(t *testing.T) {
	cfg := orderstoretest.Config(t)
	ctx := context.Background()
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = app.Close(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Close #%d: %v", i, err)
		}
	}
	if err := app.Close(ctx); err != nil {
		t.Errorf("Close after Close: %v", err)
	}
	if err := app.Wait(); err != nil {
		t.Errorf("Wait after Close = %v, want nil", err)
	}
	// The lock is released and nats is gone: the store starts again.
	app2, err := orderstore.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("restart on the same store: %v", err)
	}
	if err := app2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A second appliance on a store that is in use fails with ErrLocked and
// leaves nothing running: its admin listener never opened.
func TestSecondApplianceOnOneStore(t *testing.T) {
	app := orderstoretest.Start(t)
	cfg := app.Config()
	cfg.Admin.Listen = "127.0.0.1:0"
	_, err := orderstore.Start(context.Background(), cfg)
	if !errors.Is(err, orderstore.ErrLocked) {
		t.Fatalf("second Start = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), "orderstore.lock") {
		t.Errorf("error %q does not name the lock file", err)
	}
}

// A failure late in start-up (the admin port is busy) releases the lock and
// stops nats: the same config starts once the port is free.
func TestFailedStartCleansUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := orderstoretest.Config(t)
	cfg.Admin.Listen = ln.Addr().String()
	_, err = orderstore.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Start with a busy admin port = %v, want an error naming %s", err, ln.Addr())
	}
	var h orderstore.Hinted
	if !errors.As(err, &h) || !strings.Contains(h.Hint(), "admin.listen") {
		t.Errorf("error %q has no hint naming admin.listen", err)
	}
	ln.Close()
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start after the port was freed: %v", err)
	}
	if err := app.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A canceled ctx stops start-up promptly and leaves no listener behind.
func TestCanceledStartLeavesNothing(t *testing.T) {
	cfg := orderstoretest.Config(t)
	cfg.Admin.Listen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := orderstore.Start(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a canceled ctx = %v, want context.Canceled", err)
	}
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start after a canceled start: %v", err)
	}
	if err := app.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesEveryField(t *testing.T) {
	cfg := orderstore.DefaultConfig()
	cfg.Stream.MaxAge = -time.Hour
	cfg.Processor.MaxDeliver = 0
	cfg.JetStream.StoreDir = ""
	err := cfg.Validate()
	var ve *orderstore.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v, want *ValidationError", err)
	}
	var fields []string
	for _, p := range ve.Problems {
		fields = append(fields, p.Field)
	}
	// (A file's problems are named by its keys: internal/config's tests.)
	wantFields := []string{"JetStream.StoreDir", "Stream.MaxAge", "Processor.MaxDeliver"}
	if strings.Join(fields, " ") != strings.Join(wantFields, " ") {
		t.Errorf("fields %q, want %q", fields, wantFields)
	}
	if _, err := orderstore.Start(context.Background(), cfg); !errors.As(err, &ve) {
		t.Errorf("Start with an invalid config = %v, want *ValidationError", err)
	}
	if err := orderstore.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
}

// When a part fails (here the processor's consumer is deleted under it),
// Wait returns its error and readiness goes with it.
func TestWaitReportsAFailedPart(t *testing.T) {
	cfg := orderstoretest.Config(t)
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	if err := app.Ready(context.Background()); err != nil {
		t.Fatalf("Ready after Start: %v", err)
	}
	// No client may delete it (the durable guard): orderstore's own
	// connection does, as a part failing would.
	js := embeddedtest.JetStream(t, app)
	if err := js.DeleteConsumer(context.Background(), cfg.Stream.Name, cfg.Processor.Durable); err == nil || !strings.Contains(err.Error(), "orderstore's own consumer") {
		t.Fatalf("a client's delete of the processor's durable = %v, want the guard's refusal", err)
	}
	if err := orderstore.InternalJetStream(app).DeleteConsumer(context.Background(), cfg.Stream.Name, cfg.Processor.Durable); err != nil {
		t.Fatal(err)
	}
	err = app.Wait()
	if err == nil || !strings.Contains(err.Error(), cfg.Processor.Durable) {
		t.Fatalf("Wait = %v, want the processor's error naming its consumer", err)
	}
	if err := app.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "consumer") || !strings.Contains(err.Error(), "components: processor: ") {
		t.Errorf("Ready after the consumer vanished = %v, want not ready naming the consumer and the failed component", err)
	}
	if err := app.Close(context.Background()); err != nil {
		t.Errorf("Close after a failure: %v", err)
	}
}

// Close reports an admin request it had to cut off when ctx ended, instead
// of dropping http.Server.Shutdown's error.
func TestCloseReportsAdminShutdownError(t *testing.T) {
	cfg := orderstoretest.Config(t)
	cfg.Admin.Listen = "127.0.0.1:0"
	app, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A request whose headers never end keeps its connection in flight.
	conn, err := net.Dial("tcp", app.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/status HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// Connections are accepted in order: once a request on a second
	// connection is answered, the first is accepted and in flight.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + app.AdminAddr() + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = app.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "admin listener") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a request in flight = %v, want the admin shutdown's deadline error", err)
	}
	// Cut off or not, nats stopped and the store is free.
	app2, err := orderstore.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart after a cut-off Close: %v", err)
	}
	if err := app2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAccessors(t *testing.T) {
	app := orderstoretest.Start(t)
	ctx := context.Background()
	if !strings.HasPrefix(app.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("ClientURL = %q", app.ClientURL())
	}
	if app.AdminAddr() != "" {
		t.Errorf("AdminAddr = %q with the listener disabled", app.AdminAddr())
	}
	if _, err := app.Order(ctx, "nope"); !errors.Is(err, orderstore.ErrNotFound) {
		t.Errorf("Order(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := app.Order(ctx, "bad id with spaces"); !errors.Is(err, orderstore.ErrNotFound) {
		t.Errorf("Order(invalid) = %v, want ErrNotFound", err)
	}
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(ctx, "orders.created", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if app.Stats().Poison != 1 {
			return errors.New("poison event not dead-lettered yet")
		}
		return nil
	})
	dls, next, err := app.DeadLetters(ctx, 1, 10)
	if err != nil || len(dls) != 1 || next != 0 {
		t.Fatalf("DeadLetters = %v, %d, %v", dls, next, err)
	}
	if _, err := app.ReplayDeadLetter(ctx, 999); !errors.Is(err, orderstore.ErrNotFound) {
		t.Errorf("ReplayDeadLetter(999) = %v, want ErrNotFound", err)
	}
	lag, err := app.Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lag.AckFloor != 1 {
		t.Errorf("lag = %+v, want ack floor 1", lag)
	}
}

// A stream max_age under the history index's 2-minute dedupe window starts
// (the index's window follows the stream's max_age), and an event is
// projected with its history.
func TestShortMaxAgeStarts(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Stream.MaxAge = time.Minute
		c.Stream.DuplicateWindow = 30 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector
	defer cancel()
	if _, err := app.Publish(ctx, "orders.created", []byte(`{"order_id":"short-1"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		h, err := app.OrderEvents(ctx, "short-1", 0, 10)
		if err == nil && len(h.Events) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
