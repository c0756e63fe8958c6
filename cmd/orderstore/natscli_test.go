package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// natsCLI returns natscli v0.5.0: the one on PATH if it is that version,
// else one `go install`ed into a temp dir (the module proxy serves it; the
// build cache makes it quick after the first time). So `go test ./...` needs
// no install step, and natscli stays out of orderstore's go.mod.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		if out, err := exec.Command(p, "--version").Output(); err == nil && strings.TrimSpace(string(out)) == "v0.5.0" {
			return p
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@v0.5.0")
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install natscli v0.5.0: %v\n%s", err, out)
	}
	return filepath.Join(dir, "nats")
}

// The README's operator walkthrough, run with the real NATS CLI against the
// built binary: server info with the system user, stream info, core and
// acked publishes with dedupe, a durable consumer that resumes after a
// restart.
func TestNATSCLIWalkthrough(t *testing.T) {
	cli := natsCLI(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	cfg := writeConfig(t, dir, store, "[server]\nsystem_user = \"admin\"\nsystem_password = \"s3cret\"\n")
	if err := os.Chmod(cfg, 0o600); err != nil { // as the walkthrough does
		t.Fatal(err)
	}
	home := t.TempDir() // no contexts from the machine's ~/.config/nats
	nats := func(url string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"-s", url, "--timeout", "5s"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	expect := func(out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}

	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	if strings.Contains(p.stderr.String(), "readable by every user") {
		t.Errorf("the walkthrough's config makes orderstore warn:\n%s", p.stderr)
	}
	expect(nats(url, "--user", "admin", "--password", "s3cret", "server", "info"), "Version: 2.15.3",
		// Group commit: orderstore syncs, not nats (docs/durability.md).
		"Always sync writes to disk: false")
	expect(nats(url, "stream", "info", "ORDER_EVENTS"), "Subjects: orders.>", "Storage: File", "Duplicate Window: 2m0s")
	expect(nats(url, "pub", "orders.created", `{"order_id":"12345","status":"pending"}`), `Published 39 bytes to "orders.created"`)
	expect(nats(url, "pub", "-J", "orders.created", `{"order_id":"12346","status":"pending"}`, "-H", "Nats-Msg-Id:o-12346"), "Stored in Stream: ORDER_EVENTS Sequence: 2")
	expect(nats(url, "pub", "-J", "orders.created", `{"order_id":"12346","status":"pending"}`, "-H", "Nats-Msg-Id:o-12346"), "Sequence: 2 Duplicate: true")
	nats(url, "consumer", "add", "ORDER_EVENTS", "audit", "--pull", "--deliver", "all", "--ack", "explicit", "--filter", "orders.>", "--defaults")
	expect(nats(url, "consumer", "next", "ORDER_EVENTS", "audit", "--count", "1"), "str seq: 1", `"order_id":"12345"`, "Acknowledged message")
	expect(nats(url, "consumer", "info", "ORDER_EVENTS", "order-processor"), "Ack Policy: Explicit")

	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	p = start(t, nil, "run", "-config", cfg)
	url = p.waitReady()
	expect(nats(url, "stream", "info", "ORDER_EVENTS"), "Messages: 2")
	expect(nats(url, "consumer", "next", "ORDER_EVENTS", "audit", "--count", "1"), "str seq: 2", `"order_id":"12346"`)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

// natscli shows a validation refusal: the schema, the JSON pointer and the
// keyword (issue: "natscli shows it").
func TestNATSCLIShowsValidationErrors(t *testing.T) {
	cli := natsCLI(t)
	dir := t.TempDir()
	schema := filepath.Join(dir, "created.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","required":["order_id","amount"],"properties":{"amount":{"type":"number","minimum":0}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[validation]\nschemas = { created = \"created.json\" }\n")
	home := t.TempDir()
	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	nats := func(args ...string) (string, error) {
		cmd := exec.Command(cli, append([]string{"-s", url, "--timeout", "5s"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := nats("pub", "-J", "orders.created", `{"order_id":"1","amount":-3}`)
	if err == nil || !strings.Contains(out, schema) || !strings.Contains(out, `at /amount: keyword "minimum"`) || !strings.Contains(out, "nothing was stored") {
		t.Errorf("nats pub -J of an invalid event: %v\n%s", err, out)
	}
	out, err = nats("pub", "-J", "orders.created", `{"order_id":"1","amount":3}`)
	if err != nil || !strings.Contains(out, "Stored in Stream: ORDER_EVENTS Sequence: 1") {
		t.Errorf("nats pub -J of a valid event: %v\n%s", err, out)
	}
}
