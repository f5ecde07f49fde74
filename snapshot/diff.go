package snapshot

import (
	"errors"
	"fmt"
	"io"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// Comparison is what `diff` shows: the changes between a pending run or
// a snapshot and the tree, and the paths they leave out.
type Comparison struct {
	// Base is the id of the run or snapshot compared.
	Base string
	// Run is the pending run compared (its changes as its commit would
	// make them), or nil: then Snapshot is compared with the tree.
	Run      *ViewRun
	Snapshot *record.Meta
	Changes  []record.Change
	// Targets are the states outside the tree Base holds.
	Targets []record.TargetState
	// WroteThrough and Excluded are paths written that no diff shows:
	// ignored ones (written through) and excluded ones (moved by a
	// commit).
	WroteThrough, Excluded []string
	// Skipped are sockets and devices a run left, which nothing carries.
	Skipped []record.Skipped
}

// Compare chooses what `diff` compares with the tree, and compares it:
// what ref names (read as [Reader.Lookup] reads every id), else the
// newest pending run (right after `run --then review`, "what did it
// change?" means the run), else the snapshot [Reader.DefaultDiffBase]
// names.
func (r *Reader) Compare(ref string) (*Comparison, error) {
	var p *ViewRun
	var m *record.Meta
	var err error
	if ref == "" {
		if p, err = r.FindViewRun(""); err != nil && !errors.Is(err, ErrNoPending) {
			return nil, err
		}
	} else if m, p, err = r.Lookup(ref); err != nil {
		return nil, err
	}
	if p != nil {
		target, cur, err := r.PendingChanges(p)
		if err != nil {
			return nil, err
		}
		c := &Comparison{Base: p.ID, Run: p, Changes: record.DiffManifests(cur, target), Targets: p.Targets, WroteThrough: p.WroteThrough}
		if c.Excluded, err = r.ExcludedIn(p, nil); err != nil {
			return nil, err
		}
		if c.Skipped, err = r.SkippedIn(p); err != nil {
			return nil, err
		}
		return c, nil
	}
	if m == nil {
		if m, err = r.DefaultDiffBase(); err != nil {
			return nil, err
		}
	}
	changes, err := r.Diff(m)
	if err != nil {
		return nil, err
	}
	return &Comparison{Base: m.ID, Snapshot: m, Changes: changes, Targets: m.Targets, WroteThrough: m.WroteThrough, Excluded: m.Excluded, Skipped: m.Skipped}, nil
}

// DefaultDiffBase is the snapshot `diff` compares with by default: the one
// `undo` would revert, else (all undone) the newest of those undo takes;
// never a pre-undo or pre-redo record, bookkeeping `list` shows only
// with -a.
func (r *Reader) DefaultDiffBase() (*record.Meta, error) {
	h, err := r.History()
	if err != nil {
		return nil, err
	}
	var newest *record.Meta
	for i := len(h.All) - 1; i >= 0; i-- {
		m := h.All[i]
		if !m.Kind.Undoable() {
			continue
		}
		if !h.Undone[m.ID] {
			return m, nil
		}
		if newest == nil {
			newest = m
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("no snapshots yet: %w", ErrNotFound)
	}
	return newest, nil
}

// Diff compares snapshot m with the tree as it is now (reading, never
// storing, changed contents).
func (r *Reader) Diff(m *record.Meta) ([]record.Change, error) {
	old, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return nil, err
	}
	cur, err := r.current(old, m.Scope, false)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	return record.DiffManifests(old, cur), nil
}

// DiffRecorded is what the operation that saved m changed: from m's
// manifest (what it replaced) to m.After (what it put in place), read
// from the store alone.
func (r *Reader) DiffRecorded(m *record.Meta) ([]record.Change, error) {
	old, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return nil, err
	}
	if m.After == "" {
		return nil, fmt.Errorf("diff: snapshot %s records no state after it", m.ID)
	}
	after, err := r.LoadManifest(m.After)
	if err != nil {
		return nil, err
	}
	return record.DiffManifests(old, after), nil
}

// ReadTreeFile reads up to limit bytes of the tree's file at path, never
// following a symlink.
func (r *Reader) ReadTreeFile(path string, limit int64) ([]byte, error) {
	return readBeneath(r.treeDir, path, limit)
}

// ReadFileBeneath reads up to limit bytes of the file at path below the
// directory root (an upper layer, say), never following a symlink.
func ReadFileBeneath(root, path string, limit int64) ([]byte, error) {
	d, err := fsutil.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return readBeneath(d, path, limit)
}

func readBeneath(root *fsutil.Dir, path string, limit int64) ([]byte, error) {
	d, err := root.OpenDir(record.Parent(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := d.Open(record.Base(path), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	return io.ReadAll(io.LimitReader(f, limit))
}

// ReadObjectPrefix reads up to limit bytes of a stored object.
func (r *Reader) ReadObjectPrefix(id record.ObjectID, limit int64) ([]byte, error) {
	f, err := r.OpenObject(id)
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	return io.ReadAll(io.LimitReader(f, limit))
}
