package snapshot

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/config"
)

// Where no git is installed to restore with, a linked worktree's steps
// save nothing of git's (their undo refuses instead, through the HEAD
// they record): a checkpoint must not fail for want of git.
func TestGitTargetNeedsGit(t *testing.T) {
	base := t.TempDir()
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	git(base, "init", "-q", main)
	if err := os.WriteFile(filepath.Join(main, "a"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(main, "add", "a")
	git(main, "commit", "-qm", "init")
	git(main, "worktree", "add", "-q", "-b", "feat", wt)
	r, err := openRepo(wt, "", &config.Config{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ts := r.withGitTarget(nil); len(ts) != 1 || ts[0].Backend != gitBackendName {
		t.Fatalf("with git: targets %+v, want the git target", ts)
	}
	t.Setenv("PATH", t.TempDir())
	if ts := r.withGitTarget(nil); len(ts) != 0 {
		t.Fatalf("without git: targets %+v, want none", ts)
	}
	if g := r.seeGit(); len(g) != 1 {
		t.Fatalf("without git: HEAD seen %+v, want it recorded", g)
	}
}
