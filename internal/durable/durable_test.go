package durable_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderstore/orderstore/internal/durable"
)

// SyncDir names the directory it could not open.
func TestSyncDirMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	err := durable.SyncDir(missing)
	if err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("SyncDir of a missing directory: %v, want an error naming it", err)
	}
	if err := durable.SyncPath(missing); err != nil {
		t.Fatalf("SyncPath of a missing path: %v, want nil (removed while walked)", err)
	}
}
