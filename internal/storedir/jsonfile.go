package storedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/orderstore/orderstore/internal/durable"
)

// readJSON reads the JSON file at path into v; ok is false when there is none.
func readJSON(path string, v any) (ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	// orderstore's own files are a few hundred bytes: more is damage.
	data, err := io.ReadAll(io.LimitReader(f, maxJSONFile+1))
	if err != nil {
		return true, err
	}
	if len(data) > maxJSONFile {
		return true, fmt.Errorf("larger than %d bytes", maxJSONFile)
	}
	return true, json.Unmarshal(data, v)
}

// maxJSONFile bounds what readJSON reads.
const maxJSONFile = 64 << 10

// writeJSON writes v to path as JSON, durably.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(path, append(data, '\n'), 0o640); err != nil {
		return fmt.Errorf("%q: %w", path, err)
	}
	return nil
}

// removeFile removes path, durably; a missing file is no error.
func removeFile(dir, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return durable.SyncDir(dir)
}
