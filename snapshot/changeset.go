package snapshot

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// The upper layer of an overlay run is read in the format of Linux
// overlayfs, which every overlay mode writes (the FUSE overlay too):
//
//   - a character device 0/0 is a whiteout: the path was deleted;
//   - a directory with the xattr trusted.overlay.opaque or
//     user.overlay.opaque set to "y" replaced the directory below it:
//     nothing of the lower directory shows through;
//   - anything else is the whole new state of its path (a copied-up file
//     holds all of its content, not a delta).
//
// The changeset is the manifest of the new state of every changed path,
// with Absent entries for deletions: the same target that undo and redo
// apply, so a commit is one more application of the one restore path.

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// overlayXattrs drops overlayfs's own attributes (and notes opaqueness).
func (sc *scanner) overlayXattrs(path string, xs []fsutil.Xattr) []fsutil.Xattr {
	out := xs[:0]
	for _, x := range xs {
		if strings.HasPrefix(x.Name, "trusted.overlay.") || strings.HasPrefix(x.Name, "user.overlay.") {
			if strings.HasSuffix(x.Name, ".opaque") && bytes.Equal(x.Value, []byte("y")) {
				sc.mu.Lock()
				sc.opaque[path] = true
				sc.mu.Unlock()
			}
			continue
		}
		out = append(out, x)
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
	sc.noCache, sc.upper, sc.opaque = true, true, map[string]bool{}
	layer, err := sc.scanTree()
	if err != nil {
		return nil, fmt.Errorf("read upper layer: %w", err)
	}
	// What the layer hides of the tree: everything below a whiteout or an
	// opaque directory, unless the layer has it again.
	var hidden []string
	for i := range layer {
		if layer[i].Type == Absent || sc.opaque[layer[i].Path] {
			hidden = append(hidden, layer[i].Path)
		}
	}
	paths := layer.Paths()
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
		if b.Type != Absent && layer.Find(b.Path) == nil {
			out = append(out, Entry{Path: b.Path, Type: Absent})
		}
	}
	for i := range layer {
		e := &layer[i]
		t := real.Find(e.Path)
		if t == nil {
			t = &Entry{Path: e.Path, Type: Absent}
		}
		if e.Type == t.Type && (e.Type == Absent || e.SameContent(t) && e.SameMeta(t)) && !sc.opaque[e.Path] {
			continue // no change (a copy-up that wrote nothing; a directory passed through)
		}
		if e.Type == Dir && t.Type == Dir && !sc.opaque[e.Path] && !e.Changed(t) {
			continue // only its mtime moved, because a child changed
		}
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
