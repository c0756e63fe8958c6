package orderstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// fsyncTree fsyncs every regular file and directory under root, children
// before their directory: what syncfs does where it is not available.
func fsyncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked (a deleted block, a temp file renamed)
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return fsyncPath(path)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := fsyncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

func fsyncPath(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
