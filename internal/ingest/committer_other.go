//go:build !linux

package ingest

import (
	"os"
	"path/filepath"

	"github.com/orderstore/orderstore/internal/durable"
)

// storeSyncer returns one group-commit round for the store in dir: where
// there is no syncfs(2), an fsync of every file and directory under
// jetstream/.
func storeSyncer(dir string) (sync func() error, closeFn func(), how string, err error) {
	js := filepath.Join(dir, "jetstream")
	return func() error { return durable.SyncTree(js) }, func() {}, "fsync of every file", nil
}

func fdatasync(f *os.File) error { return f.Sync() }
