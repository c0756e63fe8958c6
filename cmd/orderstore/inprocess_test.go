package main

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/orderstore/orderstore/internal/testkit"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// inproc is orderstore running in-process (run() in a goroutine), as
// the binary would, with its admin listener on a random port.
type inproc struct {
	t        testing.TB
	adminURL string
	natsURL  string
	log      *testkit.LockedBuffer
	cancel   context.CancelFunc
	done     chan int
}

func startInProcess(t testing.TB, body string) *inproc {
	t.Helper()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), mergeTOML("[admin]\nlisten = \"127.0.0.1:0\"\n", body))
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	a := &inproc{t: t, log: &testkit.LockedBuffer{}, cancel: cancel, done: make(chan int, 1)}
	ready := make(chan struct{})
	scanned := make(chan struct{}) // every line logged is in a.log
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		closed := false
		for sc.Scan() {
			line := sc.Text()
			a.log.Write([]byte(line + "\n"))
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch m["msg"] {
			case "admin listening":
				a.adminURL = "http://" + m["addr"].(string)
			case "orderstore ready":
				a.natsURL = m["client_url"].(string)
				if !closed {
					close(ready)
					closed = true
				}
			}
		}
		io.Copy(a.log, pr) // past a line too long to scan
	}()
	go func() {
		code := run(ctx, []string{"run", "-config", cfg}, io.Discard, pw)
		pw.Close()
		<-scanned
		a.done <- code
	}()
	select {
	case <-ready:
	case code := <-a.done:
		t.Fatalf("orderstore exited with %d before ready:\n%s", code, a.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("orderstore not ready after 30s:\n%s", a.log)
	}
	t.Cleanup(func() { a.stop() })
	return a
}

// stop cancels the run and returns its exit code.
func (a *inproc) stop() int {
	a.cancel()
	select {
	case code, ok := <-a.done:
		if ok {
			close(a.done)
			if code != 0 {
				a.t.Errorf("orderstore exit code %d on stop:\n%s", code, a.log)
			}
		}
		return code
	case <-time.After(30 * time.Second):
		a.t.Fatalf("orderstore did not stop within 30s")
	}
	return -1
}
