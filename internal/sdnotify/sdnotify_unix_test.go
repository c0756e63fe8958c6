//go:build unix

package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// These tests need unix datagram sockets; the build constraint keeps them
// off platforms without them instead of skipping at run time.

// listen opens a unixgram socket at addr and returns it; it is closed on cleanup.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("ListenUnixgram(%q): %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// recv reads one datagram from ln, failing the test after 5s.
func recv(t *testing.T, ln *net.UnixConn) string {
	t.Helper()
	if err := ln.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatalf("SetReadDeadline: %v", err)
	}
	buf := make([]byte, 4096)
	n, _, err := ln.ReadFromUnix(buf)
	if err != nil {
		t.Fatalf("read datagram: %v", err)
	}
	return string(buf[:n])
}

func TestNotifyPathSocket(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify.sock")
	ln := listen(t, addr)
	t.Setenv(EnvSocket, addr)

	tests := []struct {
		name string
		send func() error
		want string
	}{
		{"Ready", Ready, "READY=1"},
		{"Stopping", Stopping, "STOPPING=1"},
		{"Status", func() error { return Status("recovering ORDER_EVENTS") }, "STATUS=recovering ORDER_EVENTS"},
		{"Notify", func() error {
			sent, err := Notify("STATUS=ready\nREADY=1")
			if !sent && err == nil {
				t.Errorf("Notify sent = false with a listening socket")
			}
			return err
		}, "STATUS=ready\nREADY=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.send(); err != nil {
				t.Fatalf("%s() = %v, want nil", tt.name, err)
			}
			if got := recv(t, ln); got != tt.want {
				t.Errorf("datagram = %q, want %q", got, tt.want)
			}
		})
	}
}
