package snapshot

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/layer"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// WriteThrough moves what a run wrote to ignored paths out of its upper
// layer into the tree, where it stays whatever becomes of the run (an
// audit log must survive a discard or an undo). Whiteouts of ignored paths
// delete them in the tree. Nothing here is recorded for undo.
func (r *Repo) WriteThrough(p *ViewRun) error {
	if r.ign == nil {
		return nil
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	defer upper.Close()
	w := &layerWalk{match: r.writesThrough, skip: r.excluded, found: func(path string) {
		p.WroteThrough = addPath(p.WroteThrough, path)
	}}
	if err := r.writeThrough(p, upper, "", false, w); err != nil {
		return err
	}
	return r.SaveViewRun(p)
}

// maxNamedPaths bounds the ignored and excluded paths a run's record
// names: the topmost of them, which is what a user wants to see.
const maxNamedPaths = 50

func addPath(list []string, p string) []string {
	for _, q := range list {
		if q == p {
			return list
		}
	}
	if len(list) >= maxNamedPaths {
		return list
	}
	list = append(list, p)
	sort.Strings(list)
	return list
}

// writesThrough says whether an overlay run writes path through to the
// tree as soon as its command ends: ignored, not excluded.
func (r *Repo) writesThrough(path string, isDir bool) bool {
	return r.ign != nil && r.ign.Ignored(path, isDir) && !r.excluded(path, isDir)
}

// excluded says whether path is kept out of snapshots but isolated by an
// overlay run (see [Excluder]).
func (r *Reader) excluded(path string, isDir bool) bool {
	x, ok := r.ign.(Excluder)
	return ok && x.Excluded(path, isDir)
}

// layerWalk says which paths of an upper layer a walk moves into the tree
// (match), which it leaves where they are without looking inside (skip),
// and whom it tells of each path it moves (found, or nil).
type layerWalk struct {
	match, skip func(path string, isDir bool) bool
	found       func(path string)
}

// findInLayer walks dir of the layer as [Repo.writeThrough] does, but
// only tells w.found of the paths it would move.
func (r *Reader) findInLayer(upper *fsutil.Dir, dir string, w *layerWalk) error {
	return r.walkLayer(upper, dir, false, w, func(*fsutil.Dir, string, string, *unix.Stat_t) error { return nil })
}

// writeThrough walks dir of the layer; below a matched directory (all)
// everything moves.
func (r *Repo) writeThrough(pr *ViewRun, upper *fsutil.Dir, dir string, all bool, w *layerWalk) error {
	return r.walkLayer(upper, dir, all, w, func(ud *fsutil.Dir, dir, name string, st *unix.Stat_t) error {
		if err := r.moveThrough(pr, upper, ud, dir, name, st, w); err != nil {
			return fmt.Errorf("write through %s: %w", joinPath(dir, name), err)
		}
		return nil
	})
}

// walkLayer walks dir of the upper layer: each path w matches (every
// path, when all) goes to visit, w.found told first; a directory it does
// not match is walked into unless w skips it. The store's names are
// passed over.
func (r *Reader) walkLayer(upper *fsutil.Dir, dir string, all bool, w *layerWalk, visit func(ud *fsutil.Dir, dir, name string, st *unix.Stat_t) error) error {
	ud, err := upper.OpenDir(dir)
	if err != nil {
		return err
	}
	defer ud.Close()
	names, err := ud.ReadDirNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		p := joinPath(dir, name)
		if excluded(p) {
			continue
		}
		st, err := ud.Lstat(name)
		if err != nil {
			return err
		}
		isDir := uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR
		if !all && !w.match(p, isDir) {
			if isDir && (w.skip == nil || !w.skip(p, isDir)) {
				if err := r.walkLayer(upper, p, false, w, visit); err != nil {
					return err
				}
			}
			continue
		}
		if !all && w.found != nil {
			w.found(p)
		}
		if err := visit(ud, dir, name, &st); err != nil {
			return err
		}
	}
	return nil
}

func (r *Repo) moveThrough(pr *ViewRun, upper, ud *fsutil.Dir, dir, name string, st *unix.Stat_t, w *layerWalk) error {
	p := joinPath(dir, name)
	if err := r.makeParents(pr, upper, dir); err != nil {
		return err
	}
	td, err := r.treeDir.OpenDir(dir)
	if err != nil {
		return err
	}
	defer td.Close()
	isDir := uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR
	rs, rerr := td.Lstat(name)
	realDir := rerr == nil && uint32(rs.Mode)&unix.S_IFMT == unix.S_IFDIR
	if isWhiteout(ud, name, st) {
		if realDir {
			// A directory may have been renamed away rather than deleted
			// (its new name follows it by a redirect): never delete an
			// ignored directory on a whiteout alone.
			return ud.Unlink(name)
		}
		if err := td.RemoveAll(name); err != nil {
			return err
		}
		return ud.Unlink(name)
	}
	if isDir {
		xs, _ := ud.Xattrs(name) // unreadable xattrs: treat as a plain directory
		get := layer.ListGetter(xs)
		opaque := layer.IsOpaque(get)
		if redirect, ok := layer.Redirect(get); ok && rerr != nil {
			// Renamed from elsewhere: bring what the view showed of the
			// origin here first, then what the layer adds.
			if err := r.bringOver(layer.Origin(redirect, dir), p, w); err != nil {
				return err
			}
			return r.writeThrough(pr, upper, p, true, w)
		}
		if realDir && !opaque {
			return r.writeThrough(pr, upper, p, true, w) // merge into the existing directory
		}
	}
	if err := td.RemoveAll(name); err != nil {
		return err
	}
	if err := ud.Rename(name, td, name); err != nil {
		return err
	}
	if isDir { // overlay's own marks must not follow it into the tree
		if f, err := td.Open(name, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			layer.ClearDirMarks(int(f.Fd()))
			f.Close()
		}
	}
	return nil
}

// bringOver makes the tree's directory to a copy of its directory from
// (for an ignored directory the run renamed): an origin the walk moves
// too is simply renamed; a tracked one is copied, since it stays the
// run's to commit or discard.
func (r *Repo) bringOver(from, to string, w *layerWalk) error {
	if !record.ValidPath(from) {
		return fmt.Errorf("bad redirect %q", from)
	}
	if w.match(from, true) {
		fd, err := r.treeDir.OpenDir(record.Parent(from))
		if err != nil {
			return nil // gone already: nothing to bring
		}
		defer fd.Close()
		td, err := r.treeDir.OpenDir(record.Parent(to))
		if err != nil {
			return err
		}
		defer td.Close()
		if err := fd.Rename(record.Base(from), td, record.Base(to)); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	}
	src, err := r.ScanPaths([]string{from}, true, true)
	if err != nil {
		return err
	}
	var target record.Manifest
	for _, e := range src {
		if e.Type == record.Absent {
			return nil
		}
		e.Path, e.Link = to+strings.TrimPrefix(e.Path, from), ""
		target = append(target, e)
	}
	target.Sort()
	a := &applier{s: r.Store, root: r.treeDir, opID: record.NewID(time.Now()), target: target, scope: record.ScopePaths}
	return a.run(nil)
}

// makeParents creates in the tree the directories above an ignored path
// that only the run has made so far (with the layer's modes), and notes
// them as the run's own, so committing the run later does not see them as
// changed by someone else.
func (r *Repo) makeParents(pr *ViewRun, upper *fsutil.Dir, dir string) error {
	if dir == "" {
		return nil
	}
	if d, err := r.treeDir.OpenDir(dir); err == nil {
		d.Close()
		return nil
	}
	if err := r.makeParents(pr, upper, record.Parent(dir)); err != nil {
		return err
	}
	pd, err := r.treeDir.OpenDir(record.Parent(dir))
	if err != nil {
		return err
	}
	defer pd.Close()
	mode := uint32(0o755)
	if ud, err := upper.OpenDir(record.Parent(dir)); err == nil {
		if st, err := ud.Lstat(record.Base(dir)); err == nil {
			mode = uint32(st.Mode) & 0o7777
		}
		ud.Close()
	}
	if err := pd.Mkdir(record.Base(dir), mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	st, err := pd.Lstat(record.Base(dir))
	if err != nil {
		return err
	}
	if pr.Committed == nil {
		pr.Committed = map[string]int64{}
	}
	pr.Committed[dir] = statOf(&st).Ctime
	return nil
}
