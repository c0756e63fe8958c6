package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/orderstore/orderstore/internal/durable"
)

// keyCmd is `orderstore key generate FILE`: a new store encryption key,
// 256 random bits in hex, written to FILE with mode 0600. It never
// overwrites a file: a key in use would be lost with the store it opens.
func keyCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "generate" || strings.HasPrefix(args[1], "-") { // -h is no file name
		return usageErr(stderr, "usage: orderstore key generate FILE\n  writes a new store encryption key to FILE (mode 0600); set jetstream.encryption_key_file to it\n")
	}
	path := args[1]
	raw := make([]byte, 32)
	rand.Read(raw) // never fails
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fail(stderr, exitUsage, withHint(fmt.Errorf("key generate: %q exists", path),
			"a key in use opens its store and nothing else does: choose another file name, or move the old key away yourself"))
	}
	if err != nil {
		return fail(stderr, exitFailure, fmt.Errorf("key generate: %w", err))
	}
	_, err = f.WriteString(hex.EncodeToString(raw) + "\n")
	// The first error of the write, the file's sync and close, and its directory's sync (the new
	// name survives a power cut).
	if err = cmp.Or(err, f.Sync(), f.Close(), durable.SyncDir(filepath.Dir(path))); err != nil {
		os.Remove(path)
		return fail(stderr, exitFailure, fmt.Errorf("key generate: %q: %w", path, err))
	}
	fmt.Fprintf(stdout, "wrote a new encryption key to %s (mode 0600): set jetstream.encryption_key_file = %q; keep a copy apart from the store\n", path, path)
	return exitOK
}
