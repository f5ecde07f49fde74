package snapshot

import (
	"fmt"
	"os"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// The btrfs mode of `run`: when the root is a btrfs subvolume, a run
// starts with a read-only snapshot of it (one ioctl, whatever the tree's
// size) instead of reading the tree into the store, and the command runs
// on the tree itself. When it ends, the snapshot and the tree are compared
// by stat alone — a btrfs snapshot keeps inode numbers and times, so an
// untouched file looks the same in both — and only the paths that differ
// are read: their old contents from the snapshot, their new ones from the
// tree. The run is then the same paths record as a copy-mode run, and the
// snapshot is deleted.

// ModeBtrfs is the isolation mode name.
const ModeBtrfs = "btrfs"

func (r *Repo) beforeSubvol(id string) string { return r.path("runs", id, "before") }

// snapSubvol takes a run's before-snapshot.
func (r *Repo) snapSubvol(m *Meta) error {
	if ok, why := fsutil.IsSubvolume(r.Root); !ok {
		return fmt.Errorf("run: --mode btrfs: %s", why)
	}
	if err := fsutil.SubvolSnapshot(r.Root, r.beforeSubvol(m.ID)); err != nil {
		return fmt.Errorf("run %s: %w", m.ID, err)
	}
	// The record needs a manifest until the run is narrowed: an empty one.
	var err error
	if m.Manifest, err = r.record(nil); err != nil {
		return err
	}
	if err := r.Flush(); err != nil {
		return err
	}
	return r.WriteMeta(m)
}

// statWalk lists every path of the tree at root (but the store and
// ignored paths) with its stat. It walks from directory descriptors: a
// path of the tree may be as long as PATH_MAX, too long with root in
// front of it.
func statWalk(root string, ign Ignorer) (map[string]statInfo, error) {
	out := map[string]statInfo{}
	d, err := fsutil.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer d.Close() // read-only
	err = d.Walk(func(_ *fsutil.Dir, _, rel string, st *unix.Stat_t) (bool, error) {
		if excluded(rel) || ign != nil && ign.Ignored(rel, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			return false, nil
		}
		si := statOf(st)
		si.Dev = 0 // a snapshot is another device: all else an untouched file keeps
		out[rel] = si
		return true, nil
	})
	return out, err
}

// narrowSubvol makes a btrfs-mode run's record from its before-snapshot
// and the tree, then deletes the snapshot.
func (r *Repo) narrowSubvol(m *Meta) error {
	snap := r.beforeSubvol(m.ID)
	if _, err := os.Lstat(snap); err != nil {
		return fmt.Errorf("finish run %s: its snapshot: %w", m.ID, err)
	}
	was, err := statWalk(snap, r.ign)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	is, err := statWalk(r.Root, r.ign)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	changed := map[string]bool{}
	for p, a := range was {
		if b, ok := is[p]; !ok || a != b {
			changed[p] = true
		}
	}
	for p := range is {
		if _, ok := was[p]; !ok {
			changed[p] = true
		}
	}
	var paths []string
	for p := range changed {
		paths = append(paths, p)
	}
	sd, err := fsutil.OpenRoot(snap)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	sc := r.newScanner(sd, r.ign, true)
	sc.noCache = true // another tree: the stat cache is the real tree's
	before, err := sc.scanPaths(paths, false)
	sd.Close()
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	after, err := r.ScanPaths(paths, true, false)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	return r.recordNarrowed(m, before, after, changed)
}

// dropSubvol deletes a btrfs-mode run's snapshot, once its record holds
// what it needs.
func (r *Repo) dropSubvol(id string) error {
	return fsutil.SubvolDelete(r.beforeSubvol(id))
}
