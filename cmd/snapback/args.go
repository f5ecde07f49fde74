package main

// Argument parsing that verbs share: ids and paths as the user gives them.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/snapshot"
)

// pendingAndPaths splits [ID] [PATH...]: the first argument is an ID when
// it names a pending run and no file of that name is here (a path "a"
// could also be the end of a run's id: ./a says it is a path).
func pendingAndPaths(repo *snapshot.Reader, args []string) (*snapshot.ViewRun, []string, error) {
	if len(args) > 0 {
		if p, err := repo.FindViewRun(args[0]); err == nil {
			if _, err := os.Lstat(args[0]); err != nil {
				return p, args[1:], nil
			}
		}
	}
	p, err := repo.FindViewRun("")
	return p, args, err
}

// relPaths turns user paths (relative to the working directory, or
// absolute) into root-relative ones.
func relPaths(root string, paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, usageErr("%s: not inside the project root %s", p, root)
		}
		if rel == "." {
			rel = ""
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out, nil
}

// underAny reports whether path is at or below one of paths
// (root-relative, "" for the root); no paths at all stand for the root.
func underAny(path string, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, l := range paths {
		if l == "" || path == l || strings.HasPrefix(path, l+"/") {
			return true
		}
	}
	return false
}

// diffIDAndPaths splits diff's arguments as commit's are split: the
// first is an ID when it names a snapshot or a run and no file of that
// name is here (./a says a path "a" is a path); after --, ids holds what
// came before it, an ID. When the first argument names no id and is
// taken for a path, idErr says so, for limitDiff's error.
func diffIDAndPaths(repo *snapshot.Reader, ids, paths []string) (ref string, rest []string, idErr, err error) {
	if paths != nil { // -- was given
		if len(ids) == 1 {
			return ids[0], paths, nil, nil
		}
		return "", paths, nil, nil
	}
	if len(ids) == 0 {
		return "", nil, nil, nil
	}
	if _, err := os.Lstat(ids[0]); err == nil {
		return "", ids, nil, nil
	}
	_, _, err = repo.Lookup(ids[0])
	if errors.As(err, new(*snapshot.UnknownIDError)) {
		// A deleted file's name, or a mistyped id: limitDiff says which
		// (an id has no slash).
		if strings.ContainsRune(ids[0], '/') {
			err = nil
		}
		return "", ids, err, nil
	}
	if err != nil {
		return "", nil, nil, err
	}
	return ids[0], ids[1:], nil, nil
}
