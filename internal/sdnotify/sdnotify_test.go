package sdnotify

import (
	"path/filepath"
	"strings"
	"testing"
)

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
