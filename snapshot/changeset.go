package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/layer"
	"golang.org/x/sys/unix"
)

// The upper layer of an overlay run is read in the format of Linux
// overlayfs, which every overlay mode writes; package layer is its one
// reader. The changeset is the manifest of the new state of every changed
// path, with Absent entries for deletions: the same target that undo and
// redo apply, so a commit is one more application of the one restore
// path.

// isWhiteout reports whether name in d, with stat st, is a whiteout.
func isWhiteout(d *fsutil.Dir, name string, st *unix.Stat_t) bool {
	var xs []fsutil.Xattr
	read := false
	return layer.IsWhiteout(st.Mode, st.Rdev, st.Size, func(x string) ([]byte, bool) {
		if !read { // only for an empty file, once
			xs, _ = d.Xattrs(name) // unreadable xattrs: an ordinary empty file
			read = true
		}
		return layer.ListGetter(xs)(x)
	})
}

// overlayXattrs drops overlayfs's own marks (and notes opaqueness and
// redirects).
func (sc *scanner) overlayXattrs(path string, xs []fsutil.Xattr) []fsutil.Xattr {
	get := layer.ListGetter(xs)
	opaque := layer.IsOpaque(get)
	redirect, renamed := layer.Redirect(get)
	if opaque || renamed {
		sc.mu.Lock()
		if opaque {
			sc.opaque[path] = true
		}
		if renamed {
			sc.redirect[path] = redirect
		}
		sc.mu.Unlock()
	}
	out := xs[:0]
	for _, x := range xs {
		if !layer.IsMark(x.Name) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Changeset reads an upper layer (open as upper) against the tree: the
// target state of every path the layer changes. A path of the layer that
// equals the tree (a copy-up that wrote nothing, say) is not a change.
// Paths the ignore rules match are left out: they write through.
func (r *Repo) Changeset(upper *fsutil.Dir) (Manifest, error) {
	sc := r.newScanner(upper, r.ign, false)
	sc.noCache, sc.upper, sc.opaque, sc.redirect = true, true, map[string]bool{}, map[string]string{}
	inLayer, err := sc.scanTree()
	if err != nil {
		return nil, fmt.Errorf("read upper layer: %w", err)
	}
	if len(sc.redirect) > 0 {
		if inLayer, err = r.followRedirects(inLayer, sc); err != nil {
			return nil, err
		}
	}
	// What the layer hides of the tree: everything below a whiteout, a
	// non-directory or an opaque directory, unless the layer has it again.
	var hidden []string
	for i := range inLayer {
		// (A non-directory hides what a directory of the tree held there.)
		if inLayer[i].Type != Dir || sc.opaque[inLayer[i].Path] {
			hidden = append(hidden, inLayer[i].Path)
		}
	}
	paths := inLayer.Paths()
	real, err := r.ScanPaths(paths, true, false)
	if err != nil {
		return nil, err
	}
	var below Manifest
	if len(hidden) > 0 {
		if below, err = r.ScanPaths(hidden, true, true); err != nil {
			return nil, err
		}
	}
	var out Manifest
	for i := range below {
		b := &below[i]
		if b.Type != Absent && inLayer.Find(b.Path) == nil {
			out = append(out, Entry{Path: b.Path, Type: Absent})
		}
	}
	for i := range inLayer {
		e := &inLayer[i]
		t := real.Find(e.Path)
		if t == nil {
			t = &Entry{Path: e.Path, Type: Absent}
		}
		if e.Type == t.Type && (e.Type == Absent || e.SameContent(t) && e.SameMeta(t)) && !sc.opaque[e.Path] {
			continue // no change (a copy-up that wrote nothing; a directory passed through)
		}
		// A directory whose mtime alone moved (a child changed) stays in:
		// the commit then leaves it exactly as the run's view showed it,
		// and undo puts its old time back. Diffs do not show it.
		out = append(out, *e)
	}
	out.Sort()
	// A hard link inside the layer must name a path of the changeset.
	for i := range out {
		if out[i].Link != "" && out.Find(out[i].Link) == nil {
			out[i].Link = ""
		}
	}
	return out, nil
}

// followRedirects adds to the layer what renamed directories show of the
// lower tree: every entry below a redirect's origin, at its new path,
// unless the layer covers it (its own version, a whiteout, an opaque or
// renamed directory, or a non-directory above it). Their contents are
// stored, since the commit that moves them away may delete their origin.
// A renamed directory then counts as opaque: what the tree has at its new
// path and the view does not show goes.
func (r *Repo) followRedirects(inLayer Manifest, sc *scanner) (Manifest, error) {
	var origin func(p string) string
	origin = func(p string) string {
		if p == "" {
			return ""
		}
		if v, ok := sc.redirect[p]; ok {
			return layer.Origin(v, origin(Parent(p)))
		}
		return joinPath(origin(Parent(p)), Base(p))
	}
	covered := func(d, vp string) bool {
		for a := vp; a != d && a != ""; a = Parent(a) {
			e := inLayer.Find(a)
			if e == nil {
				continue
			}
			if a == vp || e.Type != Dir || sc.opaque[a] {
				return true
			}
			if _, ok := sc.redirect[a]; ok {
				return true
			}
		}
		return false
	}
	out := append(Manifest{}, inLayer...)
	for d := range sc.redirect {
		lo := origin(d)
		if !ValidPath(lo) {
			return nil, fmt.Errorf("read upper layer: %s: bad redirect %q", d, sc.redirect[d])
		}
		lower, err := r.ScanPaths([]string{lo}, true, true)
		if err != nil {
			return nil, err
		}
		for _, le := range lower {
			if le.Path == lo || le.Type == Absent {
				continue
			}
			vp := d + "/" + strings.TrimPrefix(le.Path, lo+"/")
			if covered(d, vp) {
				continue
			}
			le.Path, le.Link = vp, ""
			out = append(out, le)
		}
		sc.opaque[d] = true
	}
	out.Sort()
	return out, nil
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// WriteThrough moves what a run wrote to ignored paths out of its upper
// layer into the tree, where it stays whatever becomes of the run (an
// audit log must survive a discard or an undo). Whiteouts of ignored paths
// delete them in the tree. Nothing here is recorded for undo.
func (r *Repo) WriteThrough(p *Pending) error {
	if r.ign == nil {
		return nil
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	defer upper.Close()
	if err := r.writeThrough(p, upper, "", false); err != nil {
		return err
	}
	return r.SavePending(p)
}

// writeThrough walks dir of the layer; below an ignored directory (all)
// everything writes through.
func (r *Repo) writeThrough(pr *Pending, upper *fsutil.Dir, dir string, all bool) error {
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
		p := name
		if dir != "" {
			p = dir + "/" + name
		}
		if excluded(p) {
			continue
		}
		st, err := ud.Lstat(name)
		if err != nil {
			return err
		}
		isDir := uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR
		if !all && !r.ign.Ignored(p, isDir) {
			if isDir {
				if err := r.writeThrough(pr, upper, p, false); err != nil {
					return err
				}
			}
			continue
		}
		if err := r.moveThrough(pr, upper, ud, dir, name, &st); err != nil {
			return fmt.Errorf("write through %s: %w", p, err)
		}
	}
	return nil
}

func (r *Repo) moveThrough(pr *Pending, upper, ud *fsutil.Dir, dir, name string, st *unix.Stat_t) error {
	p := name
	if dir != "" {
		p = dir + "/" + name
	}
	if err := r.makeParents(pr, upper, dir); err != nil {
		return err
	}
	td, err := r.root.OpenDir(dir)
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
			if err := r.bringOver(layer.Origin(redirect, dir), p); err != nil {
				return err
			}
			return r.writeThrough(pr, upper, p, true)
		}
		if realDir && !opaque {
			return r.writeThrough(pr, upper, p, true) // merge into the existing directory
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
// (for an ignored directory the run renamed): an ignored origin is simply
// renamed, as everything ignored writes through; a tracked one is copied,
// since it stays the run's to commit or discard.
func (r *Repo) bringOver(from, to string) error {
	if !ValidPath(from) {
		return fmt.Errorf("bad redirect %q", from)
	}
	if r.ign.Ignored(from, true) {
		fd, err := r.root.OpenDir(Parent(from))
		if err != nil {
			return nil // gone already: nothing to bring
		}
		defer fd.Close()
		td, err := r.root.OpenDir(Parent(to))
		if err != nil {
			return err
		}
		defer td.Close()
		if err := fd.Rename(Base(from), td, Base(to)); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	}
	src, err := r.ScanPaths([]string{from}, true, true)
	if err != nil {
		return err
	}
	var target Manifest
	for _, e := range src {
		if e.Type == Absent {
			return nil
		}
		e.Path, e.Link = to+strings.TrimPrefix(e.Path, from), ""
		target = append(target, e)
	}
	target.Sort()
	a := &applier{s: r.Store, root: r.root, opID: NewID(time.Now()), target: target, scope: ScopePaths}
	return a.run(nil)
}

// makeParents creates in the tree the directories above an ignored path
// that only the run has made so far (with the layer's modes), and notes
// them as the run's own, so committing the run later does not see them as
// changed by someone else.
func (r *Repo) makeParents(pr *Pending, upper *fsutil.Dir, dir string) error {
	if dir == "" {
		return nil
	}
	if d, err := r.root.OpenDir(dir); err == nil {
		d.Close()
		return nil
	}
	if err := r.makeParents(pr, upper, Parent(dir)); err != nil {
		return err
	}
	pd, err := r.root.OpenDir(Parent(dir))
	if err != nil {
		return err
	}
	defer pd.Close()
	mode := uint32(0o755)
	if ud, err := upper.OpenDir(Parent(dir)); err == nil {
		if st, err := ud.Lstat(Base(dir)); err == nil {
			mode = uint32(st.Mode) & 0o7777
		}
		ud.Close()
	}
	if err := pd.Mkdir(Base(dir), mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	st, err := pd.Lstat(Base(dir))
	if err != nil {
		return err
	}
	if pr.Committed == nil {
		pr.Committed = map[string]int64{}
	}
	pr.Committed[dir] = statOf(&st).Ctime
	return nil
}
