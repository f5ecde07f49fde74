package snapshot

import (
	"fmt"
	"os"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// A tree mode with a copy-on-write snapshot (isolation.Tree.Snapshot:
// btrfs) starts a run with a snapshot of the root (one call, whatever the
// tree's size) instead of reading the tree into the store, and the
// command runs on the tree itself. When it ends, the snapshot and the tree
// are compared by stat alone (the snapshot keeps inode numbers and times,
// so an untouched file looks the same in both), and only the paths that
// differ are read: their old contents from the snapshot, their new ones
// from the tree. The run is then the same paths record as a copy-mode
// run, and the snapshot is dropped.

// treeMode is the shape of the tree mode of that name, or nil.
func treeMode(name string) *isolation.Tree {
	if m := isolation.Find(name); m != nil {
		return m.Tree
	}
	return nil
}

// beforeCoW is where a run's snapshot of the root is taken.
func (r *Repo) beforeCoW(id string) string { return r.path("runs", id, "before") }

// snapCoW takes a run's snapshot of the root.
func (r *Repo) snapCoW(m *record.Meta, tree *isolation.Tree) error {
	if tree.Check != nil {
		if ok, why := tree.Check(r.Root); !ok {
			return fmt.Errorf("run: --mode %s: %s", m.Mode, why)
		}
	}
	if err := tree.Snapshot(r.Root, r.beforeCoW(m.ID)); err != nil {
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

// narrowCoW makes the record of a run with a snapshot from the snapshot
// and the tree.
func (r *Repo) narrowCoW(m *record.Meta) error {
	snap := r.beforeCoW(m.ID)
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
