package gitdirs

import (
	"path/filepath"
	"strings"
)

// Dir is one directory a repository's state lives in.
type Dir struct {
	Path string `json:"path"`
	// What says what git keeps there.
	What string `json:"what"`
	// Inside is set when Path is under the root: a snapshot of the root
	// holds it.
	Inside bool `json:"inside"`
}

// Uncovered is a directory the project's state depends on that its
// protection does not hold, and why.
type Uncovered struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Dirs lists where the repository keeps its state, each said to be
// inside root or not: the git dir, the common dir when it is another,
// and the work tree when git's is neither inside root nor around it
// (core.worktree or GIT_WORK_TREE pointing elsewhere).
func (r *Repo) Dirs(root string) []Dir {
	root = resolved(root)
	out := []Dir{{Path: r.GitDir, What: r.gitDirWhat(), Inside: within(resolved(r.GitDir), root)}}
	if r.CommonDir != r.GitDir {
		out = append(out, Dir{Path: r.CommonDir, What: "the repository's common dir (branches, tags, packed-refs, objects, config)",
			Inside: within(resolved(r.CommonDir), root)})
	}
	if wt := resolved(r.WorkTree); r.WorkTree != "" && !within(wt, root) && !within(root, wt) {
		out = append(out, Dir{Path: r.WorkTree, What: "git's work tree (core.worktree or GIT_WORK_TREE), which is not the root's", Inside: false})
	}
	return out
}

func (r *Repo) gitDirWhat() string {
	switch {
	case r.CommonDir != r.GitDir:
		return "this worktree's git dir (HEAD, index, reflog)"
	case r.Via == ViaFile:
		return "the git dir a .git file names (HEAD, index, refs, objects)"
	case r.Via == ViaGitDir:
		return "the git dir GIT_DIR names (HEAD, index, refs, objects)"
	}
	return "the git dir (HEAD, index, refs, objects)"
}

// Saved says how much of the git state outside the root a step saves.
type Saved int

const (
	// SavedNone: nothing; undo does not put it back.
	SavedNone Saved = iota
	// SavedHead: HEAD, the index and every ref (a run in any mode, a
	// checkpoint, a snap, where the root is git's work tree's top); undo
	// puts back what the step changed of those.
	SavedHead
	// SavedByMode: the project in general, as doctor and status say it.
	SavedByMode
)

// Uncovered lists the directories of Dirs outside root, each with a
// reason to show a user: no snapshot holds them, so an undo puts back of
// what a command changed there only what saved says.
func (r *Repo) Uncovered(root string, saved Saved) []Uncovered {
	var out []Uncovered
	for _, d := range r.Dirs(root) {
		if d.Inside {
			continue
		}
		why := d.What + ": outside the root, not snapshotted"
		switch {
		case d.Path == r.WorkTree && d.Path != r.GitDir:
			why += "; undo does not put it back"
		case saved == SavedNone:
			why += "; undo does not put it back"
		case saved == SavedHead && d.Path == r.GitDir:
			why += "; this step saves HEAD and the index, which undo puts back, nothing else"
		case saved == SavedHead:
			why += "; this step saves the refs (branches, tags) and the config keys, whose changes undo takes back, not reflogs or objects"
		default:
			why += "; runs, checkpoints and snaps save HEAD, the index, the refs and the config keys, whose changes undo takes back (not reflogs or objects), where the root is the top of git's work tree"
		}
		out = append(out, Uncovered{Path: d.Path, Reason: why})
	}
	return out
}

// HeadUncovered reports whether HEAD, the branch it names and the index
// live outside root: then a commit made in the project moves them
// where no snapshot sees it.
func (r *Repo) HeadUncovered(root string) bool {
	root = resolved(root)
	return !within(resolved(r.GitDir), root) || !within(resolved(r.CommonDir), root)
}

// TopIsRoot reports whether the top of git's work tree is root itself
// (not an ancestor of it, nor elsewhere): then HEAD and the index speak
// for the root's files alone.
func (r *Repo) TopIsRoot(root string) bool {
	return r.WorkTree != "" && resolved(r.WorkTree) == resolved(root)
}

// resolved is p with its symbolic links resolved, as far as they can be:
// a `.git` linked elsewhere is elsewhere.
func resolved(p string) string {
	if p == "" {
		return ""
	}
	if q, err := filepath.EvalSymlinks(p); err == nil {
		return q
	}
	return filepath.Clean(p)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
