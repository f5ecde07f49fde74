package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes data to path so that a reader (or a crash) sees
// either the old file or the complete new one: a temp file in the same
// directory is written, synced and renamed over path, then the directory is
// synced. The temp file is removed on any error.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := WriteFileWhole(path, data, perm); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// WriteFileWhole is WriteFileAtomic without the directory's sync: for a
// file whose loss costs nothing but time (a hint), which a crash may
// leave as it was or not there, but never in part.
func WriteFileWhole(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	Mutating()
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()      // already failing; the close error adds nothing
			_ = os.Remove(tmp) // best effort: a leftover temp is harmless
		}
	}()
	Mutating()
	n, err := f.Write(data)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if n != len(data) {
		return fmt.Errorf("write %s: short write (%d of %d bytes)", path, n, len(data))
	}
	Mutating()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	Mutating()
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	Mutating()
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory so that renames and creations in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close() // read-only handle: nothing to flush on close
	Mutating()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
