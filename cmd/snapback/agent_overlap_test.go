//go:build linux

package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// overlapProject is a git repository with a SQLite target in which agent
// sessions' turns overlap, driven through the hooks with the harnesses'
// own payloads (testdata/hooks), as TestAgentSession drives one.
type overlapProject struct {
	t         *testing.T
	bin, root string
	db        string
}

func newOverlapProject(t *testing.T, bin string) *overlapProject {
	t.Helper()
	root := filepath.Join(t.TempDir(), "repo")
	for _, f := range []string{"a.txt", "b.txt", "c.txt", "s.txt", "g.txt"} {
		treetest.Write(t, root, f, "0\n", 0o644)
	}
	treetest.Write(t, root, ".gitignore", "/db/\n", 0o644)
	treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"app\"\nbackend = \"sqlite\"\npath = \"db/app.db\"\n", 0o644)
	db := filepath.Join(root, "db", "app.db")
	treetest.Must(t, os.MkdirAll(filepath.Dir(db), 0o755))
	sqlExec(t, db, `CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('zero')`)
	git(t, root, "init", "-q")
	git(t, root, "add", "-A")
	git(t, root, "commit", "-q", "-m", "initial")
	return &overlapProject{t: t, bin: bin, root: root, db: db}
}

// send feeds the harness's golden payload name, for session, with fields
// set over it.
func (p *overlapProject) send(harness, name, session string, fields map[string]any) string {
	p.t.Helper()
	var m map[string]any
	treetest.Must(p.t, json.Unmarshal(golden(p.t, harness, name, p.root), &m))
	m["session_id"] = session
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	treetest.Must(p.t, err)
	return hook(p.t, p.bin, harness, b)
}

func harnessOf(session string) string {
	if strings.HasPrefix(session, "gemini") {
		return "gemini-cli"
	}
	return "claude-code"
}

func (p *overlapProject) prompt(session string) {
	p.t.Helper()
	name := "UserPromptSubmit"
	if harnessOf(session) == "gemini-cli" {
		name = "BeforeAgent"
	}
	if msg := p.send(harnessOf(session), name, session, map[string]any{"prompt": "work of " + session}); msg != "" {
		p.t.Fatalf("%s's prompt: %q", session, msg)
	}
}

// edit is an edit tool's call (Claude Code's Edit, Gemini CLI's
// write_file) naming rel, then the tool's write.
func (p *overlapProject) edit(session, rel, content string) {
	p.t.Helper()
	name, input := "PreToolUse-Edit", map[string]any{"file_path": filepath.Join(p.root, rel), "old_string": "0", "new_string": content}
	if harnessOf(session) == "gemini-cli" {
		name, input = "BeforeTool-write_file", map[string]any{"file_path": filepath.Join(p.root, rel), "content": content}
	}
	if msg := p.send(harnessOf(session), name, session, map[string]any{"tool_input": input}); msg != "" {
		p.t.Fatalf("%s's edit of %s: %q", session, rel, msg)
	}
	treetest.Write(p.t, p.root, rel, content, 0o644)
}

// shell is Claude Code's Bash tool running script in the project.
func (p *overlapProject) shell(session, script string) {
	p.t.Helper()
	if msg := p.send("claude-code", "PreToolUse-Bash", session, map[string]any{"tool_input": map[string]any{"command": script}}); msg != "" {
		p.t.Fatalf("%s's shell: %q", session, msg)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir, cmd.Env = p.root, gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// stop ends session's turn and returns its undo step ("" for none).
func (p *overlapProject) stop(session string) string {
	p.t.Helper()
	name := "Stop"
	if harnessOf(session) == "gemini-cli" {
		name = "AfterAgent"
	}
	msg := p.send(harnessOf(session), name, session, map[string]any{"stop_hook_active": false})
	if msg == "" {
		return ""
	}
	m := stepRE.FindStringSubmatch(msg)
	if m == nil {
		p.t.Fatalf("%s's turn end: %q", session, msg)
	}
	return m[1]
}

func (p *overlapProject) read(rel string) string {
	b, err := os.ReadFile(filepath.Join(p.root, rel))
	if os.IsNotExist(err) {
		return ""
	}
	treetest.Must(p.t, err)
	return string(b)
}

// rows is the target database's rows.
func (p *overlapProject) rows() string {
	p.t.Helper()
	h, err := sql.Open("sqlite", "file:"+p.db+"?mode=ro&_pragma=busy_timeout(10000)")
	treetest.Must(p.t, err)
	defer h.Close()
	var v string
	treetest.Must(p.t, h.QueryRow(`SELECT group_concat(v) FROM t`).Scan(&v))
	return v
}

// steps reads the history's checkpoints by id.
func (p *overlapProject) steps() map[string]snapshotJSON {
	p.t.Helper()
	var l struct{ Snapshots []snapshotJSON }
	treetest.Must(p.t, json.Unmarshal([]byte(sb(p.t, p.bin, p.root, "--json", "list")), &l))
	out := map[string]snapshotJSON{}
	for _, s := range l.Snapshots {
		out[s.ID] = s
	}
	return out
}

// orders lists every order of xs.
func orders(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{slices.Clone(xs)}
	}
	var out [][]string
	for i, x := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, o := range orders(rest) {
			out = append(out, append([]string{x}, o...))
		}
	}
	return out
}

// TestAgentOverlapTwo: two Claude Code sessions' turns overlap. B edits
// b.txt with its Edit tool; A edits a.txt, then runs a shell command
// that changes s.txt, commits it in git and writes the SQLite target;
// after A's shell command began, B edits c.txt. Each step holds its
// session's paths: A's a.txt, s.txt, .git and the database; B's b.txt;
// c.txt, changed while A's shell could reach anything, is shared by
// both. Undone in either order, each session's files go back to what it
// found and the other's stay as it left them; c.txt stays, named, until
// --include-shared.
func TestAgentOverlapTwo(t *testing.T) {
	bin := snapbackBinary(t)
	for _, order := range orders([]string{"A", "B"}) {
		t.Run(strings.Join(order, ""), func(t *testing.T) {
			p := newOverlapProject(t, bin)
			head0 := git(t, p.root, "rev-parse", "HEAD")
			p.prompt("A")
			p.prompt("B")
			p.edit("B", "b.txt", "B\n")
			p.edit("A", "a.txt", "A\n")
			p.shell("A", "printf 'A\\n' > s.txt && git add s.txt && git commit -qm 'A commits'")
			sqlExec(t, p.db, `INSERT INTO t VALUES ('A')`) // what A's shell did to the database
			p.edit("B", "c.txt", "B\n")
			st := map[string]string{"A": p.stop("A"), "B": p.stop("B")}
			headA := git(t, p.root, "rev-parse", "HEAD")

			steps := p.steps()
			a, b := steps[st["A"]], steps[st["B"]]
			if !slices.Equal(a.Shared, []string{"c.txt"}) || !slices.Equal(b.Shared, []string{"c.txt"}) {
				t.Errorf("shared: A %q, B %q", a.Shared, b.Shared)
			}
			if len(a.SharedTargets) != 0 || !slices.Equal(b.SharedTargets, []string{"app"}) {
				t.Errorf("shared targets: A %q, B %q (A's shell alone could write the database)", a.SharedTargets, b.SharedTargets)
			}
			if !slices.Equal(a.Overlaps, []string{st["B"]}) || !slices.Equal(b.Overlaps, []string{st["A"]}) {
				t.Errorf("overlaps: A %q, B %q", a.Overlaps, b.Overlaps)
			}
			list := sb(t, bin, p.root, "list")
			if !strings.Contains(list, `[overlapped 1 other session turn(s); 1 shared: c.txt]`) {
				t.Errorf("list does not show the overlap:\n%s", list)
			}
			if show := sb(t, bin, p.root, "show", "--stat", st["B"]); !strings.Contains(show, "\nBeside:  "+st["A"]+" (") ||
				!strings.Contains(show, "\nShared:  c.txt\n") || !strings.Contains(show, "\nShared:  target app\n") {
				t.Errorf("show of B's step does not say what it shares:\n%s", show)
			}
			var status struct {
				Shared []sharedStepJSON
			}
			treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, p.root, "--json", "status")), &status))
			if len(status.Shared) != 2 {
				t.Errorf("status --json: %+v, want both steps sharing c.txt", status.Shared)
			}

			for _, s := range order {
				var out revertJSON
				treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, p.root, "--json", "undo", st[s])), &out))
				if out.LeftShared == nil || !slices.Equal(out.LeftShared.Paths, []string{"c.txt"}) {
					t.Errorf("undo of %s left %+v, want c.txt", s, out.LeftShared)
				}
			}
			for f, want := range map[string]string{"a.txt": "0\n", "b.txt": "0\n", "s.txt": "0\n", "c.txt": "B\n"} {
				if got := p.read(f); got != want {
					t.Errorf("after both undos: %s is %q, want %q", f, got, want)
				}
			}
			if h := git(t, p.root, "rev-parse", "HEAD"); h != head0 {
				t.Errorf("HEAD after both undos: %s, want %s (A's commit undone)", h, head0)
			}
			if got := p.rows(); got != "zero" {
				t.Errorf("the database after both undos: %q, want A's row gone", got)
			}
			sb(t, bin, p.root, "redo")
			sb(t, bin, p.root, "redo")
			if p.read("a.txt") != "A\n" || p.read("b.txt") != "B\n" || git(t, p.root, "rev-parse", "HEAD") != headA {
				t.Errorf("after redo twice: a %q b %q", p.read("a.txt"), p.read("b.txt"))
			}
		})
	}
}

// TestAgentOverlapOneUndone: undoing one session's turn while the other's
// stays leaves the other's files exactly as it left them, and
// --include-shared takes the shared path too.
func TestAgentOverlapOneUndone(t *testing.T) {
	bin := snapbackBinary(t)
	for _, s := range []string{"A", "B"} {
		t.Run(s, func(t *testing.T) {
			p := newOverlapProject(t, bin)
			p.prompt("A")
			p.prompt("B")
			p.edit("A", "a.txt", "A\n")
			p.edit("B", "b.txt", "B\n")
			p.shell("B", "printf 'B\\n' > s.txt")
			p.edit("A", "c.txt", "A\n") // beside B's shell: shared
			st := map[string]string{"A": p.stop("A"), "B": p.stop("B")}
			other := map[string]string{"A": "B", "B": "A"}[s]
			mine := map[string][]string{"A": {"a.txt"}, "B": {"b.txt", "s.txt"}}
			sb(t, bin, p.root, "undo", st[s])
			for _, f := range mine[s] {
				if p.read(f) != "0\n" {
					t.Errorf("undo of %s: its %s is %q", s, f, p.read(f))
				}
			}
			for _, f := range mine[other] {
				if p.read(f) != other+"\n" {
					t.Errorf("undo of %s changed %s's %s: %q", s, other, f, p.read(f))
				}
			}
			if p.read("c.txt") != "A\n" {
				t.Errorf("undo of %s reverted the shared c.txt", s)
			}
			sb(t, bin, p.root, "redo")
			sb(t, bin, p.root, "undo", "--include-shared", st[s])
			if p.read("c.txt") != "0\n" {
				t.Errorf("undo --include-shared of %s left c.txt %q", s, p.read("c.txt"))
			}
		})
	}
}

// TestAgentOverlapThree: three sessions, two of Claude Code and one of
// Gemini CLI, overlap with edit tools only; two of them edit g.txt in
// the same span, which is shared by both; the third's turn begins and
// ends inside the others'. Undone in every order (undo --session), each
// session's files go back to what it found, the others' stay.
func TestAgentOverlapThree(t *testing.T) {
	bin := snapbackBinary(t)
	sessions := []string{"A", "B", "gemini-C"}
	files := map[string]string{"A": "a.txt", "B": "b.txt", "gemini-C": "c.txt"}
	for _, order := range orders(sessions) {
		t.Run(strings.Join(order, "-"), func(t *testing.T) {
			p := newOverlapProject(t, bin)
			for _, s := range sessions {
				p.prompt(s)
			}
			p.edit("A", "a.txt", "A\n")
			p.edit("B", "g.txt", "B\n")
			p.edit("gemini-C", "c.txt", "C\n")
			if p.stop("gemini-C") == "" {
				t.Fatal("C's turn left no step")
			}
			p.edit("A", "g.txt", "A\n")
			p.edit("B", "b.txt", "B\n")
			p.stop("B")
			p.stop("A")
			for i, s := range order {
				sb(t, bin, p.root, "undo", "--session", s)
				for _, o := range sessions {
					want := o[len(o)-1:] + "\n"
					if slices.Contains(order[:i+1], o) {
						want = "0\n"
					}
					if got := p.read(files[o]); got != want {
						t.Errorf("after undo of %q: %s's %s is %q, want %q", order[:i+1], o, files[o], got, want)
					}
				}
				if p.read("g.txt") != "A\n" {
					t.Errorf("after undo of %q: the shared g.txt is %q", order[:i+1], p.read("g.txt"))
				}
			}
		})
	}
}
