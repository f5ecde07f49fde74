//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// The hook payloads in testdata/hooks are copied field for field from
// the harnesses' published documentation:
//
//   - Claude Code: https://code.claude.com/docs/en/hooks, "Hook Input"
//     (UserPromptSubmit, PreToolUse for Bash, Write, Edit and Read, Stop,
//     SubagentStop, SessionEnd); the answer: "Hook Output", JSON on
//     stdout with exit status 0, "systemMessage" shown to the user.
//   - Gemini CLI: https://geminicli.com/docs/hooks/ (docs/hooks/index.md,
//     "Common input fields", "Event-specific fields") and
//     https://geminicli.com/docs/hooks/reference ("Base input schema",
//     AfterAgent's fields; "Common output fields": only JSON on stdout).
//   - Codex CLI: openai/codex at commit bde5e187f2f45b3e473c213c12cd4f4c5f3bcc47,
//     codex-rs/hooks/src/schema.rs and the schemas generated from it,
//     codex-rs/hooks/schema/generated/*.command.input.schema.json
//     (UserPromptSubmit, PreToolUse for Bash, apply_patch and an MCP
//     tool, Stop); the answer: codex-rs/hooks/src/events/pre_tool_use.rs,
//     exit status 0 with nothing on stdout, or JSON whose "systemMessage"
//     is shown. testdata/hooks/README.md says more.
//
// Only "cwd" is changed, to the test's project.

// golden reads a documented payload, with its cwd set to cwd.
func golden(t *testing.T, harness, name, cwd string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hooks", harness, name+".json"))
	treetest.Must(t, err)
	var m map[string]any
	treetest.Must(t, json.Unmarshal(b, &m))
	m["cwd"] = cwd
	b, err = json.Marshal(m)
	treetest.Must(t, err)
	return b
}

// hook feeds payload to `snapback agent hook HARNESS`, started in / (the
// payload's cwd must lead it to the project), as the harness runs it; it
// must exit 0. It returns what the user is shown: "" when the answer is
// the harness's silent one.
func hook(t *testing.T, bin, harness string, payload []byte) string {
	t.Helper()
	return hookEnv(t, bin, harness, payload)
}

// hookStates holds each test's state directory (where hooks remember a
// session's first directory, and make a project's store): one per test,
// kept across its hooks and given to every snapback it runs (testEnv).
var hookStates sync.Map

// testState is the test's state directory.
func testState(t *testing.T) string {
	if s, ok := hookStates.Load(t); ok {
		return s.(string)
	}
	s, _ := hookStates.LoadOrStore(t, t.TempDir())
	return s.(string)
}

// testEnv is git's environment (gitEnv) with the test's state directory.
func testEnv(t *testing.T) []string {
	var env []string
	for _, kv := range gitEnv() {
		if !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_STATE_HOME="+testState(t))
}

// testStore is the store of the test's project at root: .snapback, else
// the one the hooks made in the test's state directory.
func testStore(t *testing.T, root string) string {
	t.Helper()
	in := filepath.Join(root, snapshot.StoreDir)
	if _, err := os.Lstat(in); err == nil {
		return in
	}
	m, _ := filepath.Glob(filepath.Join(testState(t), "snapback", "projects", filepath.Base(root)+"-*"))
	if len(m) != 1 {
		t.Fatalf("the store of %s: none in the tree, %v in the state directory", root, m)
	}
	return m[0]
}

// hookEnv is hook with env added to the environment, which holds no
// project directory variable of a harness's unless env sets it.
func hookEnv(t *testing.T, bin, harness string, payload []byte, env ...string) string {
	t.Helper()
	state := testState(t)
	cmd, done := boundedCommand(2*time.Minute, bin, "agent", "hook", harness)
	cmd.Dir = "/"
	for _, kv := range gitEnv() {
		if !strings.HasPrefix(kv, "CLAUDE_PROJECT_DIR=") && !strings.HasPrefix(kv, "GEMINI_PROJECT_DIR=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "XDG_STATE_HOME="+state), env...)
	cmd.Stdin = bytes.NewReader(payload)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); done() || err != nil {
		t.Fatalf("agent hook %s: %v (it must always exit 0)\nstdout:\n%s\nstderr:\n%s", harness, err, o.String(), e.String())
	}
	return answer(t, harness, o.String())
}

// answer checks a hook's stdout against the harness's documented format
// and returns the message it shows the user.
func answer(t *testing.T, harness, out string) string {
	t.Helper()
	quiet := "" // Claude Code and Codex CLI add a UserPromptSubmit hook's stdout to the model's context
	if harness == "gemini-cli" {
		quiet = "{}\n" // Gemini CLI parses stdout as JSON, always
	}
	if out == quiet {
		return ""
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(out), &m); err != nil || len(m) != 1 || m["systemMessage"] == "" || strings.Count(out, "\n") != 1 {
		t.Fatalf("%s hook answered %q: want %q or one line {\"systemMessage\": …}", harness, out, quiet)
	}
	return m["systemMessage"]
}

var stepRE = regexp.MustCompile(`^snapback: this turn is undo step ([0-9]{8}-[0-9]{6}-[0-9a-f]{6}) \(` + "`snapback undo`" + ` reverts it\)$`)

// checkpointOpen returns the open checkpoint's session and message ("",
// "" when none is open).
func checkpointOpen(t *testing.T, bin, root string) (session, message string) {
	t.Helper()
	var st struct {
		Open             bool
		Session, Message string
	}
	treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, root, "--json", "checkpoint", "status")), &st))
	if !st.Open {
		return "", ""
	}
	return st.Session, st.Message
}

// TestHookPayloads feeds each harness's documented payloads through the
// binary: a reading tool does nothing at all; the prompt notes the turn
// without opening anything; the first tool that writes opens the
// checkpoint, with the prompt as its message; (Claude Code) a subagent's
// end leaves it open; the turn's end closes it into one undo step, named
// to the user; the session's end finds nothing left open and drops the
// note; undo reverts the turn.
func TestHookPayloads(t *testing.T) {
	bin := snapbackBinary(t)
	type events struct{ prompt, read, write, more, substop, stop, end, message, session string }
	for harness, ev := range map[string]events{
		"claude-code": {"UserPromptSubmit", "PreToolUse-Read", "PreToolUse-Write", "PreToolUse-Bash", "SubagentStop", "Stop", "SessionEnd",
			"Write a function to calculate the factorial of a number", "abc123"},
		"gemini-cli": {"BeforeAgent", "BeforeTool-read_file", "BeforeTool-write_file", "", "", "AfterAgent", "SessionEnd",
			"Fix the authentication bug", "abc123"},
		// Codex CLI: no session end event.
		"codex": {"UserPromptSubmit", "PreToolUse-mcp", "PreToolUse-Bash", "PreToolUse-apply_patch", "", "Stop", "",
			"Rename old/name.txt to renamed/dir/name.txt", "019a3c5e-7f1d-7b20-9c41-2f6d8e0a1b3c"},
	} {
		t.Run(harness, func(t *testing.T) {
			root := t.TempDir()
			treetest.Write(t, root, "snapback.toml", "", 0o644)
			treetest.Write(t, root, "src/a.txt", "one\n", 0o644)
			before := treetest.Capture(t, root, snapshot.StoreDir)
			cwd := filepath.Join(root, "src") // the agent works in a subdirectory
			send := func(name string) string { return hook(t, bin, harness, golden(t, harness, name, cwd)) }

			if msg := send(ev.read); msg != "" {
				t.Fatalf("a reading tool: %q", msg)
			}
			if m, _ := filepath.Glob(filepath.Join(testState(t), "snapback", "projects", "*")); len(m) != 0 {
				t.Fatal("a reading tool's hook made the store: it must do nothing")
			}
			if msg := send(ev.prompt); msg != "" {
				t.Fatalf("the prompt: %q", msg)
			}
			if s, _ := checkpointOpen(t, bin, root); s != "" {
				t.Fatal("the prompt opened a checkpoint: a turn that only reads must leave nothing")
			}
			if msg := send(ev.write); msg != "" {
				t.Fatalf("the first writing tool: %q", msg)
			}
			if s, m := checkpointOpen(t, bin, root); s != ev.session || m != ev.message {
				t.Fatalf("after the first writing tool, open checkpoint: session %q message %q", s, m)
			}
			treetest.Write(t, root, "src/a.txt", "two\n", 0o644) // what the tool does
			treetest.Write(t, root, "src/b.txt", "new\n", 0o644)
			if ev.more != "" {
				if msg := send(ev.more); msg != "" {
					t.Fatalf("a second writing tool: %q", msg)
				}
			}
			if ev.substop != "" {
				if msg := send(ev.substop); msg != "" {
					t.Fatalf("a subagent's end: %q", msg)
				}
				if s, _ := checkpointOpen(t, bin, root); s != ev.session {
					t.Fatal("a subagent's end closed the turn's checkpoint")
				}
			}
			m := stepRE.FindStringSubmatch(send(ev.stop))
			if m == nil {
				t.Fatalf("the turn's end did not name its undo step")
			}
			if s, _ := checkpointOpen(t, bin, root); s != "" {
				t.Fatal("a checkpoint is still open after the turn's end")
			}
			var list struct{ Snapshots []snapshotJSON }
			treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, root, "--json", "list")), &list))
			if len(list.Snapshots) != 1 || list.Snapshots[0].ID != m[1] || list.Snapshots[0].Kind != "checkpoint" ||
				list.Snapshots[0].Session != ev.session || list.Snapshots[0].Message != ev.message || list.Snapshots[0].Files != 2 {
				t.Fatalf("list after the turn: %+v", list.Snapshots)
			}
			if ev.end != "" {
				if msg := send(ev.end); msg != "" {
					t.Fatalf("the session's end: %q", msg)
				}
			}
			if _, err := os.Lstat(filepath.Join(root, snapshot.StoreDir)); err == nil {
				t.Fatal("the hooks made the store in the tree: `git clean -fdx` would take it")
			}
			if notes, _ := filepath.Glob(filepath.Join(testStore(t, root), "agent", "turn-*")); ev.end != "" && len(notes) != 0 {
				t.Fatalf("the session's end left its note: %v", notes)
			}
			sb(t, bin, root, "undo")
			treetest.Equal(t, "after undo", before, treetest.Capture(t, root, snapshot.StoreDir))
		})
	}
}

// TestHookFailsOpen: whatever goes wrong on snapback's side, the hook
// exits 0 (the tool call proceeds) and shows the user one line saying
// what failed.
func TestHookFailsOpen(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "snapback.toml", "[snapshot]\nkeep = \"many\"\n", 0o644)
	for _, harness := range []string{"claude-code", "gemini-cli", "codex"} {
		write := map[string]string{"claude-code": "PreToolUse-Write", "gemini-cli": "BeforeTool-write_file", "codex": "PreToolUse-apply_patch"}[harness]
		for what, c := range map[string]struct {
			payload []byte
			want    string
		}{
			"a bad snapback.toml": {golden(t, harness, write, root), `^snapback: warning: /\S+/snapback.toml:2: snapshot\.keep must be an integer, not a string \(the agent goes on; this turn may not be undoable\)$`},
			"no such directory":   {golden(t, harness, write, filepath.Join(root, "gone")), `^snapback: warning: chdir .*gone: no such file or directory \(the agent goes on`},
			"a relative cwd":      {golden(t, harness, write, "src"), `^snapback: warning: hook payload: cwd "src" is not an absolute path`},
			"not JSON":            {[]byte("{\"session_id\": "), `^snapback: warning: hook payload: not a whole JSON object`},
			"no session":          {[]byte(`{"hook_event_name": "Stop", "cwd": "/"}`), `^snapback: warning: hook payload: no session_id`},
		} {
			if harness == "gemini-cli" && what == "no session" {
				c.payload = []byte(`{"hook_event_name": "AfterAgent", "cwd": "/"}`)
			}
			// Each case a session of its own (a session's first
			// directory is remembered: see TestHookProjectFixed).
			t.Run(harness+"/"+what, func(t *testing.T) {
				if msg := hook(t, bin, harness, c.payload); !regexp.MustCompile(c.want).MatchString(msg) {
					t.Errorf("the hook said %q, want %s", msg, c.want)
				}
			})
		}
	}
	if msg := hook(t, bin, "claude-code", []byte(`{"hook_event_name": "Notification", "session_id": "x", "cwd": "/nowhere"}`)); msg != "" {
		t.Errorf("an event of no interest: %q (it must not even look at the project)", msg)
	}
	// An unknown harness: still exit 0 and a systemMessage.
	if msg := hook(t, bin, "claude-code-x", []byte(`{}`)); !strings.Contains(msg, `unknown harness "claude-code-x"`) {
		t.Errorf("an unknown harness: %q", msg)
	}
}

// BenchmarkAgentHook measures what a hook costs the agent per tool call,
// the process's start included (the harness starts one per event):
// "ignored" is a reading tool's call (nothing to do), "open" a writing
// tool's call while the turn's checkpoint is open already (the common
// case after a turn's first write), in a project of 10,000 files; "exec"
// is /bin/true, for scale. Run: go test -run '^$' -bench AgentHook
// ./cmd/snapback/
func BenchmarkAgentHook(b *testing.B) {
	bin := snapbackBinary(b)
	root := b.TempDir()
	treetest.Write(b, root, "snapback.toml", "", 0o644)
	for i := range 10000 {
		treetest.Write(b, root, fmt.Sprintf("d%03d/f%04d.txt", i/100, i), fmt.Sprintf("file %d\n", i), 0o644)
	}
	payload := func(event, tool string) []byte {
		b, _ := json.Marshal(map[string]any{"session_id": "bench", "cwd": root, "hook_event_name": event, "tool_name": tool, "tool_input": map[string]any{}, "prompt": "bench"})
		return b
	}
	run := func(b *testing.B, name string, args []string, in []byte) {
		cmd := exec.Command(name, args...)
		cmd.Stdin = bytes.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil || (len(out) > 0 && !bytes.Contains(out, []byte("{}"))) {
			b.Fatalf("%s: %v %s", name, err, out)
		}
	}
	hookArgs := []string{"agent", "hook", "claude-code"}
	run(b, bin, hookArgs, payload("UserPromptSubmit", ""))
	run(b, bin, hookArgs, payload("PreToolUse", "Write"))
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			run(b, "/bin/true", nil, nil)
		}
	})
	b.Run("ignored", func(b *testing.B) {
		for b.Loop() {
			run(b, bin, hookArgs, payload("PreToolUse", "Read"))
		}
	})
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			run(b, bin, hookArgs, payload("PreToolUse", "Edit"))
		}
	})
}

// TestHookNeverBlocks: a FIFO in place of the session's turn note (a
// store is input from outside) is refused at once, not waited on: the
// tool call's hook answers in time, with a warning, and the checkpoint
// opens all the same. And whatever the hook would wait on (here a
// payload whose writer never closes stdin), it answers within its
// deadline and exits 0.
func TestHookNeverBlocks(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "snapback.toml", "", 0o644)
	treetest.Write(t, root, "a.txt", "one\n", 0o644)
	if msg := hook(t, bin, "claude-code", golden(t, "claude-code", "UserPromptSubmit", root)); msg != "" {
		t.Fatalf("the prompt: %q", msg)
	}
	notes, err := filepath.Glob(filepath.Join(testStore(t, root), "agent", "turn-*.json"))
	if err != nil || len(notes) != 1 {
		t.Fatalf("the turn's note: %v %v", notes, err)
	}
	treetest.Must(t, os.Remove(notes[0]))
	treetest.Must(t, syscall.Mkfifo(notes[0], 0o600))
	start := time.Now()
	msg := hook(t, bin, "claude-code", golden(t, "claude-code", "PreToolUse-Write", root))
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the hook took %v over a FIFO", took)
	}
	if !strings.Contains(msg, "not a regular file") {
		t.Errorf("the hook over a FIFO said %q, want a warning naming it", msg)
	}
	// A FIFO in the store makes every verb refuse it in one line naming
	// the path (the hook fails open meanwhile); check --repair sets it
	// aside, and the store works again.
	status := exec.Command(bin, "-C", root, "checkpoint", "status")
	status.Env = testEnv(t)
	st, err := status.CombinedOutput()
	if err == nil || !strings.Contains(string(st), notes[0]) || strings.Count(strings.TrimSpace(string(st)), "\n") > 1 {
		t.Errorf("checkpoint status over a FIFO in the store: %v %q, want a refusal naming it", err, st)
	}
	repair := exec.Command(bin, "-C", root, "check", "--repair")
	repair.Env = testEnv(t)
	if out, err := repair.CombinedOutput(); err != nil {
		t.Fatalf("check --repair: %v %s", err, out)
	}
	checkpointOpen(t, bin, root)

	// stdin never closed: the deadline answers.
	pr, pw, err := os.Pipe()
	treetest.Must(t, err)
	defer pw.Close()
	cmd, done := boundedCommand(time.Minute, bin, "agent", "hook", "claude-code")
	cmd.Dir, cmd.Env, cmd.Stdin = root, append(testEnv(t), "SNAPBACK_HOOK_DEADLINE=1s"), pr
	start = time.Now()
	out, err := cmd.Output()
	pr.Close()
	if done() || err != nil || time.Since(start) > 20*time.Second {
		t.Fatalf("a hook whose stdin stays open: %v after %v\n%s", err, time.Since(start), out)
	}
	if msg := answer(t, "claude-code", string(out)); !strings.Contains(msg, "did not answer within 1s") {
		t.Errorf("the deadline's answer: %q", msg)
	}
}

// TestHookStopFailure: a turn that ends on an API error gets Claude
// Code's StopFailure, not Stop; it must close the turn all the same.
// Replayed: prompt, Write, StopFailure, then the person edits a file,
// then a whole turn; undoing both turns keeps the person's edit.
func TestHookStopFailure(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "snapback.toml", "", 0o644)
	treetest.Write(t, root, "a.txt", "one\n", 0o644)
	treetest.Write(t, root, "mine.txt", "mine, before\n", 0o644)
	send := func(name string) string { return hook(t, bin, "claude-code", golden(t, "claude-code", name, root)) }
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		treetest.Must(t, err)
		return string(b)
	}

	send("UserPromptSubmit")
	send("PreToolUse-Write")
	treetest.Write(t, root, "a.txt", "two\n", 0o644)
	if m := stepRE.FindStringSubmatch(send("StopFailure")); m == nil {
		t.Fatal("StopFailure did not close the turn into a step")
	}
	if s, _ := checkpointOpen(t, bin, root); s != "" {
		t.Fatalf("a checkpoint of session %q is open after StopFailure", s)
	}
	treetest.Write(t, root, "mine.txt", "mine, edited between the turns\n", 0o644) // the person

	send("UserPromptSubmit")
	send("PreToolUse-Write")
	treetest.Write(t, root, "a.txt", "three\n", 0o644)
	send("Stop")

	sb(t, bin, root, "undo")
	sb(t, bin, root, "undo")
	if got := read("a.txt"); got != "one\n" {
		t.Errorf("a.txt after undoing both turns: %q", got)
	}
	if got := read("mine.txt"); got != "mine, edited between the turns\n" {
		t.Errorf("the person's edit between the turns was undone: mine.txt is %q", got)
	}
}

// TestHookProjectFixed: the agent's shell may `cd /elsewhere`, and the
// payloads' cwd follows it; the hooks still act on the session's
// project: the one the harness names (CLAUDE_PROJECT_DIR), else the
// session's first directory, remembered. No store is made elsewhere, and
// the project's turn closes.
func TestHookProjectFixed(t *testing.T) {
	bin := snapbackBinary(t)
	for _, named := range []bool{true, false} {
		t.Run(map[bool]string{true: "named", false: "first-cwd"}[named], func(t *testing.T) {
			root, elsewhere := t.TempDir(), t.TempDir()
			treetest.Write(t, root, "snapback.toml", "", 0o644)
			treetest.Write(t, root, "a.txt", "one\n", 0o644)
			var env []string
			if named {
				env = []string{"CLAUDE_PROJECT_DIR=" + root}
			}
			send := func(name, cwd string) string {
				return hookEnv(t, bin, "claude-code", golden(t, "claude-code", name, cwd), env...)
			}
			first := root
			if named {
				first = elsewhere // the harness's variable wins even over the first cwd
			}
			send("UserPromptSubmit", first)
			send("PreToolUse-Write", elsewhere)
			treetest.Write(t, root, "a.txt", "two\n", 0o644)
			if m := stepRE.FindStringSubmatch(send("Stop", elsewhere)); m == nil {
				t.Fatal("the turn did not close into a step of the project's")
			}
			if _, err := os.Lstat(filepath.Join(elsewhere, snapshot.StoreDir)); err == nil {
				t.Fatal("a hook made a store where the agent's shell wandered")
			}
			if s, _ := checkpointOpen(t, bin, root); s != "" {
				t.Fatalf("the project's checkpoint is still open (session %q)", s)
			}
			send("SessionEnd", elsewhere)
			if ents, _ := os.ReadDir(filepath.Join(testState(t), "snapback", "agent-sessions")); len(ents) != 0 {
				t.Fatalf("the session's end left its state: %v", ents)
			}
			sb(t, bin, root, "undo")
			if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "one\n" {
				t.Fatalf("a.txt after undo: %q", b)
			}
		})
	}
}

// TestHookAgentDirLink: a store whose agent/ is a symbolic link to a
// directory outside (a store is input from outside: a clone can carry
// one): the prompt's hook neither writes its note there nor prunes an
// old note it finds there; it warns, and the agent goes on.
func TestHookAgentDirLink(t *testing.T) {
	bin := snapbackBinary(t)
	root, outside := t.TempDir(), t.TempDir()
	treetest.Write(t, root, "snapback.toml", "", 0o644)
	hook(t, bin, "claude-code", golden(t, "claude-code", "UserPromptSubmit", root)) // makes the store
	agentDir := filepath.Join(testStore(t, root), "agent")
	treetest.Must(t, os.RemoveAll(agentDir))
	treetest.Must(t, os.Symlink(outside, agentDir))
	old := filepath.Join(outside, "turn-00000000000000000000000000000000.json")
	treetest.Write(t, outside, filepath.Base(old), "{}", 0o600)
	month := time.Now().Add(-40 * 24 * time.Hour)
	treetest.Must(t, os.Chtimes(old, month, month))

	msg := hook(t, bin, "claude-code", golden(t, "claude-code", "UserPromptSubmit", root))
	if !strings.HasPrefix(msg, "snapback: warning: ") {
		t.Errorf("the hook over a linked agent/ said %q, want a warning", msg)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 || ents[0].Name() != filepath.Base(old) {
		t.Fatalf("the directory outside changed: %v", ents)
	}
}

// TestHookCodexPatchOutside: a Codex CLI apply_patch that names a file
// outside the project opens the turn's checkpoint as any write does, and
// says that no undo step holds that file; one inside says nothing.
func TestHookCodexPatchOutside(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "snapback.toml", "", 0o644)
	var m map[string]any
	treetest.Must(t, json.Unmarshal(golden(t, "codex", "PreToolUse-apply_patch", root), &m))
	m["tool_input"] = map[string]string{"command": "*** Begin Patch\n*** Add File: ../sibling/notes.txt\n+hi\n*** Update File: a.txt\n@@\n-a\n+b\n*** End Patch\n"}
	b, err := json.Marshal(m)
	treetest.Must(t, err)
	want := "^snapback: warning: this patch writes " + regexp.QuoteMeta(filepath.Join(filepath.Dir(root), "sibling", "notes.txt")) +
		", outside the project " + regexp.QuoteMeta(root) + ": no undo step holds it$"
	if msg := hook(t, bin, "codex", b); !regexp.MustCompile(want).MatchString(msg) {
		t.Fatalf("a patch writing outside the project: %q, want %s", msg, want)
	}
	if s, _ := checkpointOpen(t, bin, root); s == "" {
		t.Fatal("the patch did not open the turn's checkpoint")
	}
	if msg := hook(t, bin, "codex", golden(t, "codex", "PreToolUse-apply_patch", root)); msg != "" {
		t.Fatalf("a patch inside the project: %q", msg)
	}
}
