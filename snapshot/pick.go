package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/layer"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// Pick is what `commit -p` or `discard -p` takes of a pending run:
// entries of its changeset whole (exactly these paths), and parts of
// files.
type Pick struct {
	Paths []string
	Parts []Part
}

// Part is a file of a pending run of which only some changes are taken:
// Content is what the file is to hold, made from Base (the content of the
// tree's file) and New (the content of the run's): for a commit, Base
// with the chosen changes; for a discard, Base with those kept. Both are
// checked before anything changes.
type Part struct {
	Path      string
	Base, New record.ObjectID
	Content   []byte
}

// CommitPick commits what pick takes of a pending run, as one crash-safe
// step (the transition of every commit), the rest left pending: each
// part's content is stored and written to the tree from the store, its
// hash checked, while the layer keeps the file with the changes not
// taken. The directories the picked paths are in come with them.
func (r *Repo) CommitPick(p *ViewRun, pick Pick, force bool) (*record.Meta, error) {
	all, err := r.commitable(p)
	if err != nil {
		return nil, err
	}
	sel, bases, err := r.picked(p, all, pick, "commit")
	if err != nil {
		return nil, err
	}
	if sel, err = r.withNewDirs(all, sel); err != nil {
		return nil, err
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("commit %s: nothing picked", p.ID)
	}
	return r.commitSelected(p, sel, nil, bases, force)
}

// withNewDirs adds to sel, a part of the changeset all, each directory of
// all above a path of sel that the tree does not have (the apply makes no
// directory its target does not name); a directory the tree has keeps its
// own changes pending.
func (r *Reader) withNewDirs(all, sel record.Manifest) (record.Manifest, error) {
	var dirs []string
	for i := range sel {
		for d := record.Parent(sel[i].Path); d != ""; d = record.Parent(d) {
			if e := all.Find(d); e != nil && e.Type == record.Dir && sel.Find(d) == nil && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) == 0 {
		sel.Sort()
		return sel, nil
	}
	tree, err := r.ScanPaths(dirs, false, false)
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if c := tree.Find(d); c == nil || c.Type != record.Dir {
			sel = append(sel, *all.Find(d))
		}
	}
	sel.Sort()
	return sel, nil
}

// picked is the part of the changeset all that pick takes: its whole
// entries, and each part as its file's entry with the part's content
// (stored now). It maps each part's path to its base.
func (r *Repo) picked(p *ViewRun, all record.Manifest, pick Pick, op string) (record.Manifest, map[string]record.ObjectID, error) {
	var sel record.Manifest
	bases := map[string]record.ObjectID{}
	for _, path := range pick.Paths {
		e := all.Find(path)
		if e == nil {
			return nil, nil, fmt.Errorf("%s %s: %w: the run did not change %q", op, p.ID, ErrNotFound, path)
		}
		sel = append(sel, *e)
	}
	for _, pt := range pick.Parts {
		e := all.Find(pt.Path)
		if e == nil || e.Type != record.File || e.Object != pt.New {
			return nil, nil, fmt.Errorf("%s %s: %s changed in the run since its hunks were read; nothing was changed, try again", op, p.ID, pt.Path)
		}
		if e.Link != "" || linkedTo(all, pt.Path) {
			return nil, nil, fmt.Errorf("%s %s: %s is a hard link in the run: it is taken whole or not at all", op, p.ID, pt.Path)
		}
		if _, dup := bases[pt.Path]; dup || sel.Find(pt.Path) != nil {
			return nil, nil, fmt.Errorf("%s %s: %s picked twice", op, p.ID, pt.Path)
		}
		bases[pt.Path] = pt.Base
		if op != "commit" {
			continue // a discard writes the layer, not the store
		}
		id, err := r.PutBytes(pt.Content)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", op, p.ID, err)
		}
		ne := *e
		ne.Object, ne.Size, ne.Mtime = id, int64(len(pt.Content)), time.Now().UnixNano()
		sel = append(sel, ne)
		sel.Sort()
	}
	sel.Sort()
	// As selectPaths: a hard link names a path of the selection.
	for i := range sel {
		if sel[i].Link != "" && sel.Find(sel[i].Link) == nil {
			sel[i].Link = ""
		}
	}
	return sel, bases, nil
}

// linkedTo reports whether an entry of m is a hard link to path.
func linkedTo(m record.Manifest, path string) bool {
	for i := range m {
		if m[i].Link == path {
			return true
		}
	}
	return false
}

// DiscardPick drops what pick takes from a pending run's layer, the tree
// untouched: a part's file is rewritten in the layer (through a temp in
// the store's tmp/ and one rename, so it is at every instant the old or
// the new), a whole entry is removed from the layer, and so is each
// directory of the layer that only held what went (a directory goes with
// the files in it, as it comes with them in a commit). Each path is one
// atomic step: a crash leaves every path either discarded or pending. A
// run left with nothing is dropped.
func (r *Repo) DiscardPick(p *ViewRun, pick Pick) error {
	if p.State == record.StateRunning {
		return fmt.Errorf("run %s: %w", p.ID, ErrRunning)
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	defer upper.Close()
	all, err := r.RunChangeset(p, upper)
	if err != nil {
		return err
	}
	_, bases, err := r.picked(p, all, pick, "discard")
	if err != nil {
		return err
	}
	var partPaths []string
	for _, pt := range pick.Parts {
		partPaths = append(partPaths, pt.Path)
	}
	tree, err := r.ScanPaths(partPaths, false, false)
	if err != nil {
		return err
	}
	for path, base := range bases {
		if c := tree.Find(path); c == nil || c.Type != record.File || c.Object != base {
			return fmt.Errorf("discard %s: %s changed in the tree since its hunks were read; nothing was changed, try again", p.ID, path)
		}
	}
	for _, pt := range pick.Parts {
		if err := r.rewriteInLayer(upper, pt.Path, pt.Content); err != nil {
			return fmt.Errorf("discard %s: %s: %w", p.ID, pt.Path, err)
		}
	}
	paths := append([]string(nil), pick.Paths...)
	sort.Sort(sort.Reverse(sort.StringSlice(paths))) // what is below first
	picked := map[string]bool{}
	for _, path := range paths {
		picked[path] = true
	}
	goneWith := func(path string) bool { // an ancestor is picked too
		for d := record.Parent(path); d != ""; d = record.Parent(d) {
			if picked[d] {
				return true
			}
		}
		return false
	}
	tree, err = r.ScanPaths(paths, false, false)
	if err != nil {
		return err
	}
	for _, path := range paths {
		if err := r.dropFromLayer(upper, path, tree.Find(path), goneWith(path)); err != nil {
			return fmt.Errorf("discard %s: %w", p.ID, err)
		}
	}
	if err := r.dropEmptied(upper, all, paths); err != nil {
		return fmt.Errorf("discard %s: %w", p.ID, err)
	}
	left, err := r.RunChangeset(p, upper)
	if err != nil {
		return err
	}
	excl, err := r.ExcludedIn(p, nil)
	if err != nil {
		return err
	}
	if len(left) == 0 && len(excl) == 0 && len(p.Targets) == 0 {
		return r.dropRun(p.ID)
	}
	return nil
}

// dropFromLayer removes path's entry from the layer: a non-directory
// (a file, a symlink, a whiteout) is unlinked, a directory removed when
// empty; one that still holds changes and that the tree has (c) as a
// directory too is given the tree's owner and mode (its change was
// those). A deletion the layer holds no entry for went with its
// directory, which must be picked too (withDir).
func (r *Repo) dropFromLayer(upper *fsutil.Dir, path string, c *record.Entry, withDir bool) error {
	d, err := upper.OpenDir(record.Parent(path))
	var st unix.Stat_t
	if err == nil {
		defer d.Close()
		st, err = d.Lstat(record.Base(path))
	}
	switch {
	case errors.Is(err, unix.ENOENT) && withDir:
		return nil // gone with the directory picked with it
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s went with its directory: only the directory's deletion can be discarded", path)
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		err := d.Rmdir(record.Base(path))
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			if err != nil {
				return err
			}
			break
		}
		if c == nil || c.Type != record.Dir {
			return fmt.Errorf("%s holds changes not discarded: a directory goes with what is in it", path)
		}
		if os.Geteuid() == 0 {
			if err := d.Lchown(record.Base(path), int(c.UID), int(c.GID)); err != nil {
				return err
			}
		}
		if err := d.Chmod(record.Base(path), c.Mode); err != nil {
			return err
		}
	default:
		if err := d.Unlink(record.Base(path)); err != nil {
			return err
		}
	}
	return d.Sync()
}

// dropEmptied removes from the layer each directory above the dropped
// paths that is left empty and holds no change of its own but for being
// there (one the tree does not have, or has as it is but for its mtime);
// an opaque directory (one that hides the tree's) stays, as its deletions
// are changes.
func (r *Repo) dropEmptied(upper *fsutil.Dir, all record.Manifest, dropped []string) error {
	seen := map[string]bool{}
	var dirs []string
	for _, path := range dropped {
		for d := record.Parent(path); d != "" && !seen[d]; d = record.Parent(d) {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs))) // deepest first
	tree, err := r.ScanPaths(dirs, false, false)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		pd, err := upper.OpenDir(record.Parent(dir))
		if err != nil {
			continue
		}
		xs, _ := pd.Xattrs(record.Base(dir))
		e, c := all.Find(dir), tree.Find(dir)
		if layer.IsOpaque(layer.ListGetter(xs)) ||
			c != nil && c.Type == record.Dir && e != nil && (e.Type != record.Dir || e.Mode != c.Mode || e.UID != c.UID || e.GID != c.GID) {
			pd.Close()
			continue // a change of its own: kept
		}
		err = pd.Rmdir(record.Base(dir))
		if err == nil {
			err = pd.Sync()
		}
		pd.Close()
		if err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// rewriteInLayer replaces the content of the layer's file path with
// content, keeping its owner, mode and xattrs (the layer's own marks
// among them): written as a temp in the store's tmp/ (on the layer's
// filesystem; recover sweeps it) and renamed over the file.
func (r *Repo) rewriteInLayer(upper *fsutil.Dir, path string, content []byte) error {
	d, err := upper.OpenDir(record.Parent(path))
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := d.Lstat(record.Base(path))
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("not a regular file in the run's layer")
	}
	xs, err := d.Xattrs(record.Base(path))
	if err != nil {
		return err
	}
	fsutil.Mutating()
	f, err := os.CreateTemp(r.path("tmp"), "part-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp) // best effort; recover sweeps tmp/
		return err
	}
	fd := int(f.Fd())
	fsutil.Mutating()
	if _, err := f.Write(content); err != nil {
		return fail(err)
	}
	if os.Geteuid() == 0 {
		fsutil.Mutating()
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return fail(err)
		}
	}
	if err := fsutil.SetXattrs(fd, path, xs); err != nil {
		return fail(err)
	}
	fsutil.Mutating()
	if err := unix.Fchmod(fd, uint32(st.Mode&0o7777)); err != nil {
		return fail(err)
	}
	fsutil.Mutating()
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	td, err := r.openDir("tmp")
	if err != nil {
		os.Remove(tmp)
		return err
	}
	defer td.Close()
	if err := td.Rename(filepath.Base(tmp), d, record.Base(path)); err != nil {
		os.Remove(tmp)
		return err
	}
	return d.Sync()
}
