//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestAgentWorktrees plays two Claude Code sessions at once, each in its
// own linked worktree of one repository (one worktree per agent, as
// harnesses set them up), each worktree its own project with its own
// store: the hooks get the documented payloads (see hooks_test.go), and
// the test does what the tools would. The turns interleave: both
// prompts, then the tool calls of one and the other in turn, each
// editing, adding, deleting, committing and branching or tagging in its
// worktree, then the second's Stop before the first's. Both turns are
// then undone in one order, redone, and undone in the other: each undo
// and redo puts back exactly its own worktree's files, HEAD, index and
// refs, and leaves the other's branch, tag, index and files as they are.
func TestAgentWorktrees(t *testing.T) {
	bin := snapbackBinary(t)
	base := t.TempDir()
	main := filepath.Join(base, "main")
	treetest.Write(t, main, "a.txt", "a\n", 0o644)
	treetest.Write(t, main, "b.txt", "b\n", 0o644)
	git(t, main, "init", "-q")
	git(t, main, "add", "-A")
	git(t, main, "commit", "-q", "-m", "initial")
	w := map[string]string{"one": filepath.Join(base, "w1"), "two": filepath.Join(base, "w2")}
	for _, b := range []string{"one", "two"} {
		git(t, main, "worktree", "add", "-q", "-b", b, w[b])
	}

	// A worktree's own state: its files, HEAD, its index entries.
	own := func(b string) treetest.State {
		t.Helper()
		st := treetest.Capture(t, w[b])
		st["<HEAD>"] = git(t, w[b], "rev-parse", "HEAD") + git(t, w[b], "symbolic-ref", "HEAD")
		st["<index>"] = git(t, w[b], "ls-files", "-s")
		return st
	}
	// The repository's refs, name to object id.
	refs := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(git(t, main, "for-each-ref", "--format=%(refname) %(objectname)")), "\n") {
			f := strings.Fields(l)
			m[f[0]] = f[1]
		}
		return m
	}
	// The refs each agent's turn moves.
	moved := map[string][]string{"one": {"refs/heads/one", "refs/tags/t1"}, "two": {"refs/heads/two", "refs/heads/side2"}}

	payload := func(b, event string, fields map[string]any) []byte {
		m := map[string]any{
			"session_id":      "session-" + b,
			"transcript_path": "/home/user/.claude/projects/" + b + "/session-" + b + ".jsonl",
			"cwd":             w[b],
			"permission_mode": "default",
			"hook_event_name": event,
		}
		maps.Copy(m, fields)
		out, err := json.Marshal(m)
		treetest.Must(t, err)
		return out
	}
	send := func(b, event string, fields map[string]any) string {
		t.Helper()
		return hook(t, bin, "claude-code", payload(b, event, fields))
	}
	tool := func(b, name string, input map[string]any, script string) {
		t.Helper()
		if msg := send(b, "PreToolUse", map[string]any{"tool_name": name, "tool_input": input, "tool_use_id": "toolu_" + b + name}); msg != "" {
			t.Fatalf("%s: PreToolUse %s: %q", b, name, msg)
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir, cmd.Env = w[b], gitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %s: %v\n%s", b, script, err, out)
		}
	}
	stop := func(b string) {
		t.Helper()
		if stepRE.FindStringSubmatch(send(b, "Stop", map[string]any{"stop_hook_active": false})) == nil {
			t.Fatalf("%s: Stop did not name the turn's undo step", b)
		}
	}

	before := map[string]treetest.State{"one": own("one"), "two": own("two")}
	r0 := refs()
	send("one", "UserPromptSubmit", map[string]any{"prompt": "edit a and commit"})
	send("two", "UserPromptSubmit", map[string]any{"prompt": "drop b, add n and commit"})
	tool("one", "Edit", map[string]any{"file_path": filepath.Join(w["one"], "a.txt"), "old_string": "a", "new_string": "a1"}, "echo a1 > a.txt")
	tool("two", "Write", map[string]any{"file_path": filepath.Join(w["two"], "n.txt"), "content": "n\n"}, "echo n > n.txt")
	tool("one", "Bash", map[string]any{"command": "git commit -am one && git tag t1"}, "echo c > c.txt && git add -A && git commit -qm one && git tag t1")
	tool("two", "Bash", map[string]any{"command": "git rm b.txt && git commit && git branch side2"}, "git rm -q b.txt && git add -A && git commit -qm two && git branch side2")
	stop("two")
	stop("one")
	after := map[string]treetest.State{"one": own("one"), "two": own("two")}
	r2 := refs()
	for _, b := range []string{"one", "two"} {
		for _, ref := range moved[b] {
			if r2[ref] == r0[ref] {
				t.Fatalf("%s's turn did not move %s", b, ref)
			}
		}
	}

	// check says that each worktree is as its turn is (done or undone),
	// and so are exactly the refs each moved; every other ref as before.
	check := func(what string, done map[string]bool) {
		t.Helper()
		want := maps.Clone(r0)
		for _, b := range []string{"one", "two"} {
			st := before[b]
			if done[b] {
				st = after[b]
				for _, ref := range moved[b] {
					want[ref] = r2[ref]
				}
			} else {
				for _, ref := range moved[b] {
					if r0[ref] == "" {
						delete(want, ref)
					}
				}
			}
			treetest.Equal(t, fmt.Sprintf("%s: worktree %s", what, b), noDirTimes(st), noDirTimes(own(b)))
		}
		if got := refs(); !maps.Equal(got, want) {
			t.Fatalf("%s: refs\n%v\nwant\n%v", what, got, want)
		}
		git(t, main, "fsck", "--no-progress", "--strict")
	}
	check("after both turns", map[string]bool{"one": true, "two": true})
	for _, order := range [][]string{{"one", "two"}, {"two", "one"}} {
		done := map[string]bool{"one": true, "two": true}
		for _, b := range order {
			sbDir(t, bin, w[b], "undo")
			done[b] = false
			check(fmt.Sprintf("undo %v, up to %s", order, b), done)
		}
		for _, b := range order {
			sbDir(t, bin, w[b], "redo")
			done[b] = true
			check(fmt.Sprintf("redo %v, up to %s", order, b), done)
		}
	}
	// Each worktree's project has its own store.
	if testStore(t, w["one"]) == testStore(t, w["two"]) {
		t.Fatal("the two worktrees share a store")
	}
}
