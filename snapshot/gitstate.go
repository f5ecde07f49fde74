package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/gitdirs"
	"golang.org/x/sys/unix"
)

// The git state outside the root.
//
// Where a linked worktree's or a submodule's HEAD lives outside the root
// (package gitdirs) and the root is its work tree's top, a copy-mode
// run, a checkpoint and a snap save this
// worktree's git state as an implicit target, so that undo, redo and
// restore put it back with the files: HEAD, the index, and the one ref
// HEAD names (the branch). Nothing else is saved or touched: other
// branches and tags, another worktree's HEAD and index, packed-refs as a
// whole, the config, reflogs and objects stay as they are (a commit the
// step made stays in the object store, reachable from the reflog: undo
// only adds, never removes). The ref is set through `git update-ref`,
// which locks that one ref and rewrites packed-refs itself when it has
// to, so what another worktree does to other refs meanwhile is never
// overwritten; the index is written through git's own lock
// (index.lock). It is not a backend of snapback.toml: it has no settings
// a user could give, and what a record says of it is checked against
// the git dir found from the root, never taken as a place to write.

// gitBackendName is the implicit target's backend name in records.
const gitBackendName = "git"

// maxGitState bounds the payload's state.json.
const maxGitState = 64 << 10

// gitState is what the payload says of the saved state (state.json).
type gitState struct {
	GitDir string       `json:"git_dir"`
	Head   gitdirs.Head `json:"head"`
	// HeadFile is HEAD's content, as git wrote it.
	HeadFile string `json:"head_file"`
	// Index is set when the worktree had an index (saved as data/index).
	Index bool `json:"index"`
}

// gitTarget is the implicit target for the git dir HEAD lives in, when it
// is outside the root.
func gitTarget(gitDir string) config.Target {
	return config.Target{Name: "git " + gitDir, Backend: gitBackendName, Path: gitDir}
}

// withGitTarget is ts and, where HEAD lives outside the root, the
// implicit git target. Only where the root is the top of git's work tree:
// below it, HEAD and the index also speak for files outside the root,
// which an undo must not revert (there undo refuses instead: checkGit).
func (r *Repo) withGitTarget(ts []config.Target) []config.Target {
	g, err := gitdirs.Find(r.Root, os.Getenv)
	if err != nil || g == nil || !g.HeadUncovered(r.Root) || !g.TopIsRoot(r.Root) {
		return ts
	}
	if _, err := g.ReadHead(); err != nil {
		return ts // (reftable, say): seeGit warns
	}
	if ok, _ := (gitBackend{}).Available(); !ok {
		return ts // no git to restore with: undo refuses instead (checkGit)
	}
	return append(append([]config.Target(nil), ts...), gitTarget(g.GitDir))
}

// backendOf is the backend of a target: the implicit git one, or one of
// snapback.toml's.
func backendOf(name string) (backends.Backend, error) {
	if name == gitBackendName {
		return gitBackend{}, nil
	}
	return backends.Get(name)
}

// gitBackend saves and restores a worktree's git state outside the root.
type gitBackend struct{}

var _ backends.Backend = gitBackend{}

func (gitBackend) Name() string { return gitBackendName }

// Available: saving needs no git; restoring runs git update-ref.
func (gitBackend) Available() (bool, string) {
	if _, err := exec.LookPath("git"); err != nil {
		return false, "git is not installed (restoring a ref runs git update-ref)"
	}
	return true, ""
}

// repoFor finds the repository from root and checks that t (from a
// record: outside input) names its git dir.
func (gitBackend) repoFor(t config.Target, root string) (*gitdirs.Repo, error) {
	g, err := gitdirs.Find(root, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", backends.ErrTarget, t.Name, err)
	}
	if g == nil || g.GitDir != t.Path {
		return nil, fmt.Errorf("%w: %s: the git dir of %s is not %s any more", backends.ErrTarget, t.Name, root, t.Path)
	}
	return g, nil
}

func (b gitBackend) Check(_ context.Context, t config.Target, root string) error {
	g, err := b.repoFor(t, root)
	if err != nil {
		return err
	}
	if _, err := g.ReadHead(); err != nil {
		return fmt.Errorf("%w: %s: %v", backends.ErrTarget, t.Name, err)
	}
	return nil
}

// Snapshot saves HEAD (its file and what it resolves to) and the index:
// a hard link where the store is on the git dir's filesystem (git never
// rewrites an index in place, it renames a new one over it), else a copy.
func (b gitBackend) Snapshot(_ context.Context, t config.Target, root, dir string) error {
	g, err := b.repoFor(t, root)
	if err != nil {
		return err
	}
	st := gitState{GitDir: g.GitDir}
	head, err := fsutil.ReadFileLimit(filepath.Join(g.GitDir, "HEAD"), 4<<10)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	st.HeadFile = string(head)
	if st.Head, err = g.ReadHead(); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	if st.Index, err = saveIndex(filepath.Join(g.GitDir, "index"), filepath.Join(dir, "index")); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	js, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, "state.json"), js, 0o600)
}

// saveIndex links or copies the index to dst; false when there is none.
func saveIndex(src, dst string) (bool, error) {
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("index: %w", err)
	}
	defer f.Close() // read-only
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false, fmt.Errorf("index %s: %w", src, fsutil.ErrNotRegular)
	}
	fsutil.Mutating()
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW); err == nil {
		return true, nil // the very file opened: not one renamed in since
	}
	fsutil.Mutating()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("index: %w", err)
	}
	if err := fsutil.CopyFile(out, f); err != nil {
		out.Close()
		return false, fmt.Errorf("index: %w", err)
	}
	fsutil.Mutating()
	if err := out.Sync(); err != nil {
		out.Close()
		return false, fmt.Errorf("index: %w", err)
	}
	return true, out.Close()
}

// readState reads and checks a payload's state.json.
func readGitState(t config.Target, dir string) (gitState, error) {
	var st gitState
	b, err := fsutil.ReadFileLimit(filepath.Join(dir, "state.json"), maxGitState)
	if err != nil {
		return st, fmt.Errorf("%s: payload: %w", t.Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("%s: payload: %w: %v", t.Name, ErrCorrupt, err)
	}
	h := st.Head
	if st.GitDir != t.Path || h.Ref != "" && !gitdirs.ValidRefName(h.Ref) || h.OID != "" && !gitdirs.ValidOID(h.OID) || h.Ref == "" && h.OID == "" {
		return st, fmt.Errorf("%s: payload: %w: bad git dir, ref or object id", t.Name, ErrCorrupt)
	}
	return st, nil
}

// Restore puts back the saved HEAD, the branch it names and the index,
// after checks (restorable): each step sets a value, so running it again
// finishes it.
func (b gitBackend) Restore(_ context.Context, t config.Target, root, dir string) error {
	g, st, err := b.restorable(t, root, dir)
	if err != nil {
		return err
	}
	h := st.Head
	if h.Ref != "" {
		args := []string{"update-ref", "-m", "snapback: restore", h.Ref, h.OID}
		if h.OID == "" {
			args = []string{"update-ref", "-d", h.Ref} // the branch was not born yet
		}
		fsutil.Mutating()
		if _, err := runGit(g, root, args...); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		fsutil.Mutating()
		if _, err := runGit(g, root, "symbolic-ref", "HEAD", h.Ref); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	} else {
		fsutil.Mutating()
		if _, err := runGit(g, root, "update-ref", "--no-deref", "-m", "snapback: restore", "HEAD", h.OID); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	if err := restoreIndex(g.GitDir, dir, st.Index); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	return nil
}

// restorable checks, changing nothing, that a payload can be restored:
// it names the git dir found from root, the commit it points to still
// exists (a ref is never left naming a missing object), its branch is
// not checked out by another worktree, and git does not hold the index's
// lock. Undo and redo ask it before the files move (checkGitTargets).
func (b gitBackend) restorable(t config.Target, root, dir string) (*gitdirs.Repo, gitState, error) {
	g, err := b.repoFor(t, root)
	if err != nil {
		return nil, gitState{}, err
	}
	st, err := readGitState(t, dir)
	if err != nil {
		return nil, st, err
	}
	h := st.Head
	if h.OID != "" {
		if _, err := runGit(g, root, "cat-file", "-e", h.OID+"^{commit}"); err != nil {
			return nil, st, fmt.Errorf("%w: %s: commit %s is not in the repository any more (pruned?): HEAD cannot go back to it", backends.ErrTarget, t.Name, h.OID)
		}
	}
	if h.Ref != "" {
		if other, err := checkedOutElsewhere(g, h.Ref); err != nil {
			return nil, st, fmt.Errorf("%s: %w", t.Name, err)
		} else if other != "" {
			return nil, st, fmt.Errorf("%w: %s: %s is checked out in the worktree of %s: its ref is left as it is", backends.ErrTarget, t.Name, h.Ref, other)
		}
	}
	if _, err := os.Lstat(filepath.Join(g.GitDir, "index.lock")); err == nil {
		return nil, st, fmt.Errorf("%w: %s: %s exists: git is working on the index (or crashed: remove it)", backends.ErrTarget, t.Name, filepath.Join(g.GitDir, "index.lock"))
	}
	return g, st, nil
}

// checkGitTargets refuses, before anything moves, an undo or redo whose
// git state cannot be restored: the files would move and HEAD not.
func (r *Repo) checkGitTargets(op string, states []TargetState) error {
	for _, s := range states {
		if s.Backend != gitBackendName {
			continue
		}
		t, err := r.payloadTarget(s.Payload)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if _, _, err := (gitBackend{}).restorable(t, r.Root, r.path(s.Payload, "data")); err != nil {
			return fmt.Errorf("%s refused: %w", op, err)
		}
	}
	return nil
}

// restoreIndex writes the saved index back through git's lock protocol:
// index.lock created exclusively, filled, synced, renamed over index.
func restoreIndex(gitDir, dir string, had bool) error {
	idx := filepath.Join(gitDir, "index")
	if !had {
		fsutil.Mutating()
		if err := os.Remove(idx); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("index: %w", err)
		}
		return nil
	}
	src, err := os.OpenFile(filepath.Join(dir, "index"), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	defer src.Close() // read-only
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("saved index: %w", fsutil.ErrNotRegular)
	}
	var sig [4]byte
	if _, err := src.ReadAt(sig[:], 0); err != nil || string(sig[:]) != "DIRC" {
		return fmt.Errorf("saved index: %w: not a git index", ErrCorrupt)
	}
	lock := idx + ".lock"
	fsutil.Mutating()
	out, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	fail := func(err error) error {
		out.Close()
		os.Remove(lock) // ours, made above: nothing else can be lost
		return fmt.Errorf("index: %w", err)
	}
	if err := fsutil.CopyFile(out, src); err != nil {
		return fail(err)
	}
	fsutil.Mutating()
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	if err := out.Close(); err != nil {
		os.Remove(lock) // as above
		return fmt.Errorf("index: %w", err)
	}
	fsutil.Mutating()
	if err := os.Rename(lock, idx); err != nil {
		os.Remove(lock) // as above
		return fmt.Errorf("index: %w", err)
	}
	return fsutil.SyncDir(gitDir)
}

// checkedOutElsewhere names the worktree, other than g's, whose HEAD is
// on ref, if one is.
func checkedOutElsewhere(g *gitdirs.Repo, ref string) (string, error) {
	dirs := []string{g.CommonDir}
	ents, err := os.ReadDir(filepath.Join(g.CommonDir, "worktrees"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for _, e := range ents {
		dirs = append(dirs, filepath.Join(g.CommonDir, "worktrees", e.Name()))
	}
	for _, d := range dirs {
		if d == g.GitDir {
			continue
		}
		b, err := fsutil.ReadFileLimit(filepath.Join(d, "HEAD"), 4<<10)
		if err != nil {
			continue // not a worktree's git dir (or a broken one): git ignores it too
		}
		if strings.TrimSpace(string(b)) == "ref: "+ref {
			return d, nil
		}
	}
	return "", nil
}

// runGit runs git on g's git dir with none of the caller's GIT_*
// settings and no hooks (update-ref runs reference-transaction hooks).
func runGit(g *gitdirs.Repo, root string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "core.hooksPath=/dev/null", "--git-dir=" + g.GitDir}, args...)...)
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (gitBackend) Release(context.Context, config.Target, string, string) error { return nil }

// gitUnchanged reports whether the git state a payload saved is the
// state now: HEAD, its ref and the index (the very file, or the same
// bytes).
func gitUnchanged(t config.Target, root, dir string) bool {
	g, err := gitBackend{}.repoFor(t, root)
	if err != nil {
		return false
	}
	st, err := readGitState(t, dir)
	if err != nil {
		return false
	}
	if h, err := g.ReadHead(); err != nil || h != st.Head {
		return false
	}
	idx := filepath.Join(g.GitDir, "index")
	now, nerr := os.Lstat(idx)
	if !st.Index {
		return errors.Is(nerr, fs.ErrNotExist)
	}
	saved, serr := os.Lstat(filepath.Join(dir, "index"))
	if nerr != nil || serr != nil {
		return false
	}
	if os.SameFile(now, saved) {
		return true
	}
	if now.Size() != saved.Size() {
		return false
	}
	a, err1 := readLimited(idx, maxGitIndex)
	b, err2 := readLimited(filepath.Join(dir, "index"), maxGitIndex)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// dropUnchangedGit drops from a closing step the git state it saved when
// that state is unchanged: a step that changed neither files nor git
// leaves no record, and undo has nothing of git's to put back.
func (r *Repo) dropUnchangedGit(m *Meta) error {
	kept, dropped := m.Targets[:0], false
	for _, s := range m.Targets {
		if s.Backend == gitBackendName {
			t, err := r.payloadTarget(s.Payload)
			if err == nil && gitUnchanged(t, r.Root, r.path(s.Payload, "data")) {
				if err := fsutil.RemoveAll(r.path(s.Payload)); err != nil {
					return err
				}
				dropped = true
				continue
			}
		}
		kept = append(kept, s)
	}
	m.Targets = kept
	if dropped && len(kept) == 0 {
		m.Targets = nil
		fsutil.Mutating()
		if err := os.Remove(r.targetsDir(m.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("targets: %w", err)
		}
	}
	return nil
}

// coveredGit reports whether the step s saved the git state of gitDir
// (its undo puts HEAD back).
func coveredGit(s *Meta, gitDir string) bool {
	for _, t := range s.Targets {
		if t.Backend == gitBackendName && t.Name == gitTarget(gitDir).Name {
			return true
		}
	}
	return false
}

// SavesGit reports whether step m saved the git state outside the root
// (so that its undo puts HEAD, the index and the branch back).
func SavesGit(m *Meta) bool {
	for _, t := range m.Targets {
		if t.Backend == gitBackendName {
			return true
		}
	}
	return false
}
