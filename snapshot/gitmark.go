package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// The store lives in the tree, where `git clean -fdx` removes what git
// ignores, and the store ignores itself (.gitignore `*`). git clean skips
// a directory that holds a nested repository unless forced twice (-ff),
// so the store holds the least git takes for one: .git/ with HEAD,
// objects/ and refs/ (made here, git may be absent). A nested repository
// is no longer looked into for ignore rules, so git status and `git add
// -A` would offer it: the project's repository is told to ignore it in
// its local exclude file (.git/info/exclude, never committed).

// Bound on HEAD in the marker, and on the project's exclude file read.
const (
	maxMarkHead = 256
	maxExclude  = 1 << 20
)

// markHead is the marker's HEAD: a branch with no commit, as `git init`.
var markHead = []byte("ref: refs/heads/main\n")

// excludeLine is what the project's exclude file gets.
const excludeLine = "/" + StoreDir + "/"

// checkMark refuses a marker that is not exactly what markRepo makes.
func (s *Store) checkMark() error {
	parts := map[string]int64{"HEAD": maxMarkHead, "objects": -1, "refs": -1}
	if err := s.checkPart(".git", true, 0); err != nil {
		return err
	}
	for n, max := range parts {
		if err := s.checkPart(".git/"+n, max < 0, max); err != nil {
			return err
		}
	}
	for _, sub := range []string{"", "/objects", "/refs"} {
		d, err := s.openDir(".git" + sub)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		names, err := d.ReadDirNames()
		d.Close() // read-only
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		for _, n := range names {
			if _, ok := parts[n]; sub != "" || !ok {
				// git would read a config or a hook planted here when run
				// inside the store: only the bare marker is kept.
				return &UntrustedError{Path: s.path(".git"+sub, n), Reason: "is not part of the marker snapback keeps there (.git/ with HEAD, objects/, refs/)"}
			}
		}
	}
	return nil
}

// markRepo makes the store's nested-repository marker where it is missing.
func (s *Store) markRepo() error {
	for _, d := range []string{".git", ".git/objects", ".git/refs"} {
		fsutil.Mutating()
		if err := os.Mkdir(s.path(d), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("open store: %w", err)
		}
	}
	head := s.path(".git", "HEAD")
	if _, err := os.Lstat(head); errors.Is(err, fs.ErrNotExist) {
		if err := fsutil.WriteFileAtomic(head, markHead, 0o600); err != nil {
			return fmt.Errorf("open store: %w", err)
		}
	}
	return nil
}

// excludeFromProject adds the store to the exclude file of the project's
// repository (root/.git a plain directory) unless a line there names it.
// It is best effort: a project that is no repository, or whose .git is a
// file (a worktree, a submodule) or a link, is left alone, and a failure
// costs only `git status` listing the store.
func (s *Store) excludeFromProject() {
	root, err := fsutil.OpenRoot(s.Root)
	if err != nil {
		return
	}
	defer root.Close()
	if st, err := root.Lstat(".git"); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	b, err := root.ReadFileLimit(".git/info/exclude", maxExclude, nil)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		switch string(bytes.TrimSpace(l)) {
		case excludeLine, "/" + StoreDir, StoreDir, StoreDir + "/":
			return
		}
	}
	gd, err := root.OpenDir(".git")
	if err != nil {
		return
	}
	defer gd.Close()
	if _, err := gd.Lstat("info"); errors.Is(err, fs.ErrNotExist) && gd.Mkdir("info", 0o755) != nil {
		return
	}
	info, err := gd.OpenDir("info")
	if err != nil {
		return
	}
	defer info.Close()
	f, err := info.Open("exclude", unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT, 0o644)
	if err != nil {
		return
	}
	add := "# snapback's store: no part of the project (git clean -fdx keeps it)\n" + excludeLine + "\n"
	if len(b) > 0 && b[len(b)-1] != '\n' {
		add = "\n" + add
	}
	fsutil.Mutating()
	if _, err := f.WriteString(add); err == nil {
		f.Sync() // a failed write or sync only leaves the store listed
	}
	f.Close()
}
