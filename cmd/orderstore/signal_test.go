package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orderstore/orderstore/internal/testenv"
	"github.com/orderstore/orderstore/internal/testkit"
)

// signalAtLine is a log writer that, when a line containing marker is
// written, sends SIGTERM to this process and holds the writer (and so the
// start-up goroutine that logs the line) until run's signal context has
// been canceled by that signal: start-up goes on only once the signal has
// landed, however loaded the machine.
//
// It watches the goroutine signal.NotifyContext starts from the goroutine
// that calls run (creator; start-up may log from another): that goroutine
// waits for the signal, cancels the context, and returns. Its exit is the
// state waited for.
type signalAtLine struct {
	marker  []byte
	creator chan string // run's goroutine, sent before it calls run
	once    sync.Once
	buf     testkit.LockedBuffer

	mu     sync.Mutex
	landed bool  // the signal canceled run's context while start-up was held
	err    error // why it could not be made to land there
}

func (s *signalAtLine) Write(p []byte) (int, error) {
	s.buf.Write(p)
	if bytes.Contains(p, s.marker) {
		s.once.Do(s.signalAndHold)
	}
	return len(p), nil
}

func (s *signalAtLine) signalAndHold() {
	fail := func(format string, args ...any) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.err = fmt.Errorf(format, args...)
	}
	me := <-s.creator
	watcher := signalWatcherOf(me)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		fail("send SIGTERM: %v", err)
		return
	}
	if watcher == "" {
		// Sent all the same, so that run stops; the test fails.
		fail("no goroutine started by signal.NotifyContext on goroutine %s (which calls run) waits for a signal: "+
			"this test cannot tell when the signal lands", me)
		return
	}
	// A hang detector, not a timing bound: a delivered signal is
	// handled in microseconds to, on a loaded machine, a few seconds.
	for deadline := time.Now().Add(60 * time.Second); signalWatcherOf(me) == watcher; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fail("SIGTERM sent, but 60s later run's signal context (goroutine %s) still waits for it", watcher)
			return
		}
	}
	s.mu.Lock()
	s.landed = true
	s.mu.Unlock()
}

// goroutineID is the id of the calling goroutine, from its stack header
// ("goroutine 7 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 || f[0] != "goroutine" {
		panic(fmt.Sprintf("unexpected stack header %q", buf))
	}
	return f[1]
}

// signalWatcherOf is the id of the goroutine that signal.NotifyContext,
// called on goroutine creator, started to wait for a signal, or "" once
// that goroutine has returned (it has canceled the context) or if there
// is none. Goroutine ids are never reused.
func signalWatcherOf(creator string) string {
	for _, g := range testenv.Goroutines() {
		if !strings.Contains(g, "\nos/signal.NotifyContext.func1(") ||
			!strings.Contains(g, "\ncreated by os/signal.NotifyContext in goroutine "+creator+"\n") {
			continue
		}
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			return f[1]
		}
	}
	return ""
}

// A SIGTERM that arrives in the last moments of start-up (after the stream
// is declared and verified, before the appliance runs) stops orderstore
// with exit 0. It used to be swallowed by the start-up watcher: the
// process kept running until a second signal.
//
// The signal is sent when the stream-ready line is logged, and start-up is
// held there until run's context is canceled by it, so the case is the
// same on a loaded machine; if the signal cannot be made to land there the
// test fails rather than pass having tested something else.
func TestSignalAtEndOfStartupStops(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[admin]\nlisten = \"\"\n")
	w := &signalAtLine{marker: []byte(`"msg":"stream ready"`), creator: make(chan string, 1)}
	done := make(chan int, 1)
	go func() {
		w.creator <- goroutineID()
		done <- run(context.Background(), []string{"run", "-config", cfg}, &bytes.Buffer{}, w)
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(120 * time.Second): // a hang detector, not a timing bound
		t.Fatalf("orderstore still running 120s after start: the signal was lost\n%s", w.buf.String())
	}
	log := w.buf.String()
	w.mu.Lock()
	landed, err := w.landed, w.err
	w.mu.Unlock()
	if !strings.Contains(log, `"stream ready"`) {
		t.Fatalf("start-up never reached the stream-ready line, so no signal was sent at the end of start-up (exit %d):\n%s", code, log)
	}
	if err != nil {
		t.Fatalf("the case under test was not produced: %v\n%s", err, log)
	}
	if !landed {
		t.Fatalf("the SIGTERM did not land while start-up was held at the stream-ready line:\n%s", log)
	}
	if code != exitOK {
		t.Fatalf("exit code %d, want %d:\n%s", code, exitOK, log)
	}
	// Start-up either noticed the canceled context and stopped, or
	// completed (every step after the stream-ready line had finished its
	// check of the context), and run stopped the appliance at once. The
	// old bug was the second case waiting for another signal.
	switch {
	case strings.Contains(log, `"start-up interrupted by signal, shutdown complete"`):
		t.Log("start-up saw the signal and stopped")
	case strings.Contains(log, `"signal received, shutting down"`) && strings.Contains(log, `"shutdown complete"`):
		t.Log("start-up completed despite the signal; run stopped the appliance")
	default:
		t.Fatalf("exit 0, but the log says neither that start-up was interrupted by the signal nor that the signal stopped the appliance:\n%s", log)
	}
}
