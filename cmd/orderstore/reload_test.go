package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/status"
)

// A schema change applies from the next publish: SIGHUP reloads
// [validation] from the config file while orderstore runs; schemas that
// do not compile leave the running ones in place.
func TestSIGHUPReloadsValidation(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	cfg := writeConfig(t, dir, store, "")
	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	invalid := []byte(`{"order_id":"1","amount":-1}`)
	if _, err := js.Publish(ctx, "orders.created", invalid); err != nil {
		t.Fatalf("without a schema: %v", err)
	}
	schema := filepath.Join(dir, "created.json")
	if err := os.WriteFile(schema, []byte(`{"properties":{"amount":{"minimum":0}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same file, now with the schema.
	next, err := os.ReadFile(writeConfig(t, dir, store, "[validation]\nschemas = { created = \"created.json\" }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, next, 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGHUP)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		_, err := js.Publish(ctx, "orders.created", invalid)
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.Code != 422 {
			return fmt.Errorf("after SIGHUP with a schema: %v", err)
		}
		return nil
	})
	// The event stored before the schema is untouched.
	s, _ := js.Stream(ctx, "ORDER_EVENTS")
	if m, err := s.GetMsg(ctx, 1); err != nil || string(m.Data) != string(invalid) {
		t.Errorf("the first event: %q, %v", m.Data, err)
	}
	// A schema that does not compile: refused, the running one stays.
	if err := os.WriteFile(schema, []byte(`{"properties":`), 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGHUP)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), "the schemas do not compile; validation unchanged") {
			return fmt.Errorf("no log line for the bad schema yet")
		}
		return nil
	})
	_, err = js.Publish(ctx, "orders.created", invalid)
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.Code != 422 {
		t.Errorf("after a bad schema: %v, want the running schema to refuse", err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// sighupAt is the child's stderr (ORDERSTORE_TEST_SIGHUP_AT): when the
// first line holding marker is written, the writing thread sends itself
// SIGHUP, which the kernel delivers before the call returns: the signal
// lands at that line's moment of start-up, however loaded the machine.
type sighupAt struct {
	marker []byte
	once   sync.Once
}

func (s *sighupAt) Write(p []byte) (int, error) {
	n, err := os.Stderr.Write(p)
	if bytes.Contains(p, s.marker) {
		s.once.Do(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGHUP)
		})
	}
	return n, err
}

// A SIGHUP during start-up (systemctl reload while a long stream recovery
// runs) neither kills orderstore nor is lost: it starts, becomes ready, and
// then reloads [validation]. Go's default for SIGHUP, before orderstore
// asks for it, is to exit.
func TestSIGHUPDuringStartup(t *testing.T) {
	for _, at := range []string{`"msg":"orderstore starting"`, `"msg":"stream ready"`} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "")
			t.Setenv("ORDERSTORE_TEST_SIGHUP_AT", at)
			p := start(t, nil, "run", "-config", cfg)
			p.waitReady()
			embeddedtest.WaitFor(t, 20*time.Second, func() error {
				if !strings.Contains(p.stderr.String(), "SIGHUP: validation reloaded") {
					return errors.New("the SIGHUP sent during start-up was not handled once ready")
				}
				return nil
			})
			p.signal(syscall.SIGTERM)
			if code := p.wait(30 * time.Second); code != 0 {
				t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, p.stderr)
			}
		})
	}
}

// A reload that fails shows where an operator looks, not only in the log (systemctl reload reports
// success either way): /readyz stays ready with a warning, /v1/status names the file and the error
// (not /readyz, which answers anyone), and orderstore_config_last_reload_successful is 0, until a
// reload succeeds again.
func TestSIGHUPFailureShowsInReadyzAndMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[admin]\nlisten = \"127.0.0.1:0\"\n")
	good, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "run", "-config", cfg)
	p.waitReady()
	admin := p.adminURL(t)
	// reloadState is the reload warning of /readyz and of /v1/status ("" none) and the two
	// metrics' lines.
	reloadState := func() (warning, full string, metrics []string) {
		for path, w := range map[string]*string{"/readyz": &warning, "/v1/status": &full} {
			ready := getJSON(t, admin+path, 200) // a failed reload leaves the node ready
			for _, c := range ready["checks"].([]any) {
				if c := c.(map[string]any); c["name"] == "config_reload" {
					*w = fmt.Sprint(c["ok"], " ", c["reason"])
				}
			}
		}
		for _, l := range strings.Split(string(get(t, "GET", admin+"/metrics", "").body), "\n") {
			if strings.HasPrefix(l, "orderstore_config_last_reload_") {
				metrics = append(metrics, l)
			}
		}
		return warning, full, metrics
	}
	var started string // the success timestamp set at start
	if w, full, m := reloadState(); w != "" || full != "" || len(m) != 2 || m[0] == "" {
		t.Fatalf("after start: warnings %q %q, metrics %q; want none and two", w, full, m)
	} else {
		started = m[0]
	}
	breakAndWait := func(text, want string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p.signal(syscall.SIGHUP)
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			w, full, m := reloadState()
			if w != "true warning: the last reload failed: see config_reload in /v1/status, or the log" ||
				!strings.HasPrefix(full, "true warning: ") || !strings.Contains(full, cfg) || !strings.Contains(full, want) ||
				!strings.Contains(full, "reload again") || !slices.Equal(m, []string{started, "orderstore_config_last_reload_successful 0"}) {
				return fmt.Errorf("after a failed reload: warnings %q %q, metrics %q", w, full, m)
			}
			return nil
		})
	}
	breakAndWait(string(good)+"[[[\n", "toml")
	schema := filepath.Join(dir, "created.json")
	if err := os.WriteFile(schema, []byte(`{"properties":`), 0o600); err != nil {
		t.Fatal(err)
	}
	breakAndWait(string(good)+"[validation]\nschemas = { created = \"created.json\" }\n", schema)

	// Fixed: the next reload clears both.
	if err := os.WriteFile(schema, []byte(`{"properties":{"amount":{"minimum":0}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGHUP)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if w, full, m := reloadState(); w != "" || full != "" || len(m) != 2 || m[0] == started || m[1] != "orderstore_config_last_reload_successful 1" {
			return fmt.Errorf("after a good reload: warnings %q %q, metrics %q", w, full, m)
		}
		return nil
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// orderstore status names the checks that warn while ready (a failed reload, a dead-letter
// stream near full), not the recovery's summary, whose notes it prints one by one.
func TestStatusShowsWarnings(t *testing.T) {
	st := status.Status{Status: "ready", Checks: []status.Check{
		{Name: "config_reload", OK: true, Reason: "warning: the last reload failed"},
		{Name: "recovery", OK: true, Reason: "warning: start-up found a damaged store"},
		{Name: "connections", OK: true},
	}, Recovery: []string{"a note"}}
	var b strings.Builder
	printStatus(&b, st)
	if !hasLine(b.String(), `warning +config_reload: the last reload failed`) || strings.Contains(b.String(), "damaged store") ||
		!hasLine(b.String(), `recovery +a note`) {
		t.Errorf("status with warnings:\n%s", b.String())
	}
}
