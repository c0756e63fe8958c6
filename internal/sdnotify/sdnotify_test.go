package sdnotify

import (
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a unixgram socket at addr and returns it; it is closed on cleanup.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skipf("unixgram sockets are not available on %s", runtime.GOOS)
	}
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

func TestNotifyUnsetIsNoop(t *testing.T) {
	t.Setenv(EnvSocket, "")
	sent, err := Notify("READY=1")
	if sent || err != nil {
		t.Fatalf("Notify without %s = (%v, %v), want (false, nil)", EnvSocket, sent, err)
	}
	for name, f := range map[string]func() error{
		"Ready":    Ready,
		"Stopping": Stopping,
		"Status":   func() error { return Status("recovering") },
	} {
		if err := f(); err != nil {
			t.Errorf("%s() without %s = %v, want nil", name, EnvSocket, err)
		}
	}
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

func TestNotifyAbstractSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix sockets are Linux-only")
	}
	name := "@orderstore-sdnotify-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ln := listen(t, name)
	t.Setenv(EnvSocket, name)

	sent, err := Notify("READY=1")
	if !sent || err != nil {
		t.Fatalf("Notify(abstract) = (%v, %v), want (true, nil)", sent, err)
	}
	if got := recv(t, ln); got != "READY=1" {
		t.Errorf("datagram = %q, want %q", got, "READY=1")
	}
}

func TestNotifyErrors(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		wantErr string
	}{
		{"relative path", "notify.sock", "unsupported address"},
		{"vsock", "vsock:2:1234", "unsupported address"},
		{"missing socket", filepath.Join(t.TempDir(), "absent.sock"), "NOTIFY_SOCKET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvSocket, tt.addr)
			sent, err := Notify("READY=1")
			if sent || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Notify with %s=%q = (%v, %v), want (false, error containing %q)", EnvSocket, tt.addr, sent, err, tt.wantErr)
			}
		})
	}
	if err := Status("a\nREADY=1"); err == nil {
		t.Errorf("Status with a newline = nil, want an error")
	}
}
