package snapshot

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// What a commit judges a conflict by is what docs/modes.md says one is: a
// path whose type, mode, content or link target changed in the tree
// since the run started. A ctime older than the start proves a path
// unchanged, but a newer one proves nothing (touch, chmod to the same
// mode, a rewrite of the same bytes, an undo putting it back). So each
// step of a run notes, as it ends, what the tree held at the start at
// each path the run changed, or rewrote or passed through as it was —
// runs/<id>/seen, a manifest — wherever it can still tell: a path whose
// ctime is older than the start, an absent one whose nearest existing
// ancestor's is (nothing was added or removed in it since). A path
// changed before it was noted has no entry and is judged by its ctime,
// as before: a conflict, never a missed one.

// seenPath is the run's record of the start state of its paths.
func (r *Reader) seenPath(id string) string { return r.path("runs", id, "seen") }

// loadSeen reads the run's seen record (none: an empty one).
func (r *Reader) loadSeen(id string) (record.Manifest, error) {
	b, err := r.readFile(r.seenPath(id), maxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	m, err := record.DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("run %s: %s: %w", id, r.seenPath(id), err)
	}
	return m, nil
}

// noteSeen adds to the run's seen record the start state of each path
// its layer changed, or holds as the tree does, that the record lacks and
// the tree still shows.
func (r *Repo) noteSeen(p *ViewRun) error {
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	target, same, err := r.changeset(upper, p.Committed)
	upper.Close()
	if err != nil {
		return err
	}
	seen, err := r.loadSeen(p.ID)
	if err != nil {
		return err
	}
	// What the layer holds as the tree does is noted too: should someone
	// remove it before the commit, the commit would bring it back (it is
	// a change then), and only its note tells that the run left it as it
	// found it (the commit leaves the tree's: dropUnchanged).
	for _, q := range same {
		target = append(target, record.Entry{Path: q})
	}
	var paths []string
	for i := range target {
		if seen.Find(target[i].Path) == nil {
			paths = append(paths, target[i].Path)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	now, err := r.ScanPaths(paths, false, false)
	if err != nil {
		return err
	}
	start := p.StartedAt.UnixNano()
	n := len(seen)
	want := map[string]bool{}
	for _, q := range paths {
		want[q] = true
	}
	for i := range now {
		e := now[i]
		if !want[e.Path] {
			continue
		}
		want[e.Path] = false // once
		if e.Type == record.Absent && !r.absentSince(e.Path, start) || e.Type != record.Absent && e.Ctime >= start {
			continue // changed since: unknown
		}
		e.Link = "" // its own content, whatever its other names
		seen = append(seen, e)
	}
	if len(seen) == n {
		return nil
	}
	seen.Sort()
	return fsutil.WriteFileAtomic(r.seenPath(p.ID), record.EncodeManifest(seen), 0o600)
}

// absentSince reports whether an absent path was absent at start too:
// its nearest existing ancestor is unchanged since.
func (r *Repo) absentSince(path string, start int64) bool {
	for d := record.Parent(path); ; d = record.Parent(d) {
		dir, err := r.treeDir.OpenDir(d) // following no symlink
		if err == nil {
			var st unix.Stat_t
			err = unix.Fstat(dir.Fd(), &st)
			dir.Close()
			return err == nil && st.Ctim.Nano() < start
		}
		if d == "" || !errors.Is(err, unix.ENOENT) {
			return false // (a file or a symlink in the way: unknown)
		}
	}
}

// sameAsSeen reports whether the tree's entry c is what seen noted at
// its path when the run started (type, mode, content, link target); ok
// is false when seen has no entry there.
func sameAsSeen(seen, cur record.Manifest, c *record.Entry) (same, ok bool) {
	s := seen.Find(c.Path)
	if s == nil {
		return false, false
	}
	if s.Type != c.Type || s.Type != record.Symlink && s.Type != record.Absent && s.Mode != c.Mode {
		return false, true
	}
	switch c.Type {
	case record.File:
		obj := c.Object
		if l := cur.Find(c.Link); c.Link != "" && l != nil && obj.IsZero() {
			obj = l.Object
		}
		return obj == s.Object && c.Size == s.Size, true
	case record.Symlink:
		return c.Target == s.Target, true
	}
	return true, true
}

// dropUnchanged leaves out of target (what a commit of run p writes)
// each path that the run left as it found it and someone else changed
// since (the tree differs from what seen noted at the start, and not by
// the run's own earlier commit; the layer does not): writing it would
// undo their change for nothing the run did, so the commit leaves the
// tree's (--force writes it all the same). A directory goes only with
// all of target below it.
func (r *Reader) dropUnchanged(p *ViewRun, target record.Manifest) (record.Manifest, error) {
	seen, err := r.loadSeen(p.ID)
	if err != nil || len(seen) == 0 || len(target) == 0 {
		return target, err
	}
	// The paths the layer holds as they were at the start: only those are
	// read in the tree (a commit reads the rest once, later).
	asFound := map[string]bool{}
	var paths []string
	for i := range target {
		e := target[i]
		if l := target.Find(e.Link); e.Link != "" && l != nil && e.Object.IsZero() {
			e.Object = l.Object
		}
		if s := seen.Find(e.Path); s != nil && sameState(s, &e) {
			asFound[e.Path] = true
			paths = append(paths, e.Path)
		}
	}
	if len(paths) == 0 {
		return target, nil
	}
	cur, err := r.ScanPaths(paths, false, false)
	if err != nil {
		return nil, err
	}
	drop := map[string]bool{}
	kept := map[string]bool{} // directories with something kept below
	// Children before their directories (target is sorted).
	for i := len(target) - 1; i >= 0; i-- {
		e := &target[i]
		if asFound[e.Path] {
			c := cur.Find(e.Path)
			if c == nil {
				c = &record.Entry{Path: e.Path, Type: record.Absent}
			}
			at, committed := p.Committed[e.Path]
			ownCommit := committed && c.Ctime == at // the tree holds the run's own earlier commit there
			if !sameState(seen.Find(e.Path), c) && !ownCommit && !(e.Type == record.Dir && kept[e.Path]) {
				drop[e.Path] = true
				continue
			}
		}
		for q := record.Parent(e.Path); q != ""; q = record.Parent(q) {
			kept[q] = true
		}
	}
	if len(drop) == 0 {
		return target, nil
	}
	out := make(record.Manifest, 0, len(target)-len(drop))
	for i := range target {
		if !drop[target[i].Path] {
			out = append(out, target[i])
		}
	}
	for i := range out {
		if out[i].Link != "" && out.Find(out[i].Link) == nil {
			// Its partner stays the tree's: a file of its own, of the
			// content the run left.
			if l := target.Find(out[i].Link); l != nil && out[i].Object.IsZero() {
				out[i].Object, out[i].Size = l.Object, l.Size
			}
			out[i].Link = ""
		}
	}
	return out, nil
}
