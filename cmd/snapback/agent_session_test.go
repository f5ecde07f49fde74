//go:build linux

package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// TestAgentSession plays a Claude Code session without a model: the
// hooks get the payloads Claude Code sends (as documented; see
// hooks_test.go), and the test does what the tools would do, from its
// own process and through sh.
//
// Turn 1: a prompt; PreToolUse for Edit, then the "agent" writes the file
// itself; PreToolUse for Bash, which runs sed -i over several files;
// four tool calls at once (four hook processes in parallel); Stop.
// Between the turns the user edits a file of their own. Turn 2 starts
// with parallel tool calls (they race to open the checkpoint: exactly one
// must), creates and deletes files, changes the SQLite target, commits
// in git; Stop. Then undo reverts exactly turn 2 (files, .git, the
// database) and keeps the user's edit; undo reverts turn 1; redo twice
// brings both back; undo --session reverts the whole session as one
// step, leaving another session's turn and the user's edit.
func TestAgentSession(t *testing.T) {
	bin := snapbackBinary(t)
	root := filepath.Join(t.TempDir(), "repo")
	for i := 1; i <= 5; i++ {
		treetest.Write(t, root, fmt.Sprintf("src/f%d.go", i), fmt.Sprintf("package src\n\n// foo %d\nfunc foo%d() {}\n", i, i), 0o644)
	}
	treetest.Write(t, root, "docs/old.md", "obsolete\n", 0o644)
	treetest.Write(t, root, "notes.txt", "the user's notes\n", 0o644)
	treetest.Write(t, root, "other.txt", "another session's file\n", 0o644)
	treetest.Write(t, root, ".gitignore", "/db/\n", 0o644)
	// The database's directory is the target's: the tree's snapshots leave
	// the file to the backend, and SQLite's journal files come and go there.
	treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"app\"\nbackend = \"sqlite\"\npath = \"db/app.db\"\n", 0o644)
	db := filepath.Join(root, "db", "app.db")
	treetest.Must(t, os.MkdirAll(filepath.Dir(db), 0o755))
	sqlExec(t, db, `CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('one')`)
	git(t, root, "init", "-q")
	git(t, root, "add", "-A")
	git(t, root, "commit", "-q", "-m", "initial")
	capture := func() treetest.State { return treetest.Capture(t, root, snapshot.StoreDir, "db") }
	dbState := func() string {
		t.Helper()
		h, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(10000)")
		treetest.Must(t, err)
		defer h.Close()
		var v string
		var later int
		treetest.Must(t, h.QueryRow(`SELECT group_concat(v), (SELECT count(*) FROM sqlite_master WHERE name = 'later') FROM t`).Scan(&v, &later))
		return fmt.Sprintf("v=%s later=%d", v, later)
	}
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir, cmd.Env = root, gitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}

	// Claude Code's payloads (https://code.claude.com/docs/en/hooks, "Hook
	// Input"), for this project and session.
	payload := func(session, event string, fields map[string]any) []byte {
		m := map[string]any{
			"session_id":      session,
			"transcript_path": "/home/user/.claude/projects/repo/" + session + ".jsonl",
			"cwd":             filepath.Join(root, "src"), // the agent cd'ed into src/
			"permission_mode": "default",
			"hook_event_name": event,
		}
		for k, v := range fields {
			m[k] = v
		}
		b, err := json.Marshal(m)
		treetest.Must(t, err)
		return b
	}
	const session = "9f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b"
	send := func(event string, fields map[string]any) string {
		t.Helper()
		return hook(t, bin, "claude-code", payload(session, event, fields))
	}
	tool := func(name string, input map[string]any) {
		t.Helper()
		if msg := send("PreToolUse", map[string]any{"tool_name": name, "tool_input": input, "tool_use_id": "toolu_" + name}); msg != "" {
			t.Fatalf("PreToolUse %s: %q", name, msg)
		}
	}
	parallel := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		msgs := make([]string, n)
		names := []string{"Write", "Edit", "Bash", "MultiEdit"}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msgs[i] = hook(t, bin, "claude-code", payload(session, "PreToolUse", map[string]any{"tool_name": names[i%len(names)], "tool_input": map[string]any{}}))
			}()
		}
		wg.Wait()
		for i, m := range msgs {
			if m != "" {
				t.Fatalf("parallel PreToolUse %d: %q", i, m)
			}
		}
	}
	stop := func() string {
		t.Helper()
		m := stepRE.FindStringSubmatch(send("Stop", map[string]any{"stop_hook_active": false}))
		if m == nil {
			t.Fatal("Stop did not name the turn's undo step")
		}
		return m[1]
	}

	// Another session's turn first: undo --session must leave it.
	other := func(event string, fields map[string]any) string {
		return hook(t, bin, "claude-code", payload("other-session", event, fields))
	}
	other("UserPromptSubmit", map[string]any{"prompt": "touch up other.txt"})
	other("PreToolUse", map[string]any{"tool_name": "Write", "tool_input": map[string]any{}})
	treetest.Write(t, root, "other.txt", "changed by the other session\n", 0o644)
	if stepRE.FindStringSubmatch(other("Stop", map[string]any{})) == nil {
		t.Fatal("the other session's turn left no step")
	}
	s0, db0 := capture(), dbState()

	// Turn 1.
	if msg := send("UserPromptSubmit", map[string]any{"prompt": "Rename foo to bar\n\nin every file of src/"}); msg != "" {
		t.Fatalf("UserPromptSubmit: %q", msg)
	}
	tool("Edit", map[string]any{"file_path": filepath.Join(root, "src/f1.go"), "old_string": "foo", "new_string": "bar"})
	treetest.Write(t, root, "src/f1.go", "package src\n\n// bar 1\nfunc bar1() {}\n", 0o644)
	tool("Bash", map[string]any{"command": "sed -i s/foo/bar/g f2.go f3.go f4.go", "description": "rename"})
	sh("sed -i s/foo/bar/g src/f2.go src/f3.go src/f4.go")
	parallel(4)
	sh("sed -i s/foo/bar/g src/f5.go && echo '// renamed' >> src/f1.go")
	turn1 := stop()

	// The user, between the turns, in a file of their own.
	treetest.Write(t, root, "notes.txt", "the user's notes\nand a thought of theirs\n", 0o644)
	s1u := capture()

	// Turn 2: parallel calls open the checkpoint.
	send("UserPromptSubmit", map[string]any{"prompt": "Add the feature and commit"})
	parallel(4)
	treetest.Write(t, root, "src/feature.go", "package src\n\n// Feature is new.\nfunc Feature() {}\n", 0o644)
	treetest.Write(t, root, "src/feature/data/table.txt", "1 2 3\n", 0o644)
	treetest.Must(t, os.Remove(filepath.Join(root, "docs/old.md")))
	sqlExec(t, db, `UPDATE t SET v = 'two'; CREATE TABLE later(x INTEGER)`)
	tool("Bash", map[string]any{"command": "git add -A && git commit -m feature"})
	sh("git add -A && git commit -q -m feature")
	turn2 := stop()
	s2, db2 := capture(), dbState()
	if db2 == db0 {
		t.Fatalf("turn 2 did not change the database: %s", db2)
	}

	// Each turn is one step of this session, with its prompt's first line.
	var list struct{ Snapshots []snapshotJSON }
	treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, root, "--json", "list")), &list))
	steps := map[string]string{}
	for _, s := range list.Snapshots {
		if s.Kind == "checkpoint" && s.Session == session {
			steps[s.ID] = s.Message
		}
	}
	if len(steps) != 2 || steps[turn1] != "Rename foo to bar" || steps[turn2] != "Add the feature and commit" {
		t.Fatalf("the session's steps: %v, want %s and %s, one per turn", steps, turn1, turn2)
	}

	// undo: exactly turn 2, the user's edit stays.
	sbDir(t, bin, root, "undo")
	treetest.Equal(t, "after undo of turn 2", s1u, capture())
	if got := dbState(); got != db0 {
		t.Fatalf("after undo of turn 2 the database is %s, want %s", got, db0)
	}
	if log := git(t, root, "log", "--format=%s"); log != "initial\n" {
		t.Fatalf("after undo of turn 2, git log: %q", log)
	}
	// undo: turn 1; the user's file keeps their edit.
	sbDir(t, bin, root, "undo")
	want := treetest.State{}
	for p, d := range s0 {
		want[p] = d
	}
	want["notes.txt"] = s1u["notes.txt"]
	treetest.Equal(t, "after undo of turn 1", want, capture())
	// redo twice: both turns again.
	sbDir(t, bin, root, "redo")
	treetest.Equal(t, "after redo of turn 1", noDirTimes(s1u), noDirTimes(capture()))
	sbDir(t, bin, root, "redo")
	treetest.Equal(t, "after redo of turn 2", noDirTimes(s2), noDirTimes(capture()))
	if got := dbState(); got != db2 {
		t.Fatalf("after redo of turn 2 the database is %s, want %s", got, db2)
	}
	if log := git(t, root, "log", "--format=%s"); log != "feature\ninitial\n" {
		t.Fatalf("after redo, git log: %q", log)
	}

	// undo --session: the whole session at once; the other session's turn
	// and the user's edit stay.
	sbDir(t, bin, root, "undo", "--session", session)
	treetest.Equal(t, "after undo --session", noDirTimes(want), noDirTimes(capture()))
	if got := dbState(); got != db0 {
		t.Fatalf("after undo --session the database is %s, want %s", got, db0)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "other.txt")); !strings.Contains(string(b), "other session") {
		t.Fatalf("undo --session reverted another session's turn: other.txt = %q", b)
	}
	git(t, root, "fsck", "--no-progress", "--strict")
}
