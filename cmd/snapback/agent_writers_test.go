//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/internal/watch"
)

// agentShell is an agent of its own: a shell (named agent-X: a harness,
// not a shell, runs the hooks) that runs each hook and each shell
// command it is given as its child, as Claude Code does.
type agentShell struct {
	t    *testing.T
	p    *overlapProject
	name string
	in   io.WriteCloser
	out  *bufio.Reader
	n    int
}

func newAgentShell(t *testing.T, p *overlapProject, name string) *agentShell {
	t.Helper()
	sh, err := exec.LookPath("sh")
	treetest.Must(t, err)
	b, err := os.ReadFile(sh)
	treetest.Must(t, err)
	exe := filepath.Join(t.TempDir(), "agent-"+name)
	treetest.Must(t, os.WriteFile(exe, b, 0o755))
	cmd := exec.Command(exe)
	cmd.Dir = "/"
	for _, kv := range gitEnv() {
		if !strings.HasPrefix(kv, "CLAUDE_PROJECT_DIR=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+testState(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a := &agentShell{t: t, p: p, name: name}
	if a.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	treetest.Must(t, err)
	a.out = bufio.NewReader(stdout)
	cmd.Stderr = os.Stderr
	treetest.Must(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the agent and what its commands left running
		cmd.Wait()
	})
	return a
}

// run has the agent run line, and waits for it.
func (a *agentShell) run(line string) {
	a.t.Helper()
	a.n++
	done := fmt.Sprintf("done-%d", a.n)
	fmt.Fprintf(a.in, "%s\necho %s $?\n", line, done)
	l, err := a.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(l, done+" ") {
		a.t.Fatalf("agent %s: %q: %q, %v", a.name, line, l, err)
	}
	if l != done+" 0\n" {
		a.t.Fatalf("agent %s: %q failed: %s", a.name, line, l)
	}
}

// hook has the agent run the hook with the Claude Code payload name of
// its session, fields set over it, and returns what the user is shown.
func (a *agentShell) hook(name string, fields map[string]any) string {
	a.t.Helper()
	var m map[string]any
	treetest.Must(a.t, json.Unmarshal(golden(a.t, "claude-code", name, a.p.root), &m))
	m["session_id"] = a.name
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	treetest.Must(a.t, err)
	dir := a.t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	treetest.Must(a.t, os.WriteFile(in, b, 0o600))
	a.run(fmt.Sprintf("%s agent hook claude-code < %s > %s", a.p.bin, in, out))
	o, err := os.ReadFile(out)
	treetest.Must(a.t, err)
	return answer(a.t, "claude-code", string(o))
}

// shell is the Bash tool: its PreToolUse hook (pre), then script run by
// sh in the project, the agent's child (exec).
func (a *agentShell) shell(script string, bg bool) {
	a.t.Helper()
	a.pre(script)
	a.exec(script, bg)
}

func (a *agentShell) pre(script string) {
	a.t.Helper()
	if msg := a.hook("PreToolUse-Bash", map[string]any{"tool_input": map[string]any{"command": script}}); msg != "" {
		a.t.Fatalf("%s's shell: %q", a.name, msg)
	}
}

// exec runs script; with bg its process stays (as a server it started
// would): alive when the watcher reads its writes.
func (a *agentShell) exec(script string, bg bool) {
	a.t.Helper()
	if bg {
		a.run(fmt.Sprintf("(cd %s && exec sh -c '%s; : > %s.done; exec sleep 600') & while [ ! -e %s/%s.done ]; do sleep 0.01; done; rm %s/%s.done",
			a.p.root, script, a.name, a.p.root, a.name, a.p.root, a.name))
		return
	}
	a.run(fmt.Sprintf("(cd %s && exec sh -c '%s')", a.p.root, script))
}

func (a *agentShell) stop() string {
	a.t.Helper()
	msg := a.hook("Stop", map[string]any{"stop_hook_active": false})
	m := stepRE.FindStringSubmatch(msg)
	if m == nil {
		a.t.Fatalf("%s's turn end: %q", a.name, msg)
	}
	return m[1]
}

// writersProject is an overlapProject whose watcher runs and tells
// writers (the test fails or skips, as SNAPBACK_REQUIRE says, where it
// cannot: not root, no fanotify), with agents A and B.
func writersProject(t *testing.T) (*overlapProject, *agentShell, *agentShell) {
	t.Helper()
	p := newOverlapProject(t, snapbackBinary(t))
	a, b := newAgentShell(t, p, "A"), newAgentShell(t, p, "B")
	// A turn before, which starts the watcher: the turns to come are
	// watched from their begin.
	a.hook("UserPromptSubmit", map[string]any{"prompt": "warm up"})
	a.shell(": > w.txt", false)
	a.stop()
	store := testStore(t, p.root)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		on, why, err := watch.WriterStatus(store)
		var nv *watch.NotVouchedError
		if errors.As(err, &nv) && time.Now().Before(deadline) {
			continue // still adding its watches
		}
		treetest.Must(t, err)
		if !treetest.Require(t, "fanotify", on, why) {
			t.Skip("SNAPBACK_REQUIRE does not name fanotify: " + why)
		}
		break
	}
	var st struct {
		Writers writersJSON `json:"writers"`
	}
	treetest.Must(t, json.Unmarshal([]byte(sb(t, p.bin, p.root, "--json", "checkpoint", "status")), &st))
	if !st.Writers.On {
		t.Errorf("checkpoint status --json: writers %+v, want on", st.Writers)
	}
	return p, a, b
}

// TestAgentWriters: two agents' turns overlap, each running a shell
// command (no path claimed: any path) that edits files; a third process
// edits another. The fanotify watcher tells whose processes wrote each:
// A's edits are A's step's, B's are B's; the file both wrote, and the
// third's, are shared.
// Undone in either order, each session's files go back to what it found,
// the shared file stays until --include-shared.
func TestAgentWriters(t *testing.T) {
	for _, order := range orders([]string{"A", "B"}) {
		t.Run(strings.Join(order, ""), func(t *testing.T) {
			p, a, b := writersProject(t)
			a.hook("UserPromptSubmit", map[string]any{"prompt": "work of A"})
			b.hook("UserPromptSubmit", map[string]any{"prompt": "work of B"})
			// Both turns are open before either writes.
			cmdA, cmdB := "printf A > a.txt; printf A > a-new.txt; printf A >> c.txt", "printf B > b.txt; printf B > b-new.txt; : > s.txt; printf B >> c.txt"
			a.pre(cmdA)
			b.pre(cmdB)
			a.exec(cmdA, true)
			b.exec(cmdB, true)
			treetest.Write(t, p.root, "g.txt", "G\n", 0o644) // neither agent's
			st := map[string]string{"A": a.stop(), "B": b.stop()}
			steps := p.steps()
			if a, b := steps[st["A"]], steps[st["B"]]; !slices.Equal(a.Shared, []string{"c.txt", "g.txt"}) || !slices.Equal(b.Shared, []string{"c.txt", "g.txt"}) {
				t.Errorf("shared: A %q, B %q, want c.txt (both wrote it) and g.txt", a.Shared, b.Shared)
			}
			for _, s := range order {
				var out revertJSON
				treetest.Must(t, json.Unmarshal([]byte(sb(t, p.bin, p.root, "--json", "undo", st[s])), &out))
				if out.LeftShared == nil || !slices.Equal(out.LeftShared.Paths, []string{"c.txt", "g.txt"}) {
					t.Errorf("undo of %s left %+v, want c.txt and g.txt", s, out.LeftShared)
				}
				// The other's files are as it left them.
				want := map[string]map[string]string{
					"A": {"b.txt": "B", "b-new.txt": "B", "s.txt": ""}, // B emptied s.txt
					"B": {"a.txt": "A", "a-new.txt": "A"},
				}[s]
				if s != order[0] {
					break
				}
				for f, w := range want {
					if got := p.read(f); got != w {
						t.Errorf("after undoing %s alone: %s is %q, want %q", s, f, got, w)
					}
				}
			}
			for f, want := range map[string]string{"a.txt": "0\n", "b.txt": "0\n", "s.txt": "0\n", "a-new.txt": "", "b-new.txt": "", "g.txt": "G\n", "c.txt": "0\nAB"} {
				if got := p.read(f); got != want {
					t.Errorf("after both undos: %s is %q, want %q", f, got, want)
				}
			}
		})
	}
}

// TestAgentWritersGone: a writer gone (reaped) before the watcher read
// its event (the watcher is stopped meanwhile) is told from its exit
// (the process connector): A's. A process A's command left behind, its
// parent gone before it writes (a daemon: init's child then), is no
// session's: what it writes is shared, as is what a process of neither
// writes.
func TestAgentWritersGone(t *testing.T) {
	p, a, b := writersProject(t)
	a.hook("UserPromptSubmit", map[string]any{"prompt": "work of A"})
	b.hook("UserPromptSubmit", map[string]any{"prompt": "work of B"})
	a.pre("printf A > a.txt")
	b.pre("printf B > b.txt")
	a.exec("printf A > a.txt", true)
	b.exec("printf B > b.txt", true)
	w := watch.Pid(testStore(t, p.root))
	treetest.Stop(t, w)
	a.run(fmt.Sprintf("(cd %s && exec sh -c 'printf A > c.txt')", p.root)) // gone, and reaped
	treetest.Must(t, syscall.Kill(w, syscall.SIGCONT))
	// The daemon waits until its parent is gone (it has another then)
	// before writing.
	a.run(fmt.Sprintf(`cd %s && sh -c 'sh -c "while read -r x x x pp x < /proc/\$\$/stat; [ \$pp = $$ ]; do sleep 0.01; done; printf A > d.txt; : > d.done; exec sleep 600" &'; while [ ! -e d.done ]; do sleep 0.01; done; cd /`, p.root))
	st := map[string]string{"A": a.stop(), "B": b.stop()}
	steps := p.steps()
	sa, sbb := steps[st["A"]], steps[st["B"]]
	if !slices.Equal(sa.Shared, []string{"d.done", "d.txt"}) || !slices.Equal(sbb.Shared, []string{"d.done", "d.txt"}) {
		t.Errorf("shared: A %q, B %q, want d.done and d.txt", sa.Shared, sbb.Shared)
	}
	treetest.Must(t, json.Unmarshal([]byte(sb(t, p.bin, p.root, "--json", "undo", st["A"])), new(revertJSON)))
	for f, want := range map[string]string{"a.txt": "0\n", "c.txt": "0\n", "b.txt": "B", "d.txt": "A"} {
		if got := p.read(f); got != want {
			t.Errorf("after undoing A: %s is %q, want %q", f, got, want)
		}
	}
}

// TestAgentWritersBesideAPerson: a checkpoint whose agent is not known
// (begun at a terminal: its nearest non-shell ancestor is `script`, as
// a login's would be) is open beside agent A's turn. What A's shell
// command writes is shared, not A's alone: the person's processes may
// be an agent's ancestors, and whatever they ran is not told apart.
func TestAgentWritersBesideAPerson(t *testing.T) {
	p, a, _ := writersProject(t)
	person := func(args string) {
		t.Helper()
		cmd := exec.Command("script", "-qec", fmt.Sprintf("%s -C %s %s", p.bin, p.root, args), "/dev/null")
		cmd.Env = testEnv(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("script %s: %v\n%s", args, err, out)
		}
	}
	person("checkpoint begin --session P")
	a.hook("UserPromptSubmit", map[string]any{"prompt": "work of A"})
	a.shell("printf A > a.txt", false)
	stA := a.stop()
	person("checkpoint end --session P")
	if s := p.steps()[stA]; !slices.Contains(s.Shared, "a.txt") {
		t.Errorf("A's step: shared %q, want a.txt (a checkpoint with no known agent was open beside it)", s.Shared)
	}
}
