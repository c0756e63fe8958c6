package storedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderstore/orderstore/internal/durable"
)

// RestoredFile is a file in the store directory that a restore from a
// backup writes: what the backed-up processor had settled. It is removed
// once the processor is past it.
const RestoredFile = "restored.json"

// Restored is what RestoredFile holds.
type Restored struct {
	// Stream is the stream the processor consumes; SettledThrough the
	// sequence up to which the backed-up processor had settled every
	// event (applied, or dead-lettered) before the backup began.
	Stream         string `json:"stream"`
	SettledThrough uint64 `json:"settled_through"`
}

// WriteRestored writes r durably.
func (d Dir) WriteRestored(r Restored) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := filepath.Join(string(d), RestoredFile)
	if err := durable.WriteFile(path, append(data, '\n'), 0o640); err != nil {
		return fmt.Errorf("restore: %q: %w", path, err)
	}
	return nil
}

// ReadRestored reads RestoredFile; ok is false when there is none.
func (d Dir) ReadRestored() (r Restored, ok bool, err error) {
	path := filepath.Join(string(d), RestoredFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Restored{}, false, nil
	}
	if err != nil {
		return Restored{}, false, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return Restored{}, false, fmt.Errorf("%q: %w (hint: remove it if the processor has caught up since the restore)", path, err)
	}
	return r, true, nil
}

// RemoveRestored removes RestoredFile, durably.
func (d Dir) RemoveRestored() error {
	if err := os.Remove(filepath.Join(string(d), RestoredFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return durable.SyncDir(string(d))
}
