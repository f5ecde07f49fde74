package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Size is the space the store takes on disk (as du counts it: blocks, each
// inode once).
func (s *Store) Size() (int64, error) {
	var n int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil // removed meanwhile, or a run's work dir overlayfs left mode 0
			}
			return err
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if !seen[key] {
			seen[key] = true
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store size: %w", err)
	}
	return n, nil
}
