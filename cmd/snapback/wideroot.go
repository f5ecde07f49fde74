package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
	"golang.org/x/sys/unix"
)

// refuseWideRoot refuses to make a store at the home directory or at /
// when that root was found only because nothing nearer marks a project:
// the working directory itself, or a git work tree whose top is there (a
// repository of dotfiles). A `snap` from ~/notes would otherwise copy all
// of the home directory. Respected: a store already there, a
// snapback.toml there (someone chose that root), and -C naming that very
// directory.
func (g *globals) refuseWideRoot(root string) error {
	what := ""
	switch home, _ := os.UserHomeDir(); {
	case sameDir(root, "/"):
		what = "/, the whole machine"
	case home != "" && sameDir(root, home):
		what = root + ", your home directory"
	default:
		return nil
	}
	if _, err := os.Lstat(filepath.Join(root, config.FileName)); err == nil || snapshot.Marked(root) {
		return nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if g.dir != "" && sameDir(wd, root) {
		return nil // -C named it
	}
	why := "the directory you are in"
	if _, err := os.Lstat(filepath.Join(root, ".git")); err == nil && !sameDir(wd, root) {
		why = "the top of the git work tree around " + wd
	}
	verb := g.verb
	if verb == "" {
		verb = "snapback"
	}
	hint := "cd into the project, or create a snapback.toml (empty will do) in it to make it the root"
	if !sameDir(wd, root) {
		hint = "`touch " + shellWord(filepath.Join(wd, config.FileName)) + "` makes " + wd + " the project"
	}
	hint += "; `snapback -C " + shellWord(root) + " " + verb + "` protects all of " + root
	return &exitError{code: 2, kind: "wide_root", hint: hint,
		err: fmt.Errorf("%s: the project root would be %s (%s), found as %s with nothing nearer marking a project", verb, what, treeSize(root), why)}
}

// sameDir: a and b name the same directory.
func sameDir(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// The size of a tree is a quick estimate: the walk stops at whichever
// comes first (variables for the tests).
var (
	sizeBudgetEntries = 100_000
	sizeBudgetTime    = 300 * time.Millisecond
)

var errSizeBudget = errors.New("size budget spent")

// treeSize says how much a snapshot of root would copy, as du -x counts
// it (regular files' sizes, one filesystem): "N MiB in N files", or "at
// least …" when the walk stopped at its budget or at a directory it
// cannot read.
func treeSize(root string) string {
	var bytes, files int64
	entries := 0
	deadline := time.Now().Add(sizeBudgetTime)
	complete := false
	if d, err := fsutil.OpenRoot(root); err == nil {
		var top unix.Stat_t
		err = unix.Fstat(d.Fd(), &top)
		if err == nil {
			err = d.Walk(func(_ *fsutil.Dir, _, _ string, st *unix.Stat_t) (bool, error) {
				entries++
				if entries > sizeBudgetEntries || entries%1000 == 0 && time.Now().After(deadline) {
					return false, errSizeBudget
				}
				if st.Mode&unix.S_IFMT == unix.S_IFREG {
					bytes += st.Size
					files++
				}
				return st.Dev == top.Dev, nil
			})
		}
		complete = err == nil
		d.Close() // read-only
	}
	s := fmt.Sprintf("%s in %d files", humanBytes(bytes), files)
	if !complete {
		s = "at least " + s
	}
	return s
}
