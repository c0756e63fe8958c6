package storedir

import (
	"fmt"
	"path/filepath"
)

// RestoredFile is the store directory's file a restore writes: that it runs, then what the
// backed-up processor had settled. It is removed once the processor is past it.
const RestoredFile = "restored.json"

// Restored is what RestoredFile holds.
type Restored struct {
	// Stream is the stream the processor consumes; SettledThrough the sequence to which the
	// backed-up processor had settled every event (applied or dead-lettered) before the backup.
	Stream         string `json:"stream"`
	SettledThrough uint64 `json:"settled_through"`
	// Restoring: the restore did not finish, the store holds part of the backup.
	Restoring bool `json:"restoring,omitempty"`
}

// WriteRestored writes r durably.
func (d Dir) WriteRestored(r Restored) error {
	if err := writeJSON(filepath.Join(string(d), RestoredFile), r); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// ReadRestored reads RestoredFile; ok is false when there is none.
func (d Dir) ReadRestored() (r Restored, ok bool, err error) {
	path := filepath.Join(string(d), RestoredFile)
	ok, err = readJSON(path, &r)
	if ok && err != nil {
		return Restored{}, false, fmt.Errorf("%q: %w (hint: remove it if the processor has caught up since the restore)", path, err)
	}
	return r, ok, err
}

// RemoveRestored removes RestoredFile, durably.
func (d Dir) RemoveRestored() error {
	return removeFile(string(d), filepath.Join(string(d), RestoredFile))
}
