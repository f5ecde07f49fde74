package snapshot

import (
	"fmt"
	"sort"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/layer"
	"github.com/snapback/snapback/snapshot/record"
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
	return layer.IsWhiteout(uint32(st.Mode), uint64(st.Rdev), st.Size, func(x string) ([]byte, bool) {
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
func (r *Reader) Changeset(upper *fsutil.Dir) (record.Manifest, error) {
	out, _, err := r.changeset(upper, nil)
	return out, err
}

// RunChangeset is [Reader.Changeset] of run p's layer. A path the run
// committed itself (a commit of PATHs, or of hunks, moves it out of the
// layer) is not taken for one the layer hides: below a directory the run
// made, the tree's copy of it would read as deleted, and a commit of the
// rest deleted it.
func (r *Reader) RunChangeset(p *ViewRun, upper *fsutil.Dir) (record.Manifest, error) {
	out, _, err := r.changeset(upper, p.Committed)
	return out, err
}

// changeset is [Reader.Changeset], and the paths of the layer's files
// and directories that the tree holds as they are (a copy-up rewritten
// with the same bytes, mode and times; a directory passed through): no
// changes while the tree keeps them, but changes should the tree lose
// them.
func (r *Reader) changeset(upper *fsutil.Dir, committed map[string]int64) (record.Manifest, []string, error) {
	sc := r.newScanner(upper, r.ign, false)
	sc.noCache, sc.upper, sc.opaque, sc.redirect = true, true, map[string]bool{}, map[string]string{}
	inLayer, err := sc.scanTree()
	if err != nil {
		return nil, nil, fmt.Errorf("read upper layer: %w", err)
	}
	if len(sc.redirect) > 0 {
		if inLayer, err = r.followRedirects(inLayer, sc); err != nil {
			return nil, nil, err
		}
	}
	// What the layer hides of the tree: everything below a whiteout, a
	// non-directory or an opaque directory, unless the layer has it again.
	var hidden []string
	for i := range inLayer {
		// (A non-directory hides what a directory of the tree held there.)
		if inLayer[i].Type != record.Dir || sc.opaque[inLayer[i].Path] {
			hidden = append(hidden, inLayer[i].Path)
		}
	}
	paths := inLayer.Paths()
	real, err := r.ScanPaths(paths, true, false)
	if err != nil {
		return nil, nil, err
	}
	var below record.Manifest
	if len(hidden) > 0 {
		if below, err = r.ScanPaths(hidden, true, true); err != nil {
			return nil, nil, err
		}
	}
	var out record.Manifest
	var same []string
	for i := range below {
		b := &below[i]
		if _, own := committed[b.Path]; own {
			continue // committed by the run: out of the layer, not hidden by it
		}
		if b.Type != record.Absent && inLayer.Find(b.Path) == nil {
			out = append(out, record.Entry{Path: b.Path, Type: record.Absent})
		}
	}
	for i := range inLayer {
		e := &inLayer[i]
		t := real.Find(e.Path)
		if t == nil {
			t = &record.Entry{Path: e.Path, Type: record.Absent}
		}
		if e.Type == t.Type && (e.Type == record.Absent || e.SameContent(t) && e.SameMeta(t)) && !sc.opaque[e.Path] {
			if e.Type != record.Absent && e.Path != "" {
				same = append(same, e.Path)
			}
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
	return out, same, nil
}

// followRedirects adds to the layer what renamed directories show of the
// lower tree: every entry below a redirect's origin, at its new path,
// unless the layer covers it (its own version, a whiteout, an opaque or
// renamed directory, or a non-directory above it). Their contents are
// stored, since the commit that moves them away may delete their origin.
// A renamed directory then counts as opaque: what the tree has at its new
// path and the view does not show goes.
func (r *Reader) followRedirects(inLayer record.Manifest, sc *scanner) (record.Manifest, error) {
	var origin func(p string) string
	origin = func(p string) string {
		if p == "" {
			return ""
		}
		if v, ok := sc.redirect[p]; ok {
			return layer.Origin(v, origin(record.Parent(p)))
		}
		return joinPath(origin(record.Parent(p)), record.Base(p))
	}
	covered := func(d, vp string) bool {
		for a := vp; a != d && a != ""; a = record.Parent(a) {
			e := inLayer.Find(a)
			if e == nil {
				continue
			}
			if a == vp || e.Type != record.Dir || sc.opaque[a] {
				return true
			}
			if _, ok := sc.redirect[a]; ok {
				return true
			}
		}
		return false
	}
	out := append(record.Manifest{}, inLayer...)
	for d := range sc.redirect {
		lo := origin(d)
		if !record.ValidPath(lo) {
			return nil, fmt.Errorf("read upper layer: %s: bad redirect %q", d, sc.redirect[d])
		}
		lower, err := r.ScanPaths([]string{lo}, true, true)
		if err != nil {
			return nil, err
		}
		for _, le := range lower {
			if le.Path == lo || le.Type == record.Absent {
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

// SkippedIn lists what a pending run's command left in its upper layer
// that no commit carries: sockets and devices (whiteouts aside), at paths
// the ignore rules do not write through. The layer holds only what the
// command changed, so each of them is the command's.
func (r *Reader) SkippedIn(p *ViewRun) ([]record.Skipped, error) {
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return nil, fmt.Errorf("read upper layer: %w", err)
	}
	defer upper.Close()
	var out []record.Skipped
	var walk func(d *fsutil.Dir, dir string) error
	walk = func(d *fsutil.Dir, dir string) error {
		names, err := d.ReadDirNames()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, name := range names {
			path := name
			if dir != "" {
				path = dir + "/" + name
			}
			st, err := d.Lstat(name)
			if err != nil {
				return err
			}
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			if r.ign != nil && r.ign.Ignored(path, isDir) || isWhiteout(d, name, &st) {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFSOCK:
				out = append(out, record.Skipped{Path: path, Type: record.SkippedSocket})
			case unix.S_IFCHR, unix.S_IFBLK:
				out = append(out, record.Skipped{Path: path, Type: record.SkippedDevice})
			case unix.S_IFDIR:
				sub, err := d.OpenDir(name)
				if err != nil {
					return err
				}
				err = walk(sub, path)
				sub.Close()
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(upper, ""); err != nil {
		return nil, fmt.Errorf("read upper layer: %w", err)
	}
	return out, nil
}
