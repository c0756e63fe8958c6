// Package durable writes files so that they survive a crash or a power cut: the one place
// orderstore does it, so no caller forgets the directory's fsync or ignores an error on the way.
//
// A file's data is durable after an fsync of the file; its name (a
// create, a rename, a removal) only after an fsync of its directory.
package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, atomically and durably: data goes to a temporary file in
// path's directory, which is fsynced, renamed over path, and the directory fsynced. A crash leaves
// the old file or the new one, never a torn one.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close() // harmless when already closed
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return SyncDir(dir)
}

// SyncDir fsyncs a directory: names created, renamed or removed in it are durable once it returns.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err == nil {
		err = errors.Join(d.Sync(), d.Close())
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// SyncPath fsyncs the file or directory at path; a path that no longer
// exists is not an error (removed while a tree was walked).
func SyncPath(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// SyncTree fsyncs every regular file and directory under root, children before their directory
// (what syncfs does, where it is not available, or for one tree of a file system).
func SyncTree(root string) error {
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
		return SyncPath(path)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := SyncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}
