package gitdirs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapback/snapback/fsutil"
)

// The tests use real git as the oracle: what Find and ReadHead read from
// the files must be what `git rev-parse` says.

func gitEnv(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=init.defaultBranch", "GIT_CONFIG_VALUE_0=main",
		"GIT_CONFIG_KEY_1=protocol.file.allow", "GIT_CONFIG_VALUE_1=always"}
	return append(env, extra...)
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return gitWith(t, dir, nil, args...)
}

func gitWith(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is not installed: these tests need it (Debian: git)")
	}
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, gitEnv(env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a repository at dir with one commit.
func newRepo(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	write(t, filepath.Join(dir, "a"), "a\n")
	git(t, dir, "add", "a")
	git(t, dir, "commit", "-qm", "init")
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// env is a getenv holding only kv.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// tmp is a temporary directory with its symbolic links resolved, as git
// prints paths.
func tmp(t *testing.T) string {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkAgainstGit compares Find's answer from dir with git rev-parse's.
func checkAgainstGit(t *testing.T, r *Repo, dir string, gitEnvs ...string) {
	t.Helper()
	out := strings.Split(gitWith(t, dir, gitEnvs, "rev-parse", "--absolute-git-dir", "--git-common-dir"), "\n")
	common := out[1]
	if !filepath.IsAbs(common) {
		common = filepath.Join(dir, common)
	}
	if r.GitDir != out[0] || r.CommonDir != filepath.Clean(common) {
		t.Errorf("Find: git dir %s, common %s; git says %s, %s", r.GitDir, r.CommonDir, out[0], filepath.Clean(common))
	}
	if top := gitWith(t, dir, gitEnvs, "rev-parse", "--show-toplevel"); r.WorkTree != top {
		t.Errorf("Find: work tree %s; git says %s", r.WorkTree, top)
	}
	checkHead(t, r, dir, gitEnvs...)
}

func checkHead(t *testing.T, r *Repo, dir string, gitEnvs ...string) {
	t.Helper()
	h, err := r.ReadHead()
	if err != nil {
		t.Fatalf("ReadHead: %v", err)
	}
	want := Head{OID: gitWith(t, dir, gitEnvs, "rev-parse", "HEAD")}
	cmd := exec.Command("git", "symbolic-ref", "-q", "HEAD")
	cmd.Dir, cmd.Env = dir, gitEnv(gitEnvs...)
	if b, err := cmd.Output(); err == nil {
		want.Ref = strings.TrimSpace(string(b))
	}
	if h != want {
		t.Errorf("ReadHead = %+v; git says %+v", h, want)
	}
}

func find(t *testing.T, dir string, getenv func(string) string) *Repo {
	t.Helper()
	r, err := Find(dir, getenv)
	if err != nil {
		t.Fatalf("Find(%s): %v", dir, err)
	}
	if r == nil {
		t.Fatalf("Find(%s): no repository", dir)
	}
	return r
}

func TestPlainRepo(t *testing.T) {
	root := filepath.Join(tmp(t), "p")
	newRepo(t, root)
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	for _, dir := range []string{root, filepath.Join(root, "sub")} {
		r := find(t, dir, env())
		checkAgainstGit(t, r, dir)
		if r.Via != ViaDir || len(r.Dirs(root)) != 1 {
			t.Errorf("plain repo: %+v, dirs %+v", r, r.Dirs(root))
		}
		if u := r.Uncovered(root, SavedNone); len(u) != 0 || r.HeadUncovered(root) {
			t.Errorf("plain repo: uncovered %+v", u)
		}
	}
	// A root below the top of the work tree leaves the git dir outside.
	sub := filepath.Join(root, "sub")
	if u := find(t, sub, env()).Uncovered(sub, SavedNone); len(u) != 1 || u[0].Path != filepath.Join(root, ".git") {
		t.Errorf("root below the work tree's top: uncovered %+v", u)
	}
	// Not a repository at all.
	if r, err := Find(tmp(t), env("GIT_CEILING_DIRECTORIES", "/")); r != nil || err != nil {
		t.Errorf("no repository: %+v, %v", r, err)
	}
}

func TestLinkedWorktree(t *testing.T) {
	base := tmp(t)
	main := filepath.Join(base, "main")
	newRepo(t, main)
	wt := filepath.Join(base, "wt")
	git(t, main, "worktree", "add", "-q", "-b", "feat", wt)
	r := find(t, wt, env())
	checkAgainstGit(t, r, wt)
	if r.GitDir != filepath.Join(main, ".git", "worktrees", "wt") || r.CommonDir != filepath.Join(main, ".git") || r.Via != ViaFile {
		t.Fatalf("linked worktree: %+v", r)
	}
	u := r.Uncovered(wt, SavedNone)
	if len(u) != 2 || u[0].Path != r.GitDir || u[1].Path != r.CommonDir || !r.HeadUncovered(wt) {
		t.Fatalf("linked worktree: uncovered %+v", u)
	}
	// The main worktree's protection holds both.
	if u := find(t, main, env()).Uncovered(main, SavedNone); len(u) != 0 {
		t.Errorf("main worktree: uncovered %+v", u)
	}

	// HEAD follows a commit, a packed branch, a detached HEAD.
	write(t, filepath.Join(wt, "a"), "b\n")
	git(t, wt, "commit", "-qam", "x")
	checkHead(t, r, wt)
	git(t, main, "pack-refs", "--all")
	if _, err := os.Lstat(filepath.Join(main, ".git", "refs", "heads", "feat")); err == nil {
		t.Fatal("pack-refs left the loose ref")
	}
	checkHead(t, r, wt)
	git(t, wt, "checkout", "-q", "--detach")
	checkHead(t, r, wt)
	// An unborn branch.
	git(t, wt, "checkout", "-q", "--orphan", "new")
	h, err := r.ReadHead()
	if err != nil || h != (Head{Ref: "refs/heads/new"}) {
		t.Errorf("orphan branch: %+v, %v", h, err)
	}
}

func TestSubmodule(t *testing.T) {
	base := tmp(t)
	lib := filepath.Join(base, "lib")
	newRepo(t, lib)
	super := filepath.Join(base, "super")
	newRepo(t, super)
	git(t, super, "submodule", "add", "-q", lib, "lib")
	git(t, super, "commit", "-qm", "add lib")
	sub := filepath.Join(super, "lib")
	r := find(t, sub, env())
	checkAgainstGit(t, r, sub)
	if r.GitDir != filepath.Join(super, ".git", "modules", "lib") || r.CommonDir != r.GitDir || r.WorkTree != sub {
		t.Fatalf("submodule: %+v", r)
	}
	if u := r.Uncovered(sub, SavedNone); len(u) != 1 || u[0].Path != r.GitDir {
		t.Errorf("submodule as the root: uncovered %+v", u)
	}
	// From the superproject, the submodule's git dir is inside.
	if u := r.Uncovered(super, SavedNone); len(u) != 0 {
		t.Errorf("superproject as the root: uncovered %+v", u)
	}
}

func TestCoreWorktreeAndGitDir(t *testing.T) {
	base := tmp(t)
	gd := filepath.Join(base, "repo.git")
	wt := filepath.Join(base, "wt")
	os.Mkdir(wt, 0o755)
	git(t, base, "init", "-q", "--bare", gd)
	git(t, base, "--git-dir", gd, "config", "core.bare", "false")
	git(t, base, "--git-dir", gd, "config", "core.worktree", wt)
	write(t, filepath.Join(wt, "a"), "a\n")
	genv := []string{"GIT_DIR=" + gd}
	gitWith(t, wt, genv, "add", "a")
	gitWith(t, wt, genv, "commit", "-qm", "init")
	// From a subdirectory too: core.worktree, not the working directory,
	// is the top.
	os.Mkdir(filepath.Join(wt, "sub"), 0o755)
	for _, dir := range []string{wt, filepath.Join(wt, "sub")} {
		r := find(t, dir, env("GIT_DIR", gd))
		checkAgainstGit(t, r, dir, genv...)
		if r.Via != ViaGitDir {
			t.Errorf("via %s", r.Via)
		}
		if u := r.Uncovered(wt, SavedNone); len(u) != 1 || u[0].Path != gd {
			t.Errorf("GIT_DIR: uncovered %+v", u)
		}
	}

	// A .git directory whose core.worktree is elsewhere: the git dir is
	// inside the root, the files git tracks are not.
	root := filepath.Join(base, "root")
	newRepo(t, root)
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o755)
	git(t, root, "config", "core.worktree", other)
	r := find(t, root, env())
	if r.WorkTree != other {
		t.Fatalf("core.worktree: %+v", r)
	}
	if u := r.Uncovered(root, SavedNone); len(u) != 1 || u[0].Path != other {
		t.Errorf("core.worktree elsewhere: uncovered %+v", u)
	}
}

func TestOddGitDirs(t *testing.T) {
	base := tmp(t)
	// A separate git dir (git init --separate-git-dir): a .git file, no
	// commondir.
	sep := filepath.Join(base, "sep.git")
	wt := filepath.Join(base, "wt")
	git(t, base, "init", "-q", "--separate-git-dir", sep, wt)
	write(t, filepath.Join(wt, "a"), "a\n")
	git(t, wt, "add", "a")
	git(t, wt, "commit", "-qm", "init")
	r := find(t, wt, env())
	checkAgainstGit(t, r, wt)
	if r.GitDir != sep || r.CommonDir != sep || r.Via != ViaFile {
		t.Fatalf("separate git dir: %+v", r)
	}
	if u := r.Uncovered(wt, SavedNone); len(u) != 1 || u[0].Path != sep {
		t.Errorf("separate git dir: uncovered %+v", u)
	}

	// A .git that is a symbolic link to a git dir elsewhere: followed,
	// as git follows it, and outside the root.
	ln := filepath.Join(base, "ln")
	os.Mkdir(ln, 0o755)
	if err := os.Symlink(sep, filepath.Join(ln, ".git")); err != nil {
		t.Fatal(err)
	}
	r = find(t, ln, env("GIT_WORK_TREE", ln))
	if u := r.Uncovered(ln, SavedNone); len(u) != 1 || u[0].Path != filepath.Join(ln, ".git") {
		t.Errorf(".git linked elsewhere: uncovered %+v", u)
	}

	// What a .git file says is outside input.
	bad := filepath.Join(base, "bad")
	os.Mkdir(bad, 0o755)
	for name, content := range map[string]string{
		"garbage":      "hello\n",
		"empty target": "gitdir: \n",
		"no such dir":  "gitdir: ../nowhere\n",
		"not a repo":   "gitdir: ..\n",
	} {
		write(t, filepath.Join(bad, ".git"), content)
		if r, err := Find(bad, env()); err == nil {
			t.Errorf("%s: Find = %+v, want an error", name, r)
		} else if !strings.Contains(err.Error(), filepath.Join(bad, ".git")) {
			t.Errorf("%s: %v does not name the .git file", name, err)
		}
	}
	write(t, filepath.Join(bad, ".git"), strings.Repeat("x", maxLineFile+1))
	if _, err := Find(bad, env()); !errors.Is(err, fsutil.ErrTooLarge) {
		t.Errorf("huge .git file: %v", err)
	}
	// A FIFO is refused unread, never waited on.
	os.Remove(filepath.Join(bad, ".git"))
	if err := syscall.Mkfifo(filepath.Join(bad, ".git"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(bad, env()); !errors.Is(err, fsutil.ErrNotRegular) {
		t.Errorf(".git FIFO: %v", err)
	}

	// A commondir or HEAD that says nonsense, or names a ref outside refs/.
	main := filepath.Join(base, "main")
	newRepo(t, main)
	lw := filepath.Join(base, "lw")
	git(t, main, "worktree", "add", "-q", lw)
	gd := filepath.Join(main, ".git", "worktrees", "lw")
	write(t, filepath.Join(gd, "commondir"), "../../nowhere\n")
	if _, err := Find(lw, env()); !errors.Is(err, ErrBadGitFile) {
		t.Errorf("bad commondir: %v", err)
	}
	write(t, filepath.Join(gd, "commondir"), "../..\n")
	for _, head := range []string{"ref: ../../../etc/passwd\n", "ref: refs/heads/../../x\n", "nonsense\n"} {
		write(t, filepath.Join(gd, "HEAD"), head)
		if _, err := find(t, lw, env()).ReadHead(); !errors.Is(err, ErrBadGitFile) {
			t.Errorf("HEAD %q: %v", head, err)
		}
	}
}

func TestValidRefName(t *testing.T) {
	for s, ok := range map[string]bool{
		"refs/heads/main": true, "refs/heads/feat/x": true, "refs/tags/v1.0": true,
		"HEAD": false, "refs/../x": false, "refs/heads/.x": false, "refs/heads/x.lock": false,
		"refs//x": false, "refs/heads/a b": false, "refs/heads/a\x00": false, "/etc/passwd": false,
	} {
		if ValidRefName(s) != ok {
			t.Errorf("ValidRefName(%q) = %v", s, !ok)
		}
	}
}
