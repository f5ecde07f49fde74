//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestDiffCorpusAgainstGit: on a copy of some of Go's own source,
// codemods (gofmt -r, sed) run under snapback, and `snapback diff -p`
// and `--stat` are compared byte for byte with git's diff of the same
// two trees.
func TestDiffCorpusAgainstGit(t *testing.T) {
	for _, tool := range []string{"git", "gofmt", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	bin := snapbackBinary(t)
	src := filepath.Join(runtime.GOROOT(), "src")
	for _, c := range []struct{ name, pkgs, cmd string }{
		{"gofmt -r", "strings bytes bufio", `gofmt -r 'a[b:len(a)] -> a[b:]' -w . && gofmt -r 'len(a) == 0 -> 0 == len(a)' -w .`},
		{"sed", "sort container/list path", `sed -i -e 's/\berr\b/e/g' -e '/^\s*\/\/ .*the/d' -e 's/^\t\treturn$/\t\treturn \/\/ done/' $(find . -name '*.go')`},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			base := t.TempDir()
			for _, p := range strings.Fields(c.pkgs) {
				files, _ := filepath.Glob(filepath.Join(src, p, "*.go"))
				for _, f := range files {
					data, err := os.ReadFile(f)
					treetest.Must(t, err)
					rel := filepath.Join(p, filepath.Base(f))
					treetest.Write(t, root, rel, string(data), 0o644)
					treetest.Write(t, base, rel, string(data), 0o644)
				}
			}
			snapback := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(bin, append([]string{"-C", root}, args...)...)
				cmd.Env = append(os.Environ(), "COLUMNS=80")
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("snapback %s: %v", strings.Join(args, " "), err)
				}
				return string(out)
			}
			snapback("run", "--mode", "copy", "--", "sh", "-c", c.cmd)
			for _, args := range [][]string{{"-p"}, {"--stat"}} {
				got := snapback(append([]string{"diff"}, args...)...)
				want := gitDiffTrees(t, base, root, args...)
				if got != want {
					t.Errorf("diff %s differs from git's:\n%s", args[0], firstDiff(want, got))
				}
				if len(got) < 200 {
					t.Errorf("diff %s says almost nothing (%q): the codemod did not run?", args[0], got)
				}
			}
		})
	}
}

// gitDiffTrees is git's diff (of the index, so that a file's mode and
// content are git's own) from the tree in base to the one in root.
func gitDiffTrees(t *testing.T, base, root string, args ...string) string {
	t.Helper()
	gitDir := t.TempDir()
	git := func(tree string, a ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, a...)...)
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), "GIT_DIR="+gitDir, "GIT_WORK_TREE="+tree, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "COLUMNS=80")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(a, " "), err)
		}
		return string(out)
	}
	git(base, "init", "-q")
	treetest.Must(t, os.WriteFile(filepath.Join(gitDir, "info", "exclude"), []byte(".snapback\n"), 0o644))
	git(base, "add", "-A")
	git(base, "commit", "-qm", "base")
	git(root, "add", "-A")
	return git(root, append([]string{"diff", "--cached", "--no-renames"}, args...)...)
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n git:      " + wl + "\n snapback: " + gl
		}
	}
	return "(same lines)"
}
