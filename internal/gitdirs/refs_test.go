package gitdirs

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forEachRef is what `git for-each-ref` lists in dir, as the snapshot
// package reads it: non-symbolic refs, name to object id.
func forEachRef(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := git(t, dir, "for-each-ref", "--format=%(refname) %(objectname) %(symref)")
	refs := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			refs[f[0]] = f[1]
		}
	}
	return refs
}

// TestRefsAsGit: Refs lists what git for-each-ref lists, in a main
// worktree and a linked one, through every way git keeps refs: loose and
// packed (a loose one over its packed namesake, a deleted packed one),
// annotated tags (peeled lines), symbolic refs (origin/HEAD, packed
// over), nested branch names, the stash, each worktree's own bisect,
// worktree and rewritten refs, lock files and hidden files beside them.
func TestRefsAsGit(t *testing.T) {
	dir := t.TempDir()
	main, wt := filepath.Join(dir, "main"), filepath.Join(dir, "wt")
	newRepo(t, main)
	git(t, main, "branch", "topic")
	git(t, main, "branch", "feature/deep/name")
	git(t, main, "tag", "light")
	git(t, main, "tag", "-a", "-m", "annotated", "v1")
	git(t, main, "update-ref", "refs/remotes/origin/main", "HEAD")
	git(t, main, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
	git(t, main, "pack-refs", "--all")
	write(t, filepath.Join(main, "a"), "a2\n")
	git(t, main, "commit", "-qam", "second")
	git(t, main, "branch", "-f", "topic") // loose now, over its packed namesake
	git(t, main, "branch", "loose-only")
	git(t, main, "branch", "-D", "feature/deep/name") // gone from packed-refs
	write(t, filepath.Join(main, "a"), "a3\n")
	git(t, main, "stash", "-q")
	git(t, main, "worktree", "add", "-q", wt)
	git(t, main, "update-ref", "refs/bisect/main-only", "HEAD")
	git(t, main, "update-ref", "refs/worktree/main-mark", "HEAD~1")
	git(t, wt, "update-ref", "refs/bisect/bad", "HEAD")
	git(t, wt, "update-ref", "refs/worktree/mark", "HEAD~1")
	git(t, wt, "update-ref", "refs/rewritten/step", "HEAD")
	write(t, filepath.Join(main, ".git", "refs", "heads", "topic.lock"), "junk\n")
	write(t, filepath.Join(main, ".git", "refs", "heads", ".hidden"), "junk\n")

	for _, d := range []string{main, wt} {
		g, err := Find(d, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		got, err := g.Refs()
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		want := forEachRef(t, d)
		if !maps.Equal(got, want) {
			t.Errorf("%s: Refs = %v\ngit for-each-ref = %v", d, got, want)
		}
		if len(want) < 8 {
			t.Errorf("%s: git lists only %v: the test made fewer refs than it means to", d, want)
		}
	}
}

// TestRefsUnsure: where git's own rules decide (content that is no
// object id, a name git may refuse, a symbolic link, a worktree's ref in
// packed-refs, the reftable format), Refs says so instead of guessing.
func TestRefsUnsure(t *testing.T) {
	cases := map[string]func(t *testing.T, gitDir, head string){
		"garbage": func(t *testing.T, gd, _ string) {
			write(t, filepath.Join(gd, "refs", "heads", "bad"), "not an id\n")
		},
		"name ending in a dot": func(t *testing.T, gd, head string) {
			write(t, filepath.Join(gd, "refs", "heads", "x."), head+"\n")
		},
		"symlink": func(t *testing.T, gd, _ string) {
			if err := os.Symlink("main", filepath.Join(gd, "refs", "heads", "link")); err != nil {
				t.Fatal(err)
			}
		},
		"worktree ref packed": func(t *testing.T, gd, head string) {
			write(t, filepath.Join(gd, "packed-refs"), "# pack-refs with: peeled fully-peeled sorted \n"+head+" refs/bisect/bad\n")
		},
		"reftable": func(t *testing.T, gd, _ string) {
			if err := os.Mkdir(filepath.Join(gd, "reftable"), 0o755); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, plant := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r")
			newRepo(t, dir)
			g, err := Find(dir, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Refs(); err != nil {
				t.Fatalf("before: %v", err)
			}
			plant(t, g.GitDir, git(t, dir, "rev-parse", "HEAD"))
			if _, err := g.Refs(); !errors.Is(err, ErrRefsUnsure) && !errors.Is(err, ErrReftable) {
				t.Fatalf("Refs = %v, want ErrRefsUnsure or ErrReftable", err)
			}
		})
	}
}
