package main

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// signalAtLine is a log writer that sends SIGTERM to this process when a
// line containing marker is written, then holds the writer long enough for
// the signal to reach whatever listens for it: the moment the signal lands
// is fixed, not left to scheduling.
type signalAtLine struct {
	marker []byte
	once   sync.Once
	buf    syncBuffer
}

func (s *signalAtLine) Write(p []byte) (int, error) {
	s.buf.Write(p)
	if bytes.Contains(p, s.marker) {
		s.once.Do(func() {
			syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
			time.Sleep(200 * time.Millisecond)
		})
	}
	return len(p), nil
}

// A SIGTERM that arrives in the last moments of start-up (after the stream
// is declared and verified, before the appliance runs) stops orderstore
// with exit 0. It used to be swallowed by the start-up watcher: the
// process kept running until a second signal.
func TestSignalAtEndOfStartupStops(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[admin]\nlisten = \"\"\n")
	w := &signalAtLine{marker: []byte(`"msg":"stream ready"`)}
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), []string{"run", "-config", cfg}, &bytes.Buffer{}, w) }()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit code %d, want %d:\n%s", code, exitOK, w.buf.String())
		}
	case <-time.After(60 * time.Second): // a hang detector, not a timing bound
		t.Fatalf("orderstore still running 60s after SIGTERM: the signal was lost\n%s", w.buf.String())
	}
	if !bytes.Contains([]byte(w.buf.String()), []byte(`"stream ready"`)) {
		t.Fatalf("start-up never reached the stream-ready line:\n%s", w.buf.String())
	}
}
