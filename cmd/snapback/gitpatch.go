package main

import (
	"strings"

	"github.com/snapback/snapback/internal/gitdiff"
	"github.com/snapback/snapback/snapshot/record"
)

// What diff -p, --stat and show print of a change, in git's format (the
// format itself, headers, quoting, hunks and the stat graph, is
// internal/gitdiff's). A directory has no patch of its own (the files in
// it do); a fifo cannot be said in a patch, nor can a binary file's
// content (`Binary files … differ`, which git apply refuses).

// gitMode is the mode git records for an entry ("" for what git cannot
// track).
func gitMode(e *record.Entry) string {
	switch {
	case e == nil:
		return ""
	case e.Type == record.Symlink:
		return "120000"
	case e.Type != record.File:
		return ""
	case e.Mode&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// gitPatch is the patch of one change in git's format ("" when git has
// nothing to say about it: a directory, a fifo, a mode bit git does not
// track). A change of type is a deletion followed by a creation, as git
// writes it.
func (d *differ) gitPatch(c record.Change) string {
	om, nm := gitMode(c.Old), gitMode(c.New)
	if om != "" && nm != "" && (c.Old.Type != c.New.Type) {
		return d.gitFilePatch(c.Path, c.Old, nil, om, "") + d.gitFilePatch(c.Path, nil, c.New, "", nm)
	}
	old, new := c.Old, c.New
	if om == "" {
		old = nil
	}
	if nm == "" {
		new = nil
	}
	if old == nil && new == nil {
		return ""
	}
	return d.gitFilePatch(c.Path, old, new, om, nm)
}

// gitFilePatch writes the patch taking path from old to new (either nil).
func (d *differ) gitFilePatch(path string, old, new *record.Entry, om, nm string) string {
	same := old != nil && new != nil && old.SameContent(new)
	var sb strings.Builder
	gitdiff.FilePatch(&sb, path, d.gitSideOf(old, om, true, path, !same), d.gitSideOf(new, nm, false, path, !same), same)
	return sb.String()
}

// gitSideOf is what git knows of one side of a patch (nil for none); the
// blob id is read only when withID (it means reading the content).
func (d *differ) gitSideOf(e *record.Entry, mode string, old bool, path string, withID bool) *gitdiff.Side {
	if e == nil {
		return nil
	}
	s := &gitdiff.Side{Mode: mode}
	s.Text, s.Textual = d.gitSide(e, old, path)
	if withID {
		s.ID, _ = d.blobID(e, old, path)
	}
	return s
}

// blobLimit: larger files get no index line (their ids would mean
// reading them whole).
const blobLimit = 64 << 20

// blobID is the id git gives a side's content (all zeros for no side);
// ok is false when it cannot be read or is larger than blobLimit.
func (d *differ) blobID(e *record.Entry, old bool, path string) (string, bool) {
	if e == nil {
		return strings.Repeat("0", 40), true
	}
	if e.Type == record.Symlink {
		return gitdiff.BlobID([]byte(e.Target)), true
	}
	if e.Size > blobLimit {
		return "", false
	}
	b, err := d.read(e, old, path, blobLimit+1)
	if err != nil || len(b) > blobLimit {
		return "", false
	}
	return gitdiff.BlobID(b), true
}

// gitSide is one side's content as git sees it: a file's bytes, a
// symlink's target; ok is false for a binary or large file.
func (d *differ) gitSide(e *record.Entry, old bool, path string) (string, bool) {
	if e != nil && e.Type == record.Symlink {
		return e.Target, true
	}
	return d.text(e, old, path)
}

// gitStat is a change's line of `git diff --stat`; ok is false when git
// would not list it (a directory, a fifo).
func (d *differ) gitStat(c record.Change) (gitdiff.StatLine, bool) {
	old, new := c.Old, c.New
	if gitMode(old) == "" {
		old = nil
	}
	if gitMode(new) == "" {
		new = nil
	}
	if old == nil && new == nil {
		return gitdiff.StatLine{}, false
	}
	s := gitdiff.StatLine{Name: gitdiff.Quote(c.Path)}
	a, okA := d.gitSide(old, true, c.Path)
	b, okB := d.gitSide(new, false, c.Path)
	if !okA || !okB {
		if old != nil && new != nil && old.SameContent(new) {
			return s, true // a mode change alone: 0 lines
		}
		s.Binary = true
		if old != nil {
			s.OldSize = old.Size
		}
		if new != nil {
			s.NewSize = new.Size
		}
		return s, true
	}
	s.Added, s.Deleted = gitdiff.Count(gitdiff.Lines(a), gitdiff.Lines(b))
	return s, true
}
