package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
)

// docs/security.md's "A secured node" example, run with the real NATS CLI
// over TLS against the built binary: each role does what that page's
// table says it may, and is refused the rest; a second producer listening
// on _INBOX.> sees none of the first one's acks.
func TestSecuredWithNATSCLI(t *testing.T) {
	cli := natsCLI(t)
	certs := orderstoretest.TLS(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), `[server]
system_user = "sys"
system_password = "sys-password-1"

[server.tls]
cert_file = "`+certs.ServerCert+`"
key_file = "`+certs.ServerKey+`"

[[server.users]]
user = "p1"
password = "p1-password-1"
role = "producer"

[[server.users]]
user = "p2"
password = "p2-password-1"
role = "producer"

[[server.users]]
user = "dash"
password = "dash-password-1"
role = "reader"

[[server.users]]
user = "ops"
password = "ops-password-1"
role = "admin"
`)
	home := t.TempDir()
	timeout := "5s"
	natsCmd := func(url, user, password string, args ...string) *exec.Cmd {
		cmd := exec.Command(cli, append([]string{"-s", url, "--timeout", timeout, "--tlsca", certs.CA, "--user", user, "--password", password}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
		return cmd
	}
	ok := func(url, user, password string, args ...string) string {
		t.Helper()
		out, err := natsCmd(url, user, password, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: nats %s: %v\n%s", user, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	refused := func(url, user, password string, args ...string) {
		t.Helper()
		// A refused request gets no answer: natscli waits its timeout.
		timeout = "1s"
		defer func() { timeout = "5s" }()
		out, err := natsCmd(url, user, password, args...).CombinedOutput()
		if err == nil {
			t.Errorf("%s may not, but did: nats %s\n%s", user, strings.Join(args, " "), out)
		}
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
	url := strings.Replace(p.waitReady(), "nats://", "tls://", 1)

	// p2 listens on everything a producer may subscribe to.
	listen := natsCmd(url, "p2", "p2-password-1", "sub", "_INBOX.>")
	var listened testkit.LockedBuffer
	listen.Stdout, listen.Stderr = &listened, &listened
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	defer listen.Process.Kill()
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(listened.String(), "Subscribing on _INBOX.>") {
			return errors.New("nats sub has not subscribed yet: " + listened.String())
		}
		return nil
	})

	expect(ok(url, "p1", "p1-password-1", "pub", "-J", "orders.created", `{"order_id":"s-1"}`, "-H", "Nats-Msg-Id:s-1"), "Stored in Stream: ORDER_EVENTS Sequence: 1")
	expect(ok(url, "p1", "p1-password-1", "pub", "-J", "orders.created", `{"order_id":"s-1"}`, "-H", "Nats-Msg-Id:s-1"), "Sequence: 1 Duplicate: true")
	expect(ok(url, "p1", "p1-password-1", "pub", "-J", "orders.shipped", `{"order_id":"s-1"}`), "Sequence: 2")
	refused(url, "p1", "p1-password-1", "stream", "info", "ORDER_EVENTS")
	refused(url, "p1", "p1-password-1", "consumer", "add", "ORDER_EVENTS", "mine", "--pull", "--defaults")
	refused(url, "p1", "p1-password-1", "kv", "get", "ORDERS", "s-1")
	refused(url, "p1", "p1-password-1", "stream", "purge", "ORDER_EVENTS", "-f")
	refused(url, "p1", "p1-password-1", "server", "info")

	expect(ok(url, "dash", "dash-password-1", "stream", "info", "ORDER_EVENTS"), "Messages: 2")
	expect(ok(url, "dash", "dash-password-1", "consumer", "info", "ORDER_EVENTS", "order-processor"), "Ack Policy: Explicit")
	expect(ok(url, "dash", "dash-password-1", "sub", "--stream", "ORDER_EVENTS", "--count", "2"), "orders.shipped")
	ok(url, "dash", "dash-password-1", "consumer", "add", "ORDER_EVENTS", "dash-audit", "--pull", "--deliver", "all", "--ack", "explicit", "--defaults")
	expect(ok(url, "dash", "dash-password-1", "consumer", "next", "ORDER_EVENTS", "dash-audit", "--count", "1"), "Acknowledged message")
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		out, err := natsCmd(url, "dash", "dash-password-1", "kv", "get", "ORDERS", "s-1", "--raw").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "shipped") {
			return os.ErrNotExist
		}
		return nil
	})
	refused(url, "dash", "dash-password-1", "pub", "-J", "orders.created", `{"order_id":"r"}`)
	refused(url, "dash", "dash-password-1", "stream", "purge", "ORDER_EVENTS", "-f")
	refused(url, "dash", "dash-password-1", "kv", "del", "ORDERS", "s-1", "-f")
	refused(url, "dash", "dash-password-1", "consumer", "rm", "ORDER_EVENTS", "order-processor", "-f")
	refused(url, "dash", "dash-password-1", "consumer", "next", "ORDER_EVENTS", "order-processor", "--count", "1")

	expect(ok(url, "ops", "ops-password-1", "server", "info"), "Version: 2.15.3")
	expect(ok(url, "ops", "ops-password-1", "server", "report", "jetstream"), "orderstore")
	expect(ok(url, "ops", "ops-password-1", "stream", "info", "ORDER_EVENTS"), "Messages: 2")
	// The system user sends system requests only: all natscli's server commands need.
	expect(ok(url, "sys", "sys-password-1", "server", "info"), "Version: 2.15.3")
	expect(ok(url, "sys", "sys-password-1", "server", "report", "jetstream"), "orderstore")
	expect(ok(url, "sys", "sys-password-1", "server", "list"), "orderstore")
	refused(url, "sys", "sys-password-1", "stream", "purge", "ORDER_EVENTS", "-f")

	// A client that does not trust the CA is refused.
	cmd := exec.Command(cli, "-s", url, "--timeout", "5s", "--user", "p1", "--password", "p1-password-1", "pub", "-J", "orders.created", "{}")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("a client without --tlsca got in:\n%s", out)
	}

	listen.Process.Signal(syscall.SIGTERM)
	listen.Wait()
	if strings.Contains(listened.String(), "Received on") {
		t.Errorf("producer p2 received another user's replies:\n%s", listened.String())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"p1-password-1", "p2-password-1", "dash-password-1", "ops-password-1", "sys-password-1"} {
		if strings.Contains(p.stderr.String(), s) {
			t.Errorf("the log holds the password %q", s)
		}
	}
}

// check -print shows the effective configuration of a secured appliance
// with no secret in it, warns about a world-readable file holding secrets
// and about network listeners without TLS; a syntax error on a secret's
// line does not show the secret either.
func TestCheckHidesSecrets(t *testing.T) {
	dir := t.TempDir()
	secrets := []string{"sys-password-ab", "p1-password-ab", "admin-token-0123456789-ab", "leaf-password-ab", "edge-1-password-ab"}
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), `[server]
host = "0.0.0.0"
system_user = "sys"
system_password = "`+secrets[0]+`"
[[server.users]]
user = "p1"
password = "`+secrets[1]+`"
role = "producer"
[admin]
listen = "0.0.0.0:0"
token = "`+secrets[2]+`"
[leafnode]
listen = "0.0.0.0:7422"
user = "edge"
password = "`+secrets[3]+`"
[[leafnode.users]]
user = "leaf-edge-1"
password = "`+secrets[4]+`"
edge = "edge-1"
[hub]
stream = "ORDER_EVENTS_ALL"
edges = ["edge-1"]
[stream]
max_bytes = "512MiB"
`) // writeConfig writes 0644: readable by every user
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"check", "-config", cfg, "-print"}, &out, &errb); code != 0 {
		t.Fatalf("check = %d\n%s", code, errb.String())
	}
	for _, s := range secrets {
		if strings.Contains(out.String()+errb.String(), s) {
			t.Errorf("check -print shows the secret %q:\n%s\n%s", s, out.String(), errb.String())
		}
	}
	for _, want := range []string{"readable by every user", "NATS client port 0.0.0.0:-1 faces the network without TLS", "admin listener 0.0.0.0:0 faces the network without TLS",
		"leafnode.listen 0.0.0.0:7422 faces the network without TLS"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, errb.String())
		}
	}
	if !strings.Contains(out.String(), `role = "producer"`) {
		t.Errorf("-print lacks the user's role:\n%s", out.String())
	}

	broken := filepath.Join(dir, "broken.toml")
	os.WriteFile(broken, []byte("[server]\nsystem_password = \""+secrets[0]+"\n"), 0o600)
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", broken}, &out, &errb); code != exitUsage {
		t.Fatalf("check of a broken file = %d, want %d", code, exitUsage)
	}
	if strings.Contains(errb.String(), secrets[0]) || !strings.Contains(errb.String(), "line 2") {
		t.Errorf("syntax error output:\n%s", errb.String())
	}
}
