package snapshot

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/snapback/snapback/fsutil"

	"golang.org/x/sys/unix"
)

// Size is the space the store takes on disk (as du counts it: blocks, each
// inode once).
func (s *Store) Size() (int64, error) {
	n := int64(0)
	seen := map[[2]uint64]bool{}
	count := func(st *unix.Stat_t) {
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if !seen[key] {
			seen[key] = true
			n += st.Blocks * 512
		}
	}
	d, err := fsutil.OpenRoot(s.Dir)
	if err != nil {
		return 0, fmt.Errorf("store size: %w", err)
	}
	defer d.Close() // read-only
	var top unix.Stat_t
	if err := unix.Fstat(d.Fd(), &top); err == nil {
		count(&top)
	}
	err = d.Walk(func(_ *fsutil.Dir, _, _ string, st *unix.Stat_t) (bool, error) {
		count(st)
		return true, nil
	})
	// A directory an ordinary user cannot read (a run's work dir overlayfs
	// left mode 0) ends the count there: the size is then a lower bound.
	if err != nil && !errors.Is(err, fs.ErrPermission) {
		return 0, fmt.Errorf("store size: %w", err)
	}
	return n, nil
}
