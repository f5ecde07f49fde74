//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/agent"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// agentScript is what an AI agent does to a repository: edits, creates,
// deletes and renames files (a whole directory too), commits with git
// and starts a branch, then builds Go and C code.
const agentScript = `set -e
cat > main.go <<'EOF'
package main

import (
	"fmt"

	"example.com/agent/pkg"
	"example.com/agent/util"
)

func main() { fmt.Println(util.Greeting(), pkg.Name) }
EOF
echo 'more docs' > docs/new.md
rm docs/old.txt
mv lib pkg
sed -i 's/package lib/package pkg/' pkg/lib.go
mv util/util.go util/helpers.go
echo '// helpers' >> util/helpers.go
chmod +x run.sh
git add -A
git commit -q -m x
git checkout -q -b feature
GOFLAGS=-mod=mod GOTOOLCHAIN=local go build -o bin/ ./...
gcc -o c/hello c/hello.c
./bin/agent
./c/hello
`

// agentRepo makes a small git repository with a Go module, a C file and
// docs, committed.
func agentRepo(t *testing.T, root string) {
	t.Helper()
	w := func(rel, content string, mode os.FileMode) { treetest.Write(t, root, rel, content, mode) }
	w("go.mod", "module example.com/agent\n\ngo 1.21\n", 0o644)
	w("main.go", "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/agent/util\"\n)\n\nfunc main() { fmt.Println(util.Greeting()) }\n", 0o644)
	w("util/util.go", "package util\n\n// Greeting says hello.\nfunc Greeting() string { return \"hello\" }\n", 0o644)
	w("lib/lib.go", "package lib\n\n// Name is the library's name.\nconst Name = \"lib\"\n", 0o644)
	w("lib/data/table.txt", "1 2 3\n", 0o644)
	w("docs/README.md", "# agent\n", 0o644)
	w("docs/old.txt", "obsolete\n", 0o644)
	w("c/hello.c", "#include <stdio.h>\nint main(void) { puts(\"hello from C\"); return 0; }\n", 0o644)
	w("run.sh", "#!/bin/sh\nexec ./bin/agent\n", 0o644)
	w(".gitignore", "/bin/\n/c/hello\n", 0o644)
	git(t, root, "init", "-q")
	git(t, root, "add", "-A")
	git(t, root, "commit", "-q", "-m", "initial")
}

// gitEnv makes git independent of the machine's configuration.
func gitEnv() []string {
	return append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=init.defaultBranch", "GIT_CONFIG_VALUE_0=main",
	)
}

// git runs git in dir; --no-optional-locks keeps `status` from refreshing
// the index, which would change .git between the states compared.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--no-optional-locks"}, args...)...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// sbDir runs snapback in dir (run takes its working directory), with
// git's environment.
func sbDir(t *testing.T, bin, dir string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd, done := boundedCommand(2*time.Minute, bin, append([]string{"-C", dir}, args...)...)
	cmd.Dir, cmd.Env = dir, testEnv(t)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); done() || err != nil {
		t.Fatalf("snapback %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

func diffJSON(t *testing.T, bin, root string) map[string]string {
	t.Helper()
	out, _ := sbDir(t, bin, root, "--json", "diff", "--git-raw") // .git/ paths one by one
	var d struct {
		Changes []struct{ Path, Op string } `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, c := range d.Changes {
		m[strings.TrimSuffix(c.Path, "/")] = c.Op
	}
	return m
}

// requireChanges checks that diff lists want (path → op), and some
// change below .git.
func requireChanges(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var bad []string
	for p, op := range want {
		if got[p] != op {
			bad = append(bad, p+": want "+op+", got "+got[p])
		}
	}
	gitChanges := 0
	for p := range got {
		if strings.HasPrefix(p, ".git/") {
			gitChanges++
		}
	}
	if gitChanges == 0 {
		bad = append(bad, "no change below .git/ listed")
	}
	if len(bad) > 0 {
		var all []string
		for p, op := range got {
			all = append(all, op+" "+p)
		}
		sort.Strings(all)
		t.Fatalf("%s: diff is not what the agent did:\n%s\nall changes:\n%s", what, strings.Join(bad, "\n"), strings.Join(all, "\n"))
	}
}

var agentWant = map[string]string{
	"main.go":            "M",
	"docs/new.md":        "A",
	"docs/old.txt":       "D",
	"lib":                "D",
	"lib/lib.go":         "D",
	"lib/data/table.txt": "D",
	"pkg":                "A",
	"pkg/lib.go":         "A",
	"pkg/data/table.txt": "A",
	"util/util.go":       "D",
	"util/helpers.go":    "A",
	"run.sh":             "M",
	"bin/agent":          "A",
	"c/hello":            "A",
	".git/HEAD":          "M",
	".git/index":         "M",
}

// checkGit checks that git works in root and is on branch with n commits
// and a clean work tree.
func checkGit(t *testing.T, root, what, branch string, n int) {
	t.Helper()
	var store, other []string
	for _, l := range strings.Split(strings.TrimRight(git(t, root, "status", "--porcelain"), "\n"), "\n") {
		switch {
		case l == "":
		case strings.Contains(l, snapshot.StoreDir):
			store = append(store, l)
		default:
			other = append(other, l)
		}
	}
	if len(other) > 0 {
		t.Errorf("%s: git status is not clean:\n%s", what, strings.Join(other, "\n"))
	}
	// The store is no part of the project: git must not offer it to
	// `git add -A` (an agent's commit would carry every snapshot).
	if len(store) > 0 {
		t.Errorf("%s: git status lists snapback's store: %q", what, store[:min(len(store), 3)])
	}
	if b := strings.TrimSpace(git(t, root, "rev-parse", "--abbrev-ref", "HEAD")); b != branch {
		t.Errorf("%s: on branch %q, want %q", what, b, branch)
	}
	if log := strings.Split(strings.TrimSpace(git(t, root, "log", "--format=%s")), "\n"); len(log) != n {
		t.Errorf("%s: git log has %d commits, want %d: %q", what, len(log), n, log)
	}
	git(t, root, "fsck", "--no-progress", "--strict")
	if tracked := strings.Fields(git(t, root, "ls-files", snapshot.StoreDir)); len(tracked) > 0 {
		t.Errorf("%s: git tracks %d files of snapback's store, such as %q", what, len(tracked), tracked[:min(len(tracked), 3)])
	}
}

// TestAgent runs an agent-like script in each mode: review what it did,
// commit it in two parts, undo both (the repository, .git included, is
// exactly as before), redo both (as the script left it); git works in
// every state.
func TestAgent(t *testing.T) {
	bin := snapbackBinary(t)
	for _, tool := range []string{"git", "gcc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: %v", tool, err)
		}
	}
	for _, mode := range posixModes(t, bin) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(t.TempDir(), "repo")
			agentRepo(t, root)
			checkGit(t, root, "before", "main", 1)
			before := treetest.Capture(t, root, snapshot.StoreDir)

			if mode == "copy" {
				// The copy mode works on the tree itself: nothing waits
				// for review; the run is one undoable step.
				out, _ := sbDir(t, bin, root, "run", "--mode", "copy", "--", "sh", "-c", agentScript)
				if !strings.Contains(out, "hello from C") {
					t.Fatalf("the agent's programs did not run:\n%s", out)
				}
				requireChanges(t, "diff after the run", diffJSON(t, bin, root), agentWant)
				after := treetest.Capture(t, root, snapshot.StoreDir)
				checkGit(t, root, "after the run", "feature", 2)
				sbDir(t, bin, root, "undo")
				treetest.Equal(t, "after undo", before, treetest.Capture(t, root, snapshot.StoreDir))
				checkGit(t, root, "after undo", "main", 1)
				sbDir(t, bin, root, "redo")
				treetest.Equal(t, "after redo", noDirTimes(after), noDirTimes(treetest.Capture(t, root, snapshot.StoreDir)))
				checkGit(t, root, "after redo", "feature", 2)
				return
			}

			out, errOut := sbDir(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "sh", "-c", agentScript)
			if !strings.Contains(out, "hello from C") || !strings.Contains(errOut, "is pending") {
				t.Fatalf("the agent's run:\nstdout:\n%s\nstderr:\n%s", out, errOut)
			}
			treetest.Equal(t, "the tree while the run is pending", before, treetest.Capture(t, root, snapshot.StoreDir))
			checkGit(t, root, "while pending", "main", 1)

			st, _ := sbDir(t, bin, root, "--json", "status")
			m := regexp.MustCompile(`"id": "([^"]+)"`).FindStringSubmatch(st)
			if m == nil || !strings.Contains(st, `"state": "pending"`) {
				t.Fatalf("status does not list the pending run:\n%s", st)
			}
			id := m[1]
			changes := diffJSON(t, bin, root)
			requireChanges(t, "diff of the pending run", changes, agentWant)
			text, _ := sbDir(t, bin, root, "diff")
			for _, l := range []string{"M\tmain.go", "D\tdocs/old.txt", "A\tpkg/lib.go", "D\tlib/"} {
				if !strings.Contains(text, l+"\n") {
					t.Errorf("diff lacks %q:\n%s", l, text)
				}
			}
			// What the run's view shows, to compare with the tree after the commit.
			view, _ := sbDir(t, bin, root, "run", "--continue", id, "--then", "review", "--", "sh", "-c", describe)

			// Commit the docs only: the rest stays pending.
			sbDir(t, bin, root, "commit", "docs")
			if b, err := os.ReadFile(filepath.Join(root, "docs/new.md")); err != nil || string(b) != "more docs\n" {
				t.Fatalf("docs/new.md after committing docs: %q %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(root, "docs/old.txt")); !os.IsNotExist(err) {
				t.Fatalf("docs/old.txt after committing docs: %v", err)
			}
			if _, err := os.Stat(filepath.Join(root, "pkg")); !os.IsNotExist(err) {
				t.Fatalf("pkg/ appeared before its commit: %v", err)
			}
			rest := diffJSON(t, bin, root)
			for p := range rest {
				if strings.HasPrefix(p, "docs") {
					t.Errorf("%s is still pending after commit docs", p)
				}
			}
			delete(changes, "docs/new.md")
			delete(changes, "docs/old.txt")
			delete(changes, "docs")
			for p, op := range changes {
				if rest[p] != op {
					t.Errorf("after commit docs, %s: %q pending, want %q", p, rest[p], op)
				}
			}
			if st, _ := sbDir(t, bin, root, "status"); !strings.Contains(st, id) {
				t.Fatalf("the run is no longer pending after a partial commit:\n%s", st)
			}

			sbDir(t, bin, root, "commit")
			if st, _ := sbDir(t, bin, root, "status"); !strings.Contains(st, "no pending runs") {
				t.Fatalf("a run is still pending after commit:\n%s", st)
			}
			if now := shOut(t, root, describe); now != view {
				t.Errorf("after the commits the tree differs from the run's view:\n%s", lineDiff(view, now))
			}
			after := treetest.Capture(t, root, snapshot.StoreDir)
			checkGit(t, root, "after commit", "feature", 2)
			if b, err := exec.Command(filepath.Join(root, "bin/agent")).Output(); err != nil || string(b) != "hello lib\n" {
				t.Errorf("the committed build: %q %v", b, err)
			}

			sbDir(t, bin, root, "undo")
			sbDir(t, bin, root, "undo")
			treetest.Equal(t, "after two undos", before, treetest.Capture(t, root, snapshot.StoreDir))
			checkGit(t, root, "after two undos", "main", 1)
			sbDir(t, bin, root, "redo")
			sbDir(t, bin, root, "redo")
			treetest.Equal(t, "after two redos", noDirTimes(after), noDirTimes(treetest.Capture(t, root, snapshot.StoreDir)))
			checkGit(t, root, "after two redos", "feature", 2)
		})
	}
}

// TestCopyRunThen: the copy mode works on the tree itself, so it cannot
// keep a run for review; asked to (--then review) or to throw the changes
// away (--then discard), it must do so or refuse before running the
// command, never apply the changes silently.
func TestCopyRunThen(t *testing.T) {
	bin := snapbackBinary(t)
	for _, then := range []string{"review", "discard"} {
		t.Run(then, func(t *testing.T) {
			root := t.TempDir()
			treetest.Write(t, root, "a", "before\n", 0o644)
			before := treetest.Capture(t, root, snapshot.StoreDir)
			cmd, done := boundedCommand(time.Minute, bin, "-C", root, "run", "--mode", "copy", "--then", then, "--", "sh", "-c", "echo changed > a")
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if done() {
				t.Fatal("snapback run timed out")
			}
			status, _ := sbDir(t, bin, root, "status")
			switch {
			case err != nil: // refused: nothing may have run
				treetest.Equal(t, "after a refused run", before, treetest.Capture(t, root, snapshot.StoreDir))
			case then == "discard":
				treetest.Equal(t, "after run --then discard", before, treetest.Capture(t, root, snapshot.StoreDir))
			case then == "review":
				treetest.Equal(t, "while run --then review is pending", before, treetest.Capture(t, root, snapshot.StoreDir))
				if !strings.Contains(status, "pending") {
					t.Errorf("run --then review left no pending run:\n%s", status)
				}
			}
			if t.Failed() {
				t.Logf("snapback run --mode copy --then %s: %v\n%s", then, err, out)
			}
		})
	}
}

// TestAgentInstallKilled kills `agent install` and `agent uninstall` at
// every state-changing step of their in-place write in turn: after each,
// the user's settings are never lost: the file is as before or as after,
// or (torn mid-write) its backup holds it as before, and the next install
// refuses, naming the backup, until it is dealt with.
func TestAgentInstallKilled(t *testing.T) {
	bin := snapbackBinary(t)
	user := "{\n  \"model\": \"opus\",\n  \"note\": \"\\ud800\"\n}\n"
	root := t.TempDir()
	rel := ".claude/settings.json"
	path := filepath.Join(root, rel)
	treetest.Write(t, root, rel, user, 0o644)
	sbDir(t, bin, root, "agent", "install", "claude-code", "--shared")
	installed, err := os.ReadFile(path)
	treetest.Must(t, err)
	for _, verb := range []string{"install", "uninstall"} {
		before, after := user, string(installed)
		if verb == "uninstall" {
			before, after = after, before
		}
		for k := 1; ; k++ {
			treetest.Write(t, root, rel, before, 0o644)
			cmd, done := boundedCommand(time.Minute, bin, "-C", root, "agent", verb, "claude-code", "--shared")
			cmd.Env = append(gitEnv(), fmt.Sprintf("SNAPBACK_KILL_AT=%d", k))
			out, err := cmd.CombinedOutput()
			if done() {
				t.Fatalf("%s killed at %d: timed out", verb, k)
			}
			got, _ := os.ReadFile(path)
			backup, berr := os.ReadFile(path + agent.BackupSuffix)
			if err == nil {
				if string(got) != after || berr == nil {
					t.Fatalf("%s ran whole at step %d but the file is %q (backup: %v)", verb, k, got, berr)
				}
				if k == 1 {
					t.Fatalf("%s changed the file without a kill point", verb)
				}
				t.Logf("%s: killed at each of %d steps", verb, k-1)
				break
			}
			switch {
			case berr != nil && (string(got) == before || string(got) == after):
			case berr == nil && (string(got) == before || string(got) == after || string(backup) == before):
				// The next install names the backup and changes nothing.
				c := exec.Command(bin, "-C", root, "agent", "install", "claude-code", "--shared")
				c.Env = gitEnv()
				o, cerr := c.CombinedOutput()
				if cerr == nil || !strings.Contains(string(o), agent.BackupSuffix+" is there") {
					t.Fatalf("%s killed at %d: the next install over the backup: %v\n%s", verb, k, cerr, o)
				}
				treetest.Must(t, os.Remove(path+agent.BackupSuffix))
			default:
				t.Fatalf("%s killed at step %d lost the settings: file %q, backup %q (%v)\n%s", verb, k, got, backup, berr, out)
			}
		}
	}
}

// TestFirstSnapshotHint: install suggests the first snapshot on a tree
// of over largeTree files without one (the first turn would take it
// inside a tool call), and only then.
func TestFirstSnapshotHint(t *testing.T) {
	root := t.TempDir()
	for i := range largeTree {
		treetest.Write(t, root, fmt.Sprintf("d%02d/f%05d", i/1000, i), "", 0o644)
	}
	if h := firstSnapshotHint(root, 0); h != "" {
		t.Fatalf("%d files: %q", largeTree, h)
	}
	treetest.Write(t, root, "one-more", "", 0o644)
	if h := firstSnapshotHint(root, 0); !strings.Contains(h, "snapback snap -m baseline") {
		t.Fatalf("%d files: %q", largeTree+1, h)
	}
	if h := firstSnapshotHint(root, 1); h != "" {
		t.Fatalf("with a store: %q", h)
	}
}
