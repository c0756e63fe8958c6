package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/testenv"
)

var crashRounds = flag.Int("crash.rounds", 2, "SIGKILL rounds in TestSIGKILLUnderLoadLosesNoAck (CI runs the short version; try 20)")

func TestSIGTERMExitsZero(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "")
	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, p.stderr)
	}
	for _, want := range []string{`"shutdown complete"`, `"signal":"terminated"`, `"durability":"group-commit"`, `an acknowledged event survives power loss`, `"max_bytes":"1GiB"`} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("log lacks %s\n%s", want, p.stderr)
		}
	}
	// The lock was released: a new instance starts on the same store.
	p2 := start(t, nil, "run", "-config", cfg)
	p2.waitReady()
	p2.signal(os.Interrupt)
	if code := p2.wait(30 * time.Second); code != 0 {
		t.Fatalf("SIGINT exit code = %d, want 0", code)
	}
}

// Publish under load over TCP, SIGKILL the process, restart it on the same
// store: every sequence that was acknowledged is present with its payload.
func TestSIGKILLUnderLoadLosesNoAck(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	cfg := writeConfig(t, dir, store, "")
	acked := map[uint64]string{} // seq -> msg id
	var mu sync.Mutex
	total := 0
	for round := range *crashRounds {
		p := start(t, nil, "run", "-config", cfg)
		url := p.waitReady()
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		var n atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					ack, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"`+id+`"}`), jetstream.WithMsgID(id))
					cancel()
					if err != nil {
						return // the server died under us: this one was not acked
					}
					mu.Lock()
					acked[ack.Sequence] = id
					mu.Unlock()
					n.Add(1)
				}
			}()
		}
		// Kill at a point that depends on the round, mid-stream.
		target := int64(200 + 150*round)
		deadline := time.Now().Add(20 * time.Second)
		for n.Load() < target && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(10 * time.Second); code != -int(syscall.SIGKILL) {
			t.Fatalf("round %d: exit %d, want killed by SIGKILL", round, code)
		}
		close(stop)
		wg.Wait()
		nc.Close()
		total += int(n.Load())
		if n.Load() < target {
			t.Fatalf("round %d: only %d acks before the deadline", round, n.Load())
		}
	}

	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for seq, id := range acked {
		m, err := s.GetMsg(ctx, seq)
		// (The message id is stored scoped to the producer's account.)
		if err != nil || m.Header.Get(jetstream.MsgIDHeader) != "ANONYMOUS:"+id || string(m.Data) != `{"order_id":"`+id+`"}` {
			missing++
			if missing < 5 {
				t.Errorf("acked seq %d (%s) after restart: %v %v", seq, id, err, m)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged events lost or changed after SIGKILL", missing, len(acked))
	}
	t.Logf("%d rounds, %d acked events, all present after SIGKILL", *crashRounds, total)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

func TestBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	tests := []struct {
		name  string
		body  string                         // merged into the test config
		setup func(t *testing.T, dir string) // runs before
		store func(dir string) string
		cred  *syscall.Credential
		code  int
		want  []string
		fast  time.Duration // the error must come within this, if set
	}{
		{name: "unknown keys", body: "[stream]\nmax_agee = \"1h\"\n[admin]\nadress = \"x\"\n", code: exitUsage,
			want: []string{"unknown keys: admin.adress (did you mean admin.listen?), stream.max_agee (did you mean stream.max_age?)", "hint:"}},
		{name: "TLS file missing", body: "[server.tls]\ncert_file = \"missing.crt\"\nkey_file = \"missing.key\"\n", code: exitUsage,
			want: []string{"server.tls", "missing.crt", "hint:"}},
		{name: "bare number duration", body: "[stream]\nmax_age = \"72\"\n", code: exitUsage,
			want: []string{`stream.max_age: "72": missing unit`}},
		{name: "unknown size unit", body: "[jetstream]\nmax_file_store = \"10XB\"\n", code: exitUsage,
			want: []string{`jetstream.max_file_store: "10XB"`}},
		{name: "store_dir below a regular file", code: exitFailure,
			setup: func(t *testing.T, dir string) { os.WriteFile(filepath.Join(dir, "file"), nil, 0o644) },
			store: func(dir string) string { return filepath.Join(dir, "file", "store") },
			want:  []string{`preflight: store_dir "`, `file/store"`, "not a directory", "hint:"}},
		{name: "store_dir not writable for the user", code: exitFailure,
			cred: &syscall.Credential{Uid: 65534, Gid: 65534},
			setup: func(t *testing.T, dir string) {
				os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's parent is 0700
				os.Chmod(dir, 0o755)
				os.Mkdir(filepath.Join(dir, "rootonly"), 0o755)
			},
			store: func(dir string) string { return filepath.Join(dir, "rootonly") },
			want:  []string{`store_dir "`, "rootonly", "not writable", "permission denied", "hint: give the service user write access"}},
		{name: "max_file_store larger than free disk", code: exitFailure,
			body: "[jetstream]\nmax_file_store = \"1000000TiB\"\n[stream]\nmax_bytes = \"1GiB\"\n",
			want: []string{"free disk", "max_file_store", "hint:", "allow_low_disk"}},
		{name: "client port in use", code: exitFailure, fast: 2 * time.Second,
			body: fmt.Sprintf("[server]\nport = %d\n", busyPort),
			want: []string{fmt.Sprintf("127.0.0.1:%d", busyPort), "hint: another process listens on"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cred != nil {
				testenv.Require(t, testenv.Root()) // to start the child as another user
			}
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			store := filepath.Join(dir, "store")
			if tt.store != nil {
				store = tt.store(dir)
			}
			cfg := writeConfig(t, dir, store, tt.body)
			begin := time.Now()
			p := start(t, tt.cred, "run", "-config", cfg)
			code := p.wait(30 * time.Second)
			if tt.fast > 0 && time.Since(begin) > tt.fast {
				t.Errorf("took %s to fail, want < %s", time.Since(begin), tt.fast)
			}
			if code != tt.code {
				t.Errorf("exit code = %d, want %d\n%s", code, tt.code, p.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(p.stderr.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, p.stderr)
				}
			}
		})
	}
}

func TestLockedStoreDir(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	// Both on the same admin port too, as two copies of one config file
	// would be: the lock, checked first, is what the second one reports.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("[admin]\nlisten = %q\n", ln.Addr().String())
	ln.Close()
	first := start(t, nil, "run", "-config", writeConfig(t, dir, store, admin))
	first.waitReady()
	second := start(t, nil, "run", "-config", writeConfig(t, dir, store, admin))
	if code := second.wait(10 * time.Second); code != exitFailure {
		t.Fatalf("second instance exit = %d, want %d\n%s", code, exitFailure, second.stderr)
	}
	if strings.Contains(second.stderr.String(), "address already in use") {
		t.Errorf("second instance reported the busy admin port, not the lock:\n%s", second.stderr)
	}
	for _, w := range []string{filepath.Join(store, "orderstore.lock"), fmt.Sprintf("process %d", first.cmd.Process.Pid), "hint: another orderstore is running"} {
		if !strings.Contains(second.stderr.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, second.stderr)
		}
	}
	// The first one is unharmed.
	first.signal(syscall.SIGTERM)
	if code := first.wait(30 * time.Second); code != 0 {
		t.Fatalf("first instance exit = %d", code)
	}
}

func TestDestructiveStreamChangeRefused(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	p := start(t, nil, "run", "-config", writeConfig(t, dir, store, ""))
	p.waitReady()
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)

	// check refuses what run refuses, with the same words and exit code.
	destructive := writeConfig(t, dir, store, "[stream]\nsubjects = [\"orders.created\"]\n")
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"check", "-config", destructive}, &out, &errb); code != exitUsage {
		t.Fatalf("check of a destructive change = %d, want %d\n%s", code, exitUsage, errb.String())
	}
	for _, w := range []string{`stream "ORDER_EVENTS": refusing a destructive change`, `subjects: stored ["orders.>"]`, "hint: to keep the stored events"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("check output lacks %q:\n%s", w, errb.String())
		}
	}
	if strings.Contains(errb.String(), "is valid") {
		t.Errorf("check called the config valid before refusing it:\n%s", errb.String())
	}
	p = start(t, nil, "run", "-config", destructive)
	if code := p.wait(30 * time.Second); code != exitUsage {
		t.Fatalf("exit = %d, want %d\n%s", code, exitUsage, p.stderr)
	}
	for _, w := range []string{`declare stream "ORDER_EVENTS": refusing a destructive change`, `subjects: stored ["orders.>"]`, `removes ["orders.>"]`, "hint: to keep the stored events"} {
		if !strings.Contains(p.stderr.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, p.stderr)
		}
	}
	// A safe change passes check, and run applies it and logs it as a diff.
	safe := writeConfig(t, dir, store, "[stream]\nmax_age = \"24h\"\n")
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", safe}, &out, &errb); code != exitOK {
		t.Fatalf("check of a safe change = %d, want 0\n%s", code, errb.String())
	}
	p = start(t, nil, "run", "-config", safe)
	p.waitReady()
	if !strings.Contains(p.stderr.String(), `"msg":"config change applied"`) || !strings.Contains(p.stderr.String(), `"before":"168h0m0s","after":"24h0m0s"`) {
		t.Errorf("safe change not logged as a diff:\n%s", p.stderr)
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := writeConfig(t, dir, filepath.Join(dir, "store"), "")
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"check", "-config", good, "-print"}, &out, &errb); code != 0 {
		t.Fatalf("check good config = %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), fmt.Sprintf("config %q is valid", good)) || !strings.Contains(errb.String(), "preflight ok") {
		t.Errorf("check output: %s", errb.String())
	}
	if !strings.Contains(out.String(), "[stream]") || !strings.Contains(out.String(), `max_age = "168h"`) {
		t.Errorf("-print output lacks the effective config:\n%s", out.String())
	}
	bad := writeConfig(t, dir, filepath.Join(dir, "store"), "[stream]\nmax_age = \"72\"\n")
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", bad}, &out, &errb); code != exitUsage {
		t.Fatalf("check bad config = %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errb.String(), "stream.max_age") {
		t.Errorf("check bad output: %s", errb.String())
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatal(code)
	}
	for _, w := range []string{"orderstore ", "commit: ", "date: ", "go: go1.", "nats-server: 2.15.3"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("version output lacks %q:\n%s", w, out.String())
		}
	}
	if code := run(context.Background(), []string{"frobnicate"}, &out, &errb); code != exitUsage {
		t.Errorf("unknown command exit = %d, want %d", code, exitUsage)
	}
	if code := run(context.Background(), nil, &out, &errb); code != exitUsage {
		t.Errorf("no command exit = %d, want %d", code, exitUsage)
	}
}
