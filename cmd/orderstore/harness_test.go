package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the orderstore binary (litestream's
// TestMainHarness): with ORDERSTORE_TEST_MAIN=1 it runs main instead of the
// tests, so child-process tests exercise the real main, signals and exit
// codes without a separate go build.
func TestMain(m *testing.M) {
	if os.Getenv("ORDERSTORE_TEST_MAIN") == "1" {
		var stderr io.Writer = os.Stderr
		if m := os.Getenv("ORDERSTORE_TEST_SIGHUP_AT"); m != "" {
			stderr = &sighupAt{marker: []byte(m)}
		}
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, stderr))
	}
	os.Exit(m.Run())
}

var (
	exeOnce sync.Once
	exePath string
	exeErr  error
)

// binary returns a copy of the test binary that any user may execute (the
// go build cache is private to root, and one test runs as uid 65534).
func binary(t testing.TB) string {
	t.Helper()
	exeOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			exeErr = err
			return
		}
		dir, err := os.MkdirTemp("", "orderstore-bin-")
		if err != nil {
			exeErr = err
			return
		}
		os.Chmod(dir, 0o755)
		exePath = filepath.Join(dir, "orderstore")
		in, err := os.ReadFile(self)
		if err != nil {
			exeErr = err
			return
		}
		exeErr = os.WriteFile(exePath, in, 0o755)
	})
	if exeErr != nil {
		t.Fatalf("prepare binary: %v", exeErr)
	}
	return exePath
}

// proc is one orderstore child process.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stderr *testkit.LockedBuffer
	done   chan struct{}
	ready  chan map[string]any
	code   int
}

// start runs the binary with args and, if cred is non-nil, as that user.
func start(t testing.TB, cred *syscall.Credential, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "ORDERSTORE_TEST_MAIN=1", "ORDERSTORE_CONFIG=")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	p := &proc{t: t, cmd: cmd, stderr: &testkit.LockedBuffer{}, done: make(chan struct{}), ready: make(chan map[string]any, 1)}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{}) // every line of stderr is in p.stderr
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if strings.Contains(line, `"orderstore ready"`) {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil {
					select {
					case p.ready <- m:
					default:
					}
				}
			}
		}
		io.Copy(p.stderr, pr) // past a line too long to scan
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned // the last lines too, before anyone reads them
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = -int(ws.Signal())
		}
		_ = err
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady waits for the "orderstore ready" line and returns its client URL.
// adminURL waits for the child's "admin listening" log line (JSON logs)
// and returns the listener's URL.
func (p *proc) adminURL(t testing.TB) string {
	t.Helper()
	url := ""
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "admin listening" {
				url = "http://" + m["addr"].(string)
				return nil
			}
		}
		return errors.New("no admin listening line")
	})
	return url
}

func (p *proc) waitReady() string {
	p.t.Helper()
	select {
	case m := <-p.ready:
		return m["client_url"].(string)
	case <-p.done:
		p.t.Fatalf("orderstore exited with %d before ready:\n%s", p.code, p.stderr)
	case <-time.After(30 * time.Second):
		p.t.Fatalf("orderstore not ready after 30s:\n%s", p.stderr)
	}
	return ""
}

// wait waits for exit and returns the exit code (negative: killed by signal).
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("orderstore did not exit within %s:\n%s", timeout, p.stderr)
	}
	return 0
}

func (p *proc) signal(s os.Signal) {
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// writeConfig writes a config for a test instance: random NATS port, admin
// off unless the body sets it, the store in dir.
func writeConfig(t testing.TB, dir, store, body string) string {
	t.Helper()
	text := fmt.Sprintf("[server]\nport = -1\n[jetstream]\nstore_dir = %q\nmax_file_store = \"2GiB\"\ndisk_headroom = \"16MiB\"\n[stream]\nmax_bytes = \"1GiB\"\n[admin]\nlisten = \"\"\n[log]\nformat = \"json\"\n", store)
	text = mergeTOML(text, body)
	path := filepath.Join(dir, fmt.Sprintf("orderstore-%d.toml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterNodes returns the config bodies (for writeConfig) of three nodes
// n1..n3 of one R3 cluster, ack_wait 5s, and their client URLs. Their
// client and route listeners are on addresses of orderstoretest.Addrs:
// every node lists every route before any starts, and a node killed and
// started again on its config is where the others and the clients left it.
func clusterNodes(t testing.TB) (bodies, urls []string) {
	t.Helper()
	addrs := orderstoretest.Addrs(t, 6) // 3 client, 3 route
	var routes []string
	for _, a := range addrs[3:] {
		routes = append(routes, strconv.Quote("nats-route://"+a))
	}
	for i, a := range addrs[:3] {
		host, port, _ := net.SplitHostPort(a)
		bodies = append(bodies, fmt.Sprintf(`[server]
name = "n%d"
host = %q
port = %s
[stream]
replicas = 3
[processor]
ack_wait = "5s"
[cluster]
name = "orders"
listen = %q
routes = [%s]
user = "route"
password = "route-secret-1"
`, i+1, host, port, addrs[3+i], strings.Join(routes, ", ")))
		urls = append(urls, "nats://"+a)
	}
	return bodies, urls
}

// mergeTOML appends body's keys into base's tables (body wins; a table in
// body that base lacks is appended; each [[array]] table is its own).
func mergeTOML(base, body string) string {
	if body == "" {
		return base
	}
	tables := map[string][]string{}
	var order []string
	cur := ""
	arrays := 0
	add := func(text string, override bool) {
		cur = ""
		for _, line := range strings.Split(text, "\n") {
			l := strings.TrimSpace(line)
			if l == "" {
				continue
			}
			if strings.HasPrefix(l, "[") {
				cur = l
				if strings.HasPrefix(l, "[[") {
					arrays++
					cur = fmt.Sprintf("%s#%d", l, arrays)
				}
				if _, ok := tables[cur]; !ok {
					order = append(order, cur)
					tables[cur] = nil
				}
				continue
			}
			if override {
				key := strings.TrimSpace(strings.SplitN(l, "=", 2)[0])
				kept := tables[cur][:0]
				for _, x := range tables[cur] {
					if strings.TrimSpace(strings.SplitN(x, "=", 2)[0]) != key {
						kept = append(kept, x)
					}
				}
				tables[cur] = kept
			}
			tables[cur] = append(tables[cur], l)
		}
	}
	add(base, false)
	add(body, true)
	var b strings.Builder
	for _, tname := range order {
		b.WriteString(strings.SplitN(tname, "#", 2)[0] + "\n")
		for _, l := range tables[tname] {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
