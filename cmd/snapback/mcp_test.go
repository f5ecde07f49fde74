//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
)

// mcpClient starts `snapback mcp` (with args) in root as a subprocess, as
// a harness does, and connects the SDK's client to it over stdio.
func mcpClient(t *testing.T, ctx context.Context, bin, root string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-C", root, "mcp"}, args...)...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "snapback-test", Version: "v0"}, nil)
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to snapback mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// toolNames lists the tools the server offers, sorted.
func toolNames(t *testing.T, ctx context.Context, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
	}
	slices.Sort(names)
	return names
}

// call calls a tool and returns its result; wantErr says whether it must
// be a tool error. The result's text is the CLI's JSON, which is decoded
// into out (when not nil) and must carry "version": 1.
func call(t *testing.T, ctx context.Context, s *mcp.ClientSession, name string, args map[string]any, wantErr bool, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if res.IsError != wantErr {
		t.Fatalf("%s %v: isError %v, want %v: %s", name, args, res.IsError, wantErr, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Version int `json:"version"`
	}
	// Every result is the CLI's JSON; so is every error but those the
	// SDK makes itself, refusing arguments its schema does not allow.
	if err := json.Unmarshal(b, &v); (err != nil || v.Version != 1) && (!wantErr || res.StructuredContent != nil) {
		t.Fatalf("%s: structured content %s lacks \"version\": 1", name, b)
	}
	if !wantErr && !json.Valid([]byte(res.Content[0].(*mcp.TextContent).Text)) {
		t.Fatalf("%s: text is not the JSON result: %s", name, text(res))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", name, err, b)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// cliJSON runs the CLI with --json and returns its last stderr line (run's
// result, or an error object) and stdout.
func cliJSON(t *testing.T, bin, root string, args ...string) (stdout, lastErr string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-C", root, "--json"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Run() // the status is the caller's to judge from the output
	lines := strings.Split(strings.TrimSpace(e.String()), "\n")
	return o.String(), lines[len(lines)-1]
}

// TestMCP drives `snapback mcp` through the protocol with the SDK's
// client: the tools offered (all, or the reading ones with --read-only),
// then status, list, diff, commit, discard, undo and redo on a project
// holding a committed copy-mode run and a pending overlay run, checking
// the tree after each, and errors as tool errors with the CLI's message.
func TestMCP(t *testing.T) {
	mode := ""
	if ok, _ := overlay.Available(); ok && os.Geteuid() == 0 {
		mode = "overlayfs"
	} else if ok, why := fuse.Available(); ok && os.Geteuid() == 0 {
		mode = "fuse"
	} else if !treetest.Require(t, "overlayfs", false, "no overlay mode as root here: "+why) {
		t.Skip("SNAPBACK_REQUIRE does not name overlayfs, and no overlay mode runs here for a pending run: " + why)
	}
	bin := snapbackBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "a\n", 0o644)
	treetest.Write(t, root, "src/b.txt", "b\n", 0o644)
	treetest.Write(t, root, "docs/c.txt", "c\n", 0o644)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return string(b)
	}
	want := func(step string, files map[string]string) {
		t.Helper()
		for rel, content := range files {
			if got := read(rel); (content == "" && !strings.HasPrefix(got, "(")) || (content != "" && got != content) {
				t.Fatalf("after %s: %s holds %q, want %q", step, rel, got, content)
			}
		}
	}
	var result struct {
		ID       string  `json:"id"`
		Snapshot *string `json:"snapshot"`
		State    string  `json:"state"`
	}
	// An undo step (a copy-mode run), then a pending run (overlay).
	_, last := cliJSON(t, bin, root, "run", "--mode", "copy", "--", "sh", "-c", "echo A > a.txt")
	if err := json.Unmarshal([]byte(last), &result); err != nil || result.Snapshot == nil {
		t.Fatalf("copy run: %v: %s", err, last)
	}
	copyRun := *result.Snapshot
	_, last = cliJSON(t, bin, root, "run", "--mode", mode, "--then", "review", "--",
		"sh", "-c", "echo B > src/b.txt; echo new > src/n.txt; echo C > docs/c.txt")
	if err := json.Unmarshal([]byte(last), &result); err != nil || result.State != "pending" {
		t.Fatalf("%s run: %v: %s", mode, err, last)
	}
	pending := result.ID
	want("the runs", map[string]string{"a.txt": "A\n", "src/b.txt": "b\n", "docs/c.txt": "c\n", "src/n.txt": ""})

	all := []string{"checkpoint", "commit", "diff", "discard", "list", "redo", "status", "undo"}
	reading := []string{"diff", "list", "status"}

	t.Run("read-only", func(t *testing.T) {
		s := mcpClient(t, ctx, bin, root, "--read-only")
		if got := toolNames(t, ctx, s); !slices.Equal(got, reading) {
			t.Fatalf("--read-only offers %v, want %v", got, reading)
		}
		for _, name := range []string{"commit", "discard", "undo"} {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
			if err == nil && !res.IsError {
				t.Fatalf("--read-only: %s was not refused: %s", name, text(res))
			}
		}
		var st struct {
			Runs []struct{ ID string } `json:"runs"`
		}
		call(t, ctx, s, "status", nil, false, &st)
		if len(st.Runs) != 1 || st.Runs[0].ID != pending {
			t.Fatalf("after refused writes, status shows %+v, want the run %s still pending", st.Runs, pending)
		}
		want("refused writes", map[string]string{"a.txt": "A\n", "src/b.txt": "b\n", "src/n.txt": ""})
	})

	s := mcpClient(t, ctx, bin, root)
	if got := toolNames(t, ctx, s); !slices.Equal(got, all) {
		t.Fatalf("tools %v, want %v", got, all)
	}

	// status, list: the pending run and the undo step.
	var st struct {
		Runs []struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Changes int    `json:"changes"`
		} `json:"runs"`
	}
	call(t, ctx, s, "status", nil, false, &st)
	if len(st.Runs) != 1 || st.Runs[0].ID != pending || st.Runs[0].Changes != 3 {
		t.Fatalf("status: %+v, want run %s with 3 changes", st.Runs, pending)
	}
	// From a subdirectory, as the CLI: the root is found from dir.
	call(t, ctx, s, "status", map[string]any{"dir": "src"}, false, &st)
	if len(st.Runs) != 1 || st.Runs[0].ID != pending {
		t.Fatalf("status in dir src: %+v, want run %s", st.Runs, pending)
	}
	var ls struct {
		Snapshots []struct {
			ID   string `json:"id"`
			Kind string `json:"kind"`
		} `json:"snapshots"`
	}
	call(t, ctx, s, "list", nil, false, &ls)
	if len(ls.Snapshots) == 0 || ls.Snapshots[0].ID != copyRun {
		t.Fatalf("list: %+v, want %s first", ls.Snapshots, copyRun)
	}

	// Parallel calls, as the tool calls of one turn arrive: each waits
	// for the store's lock in its own process, and each gets its answer.
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			name := []string{"status", "list", "diff"}[i%3]
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
			if err == nil && res.IsError {
				err = errors.New(text(res))
			}
			errs <- err
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatalf("parallel calls: %v", err)
		}
	}

	// diff: the pending run's changes, and limited to src/.
	type diffOut struct {
		Snapshot string `json:"snapshot"`
		Changes  []struct {
			Path string `json:"path"`
			Op   string `json:"op"`
		} `json:"changes"`
	}
	paths := func(d diffOut) (out []string) {
		for _, c := range d.Changes {
			out = append(out, c.Op+" "+c.Path)
		}
		slices.Sort(out)
		return out
	}
	var d diffOut
	call(t, ctx, s, "diff", nil, false, &d)
	if got := paths(d); d.Snapshot != pending || !slices.Equal(got, []string{"A src/n.txt", "M docs/c.txt", "M src/b.txt"}) {
		t.Fatalf("diff: %s %v", d.Snapshot, got)
	}
	call(t, ctx, s, "diff", map[string]any{"paths": []string{"src"}}, false, &d)
	if got := paths(d); !slices.Equal(got, []string{"A src/n.txt", "M src/b.txt"}) {
		t.Fatalf("diff of src: %v", got)
	}
	var dp struct {
		Changes []struct {
			Path  string `json:"path"`
			Patch string `json:"patch"`
		} `json:"changes"`
	}
	call(t, ctx, s, "diff", map[string]any{"id": pending, "paths": []string{"src/b.txt"}, "patch": true}, false, &dp)
	if len(dp.Changes) != 1 || dp.Changes[0].Path != "src/b.txt" || !strings.Contains(dp.Changes[0].Patch, "-b\n+B\n") {
		t.Fatalf("diff -p of src/b.txt: %+v", dp.Changes)
	}

	// Errors: the CLI's own message, as a tool error; the server lives on.
	res := call(t, ctx, s, "undo", map[string]any{"id": "zzzzzz"}, true, nil)
	_, cliErr := cliJSON(t, bin, root, "undo", "zzzzzz")
	var ce struct{ Message, Hint string }
	if err := json.Unmarshal([]byte(cliErr), &ce); err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(text(res), "\n"); got[0] != ce.Message || !strings.Contains(text(res), ce.Hint) {
		t.Fatalf("undo of an unknown id: %q, want the CLI's message %q and hint %q", text(res), ce.Message, ce.Hint)
	}
	res = call(t, ctx, s, "undo", nil, true, nil) // a run is pending: refused, naming it
	if !strings.Contains(text(res), pending) {
		t.Fatalf("undo while %s is pending: %q does not name it", pending, text(res))
	}
	res = call(t, ctx, s, "status", map[string]any{"dir": "no/such/dir"}, true, nil)
	if !strings.Contains(text(res), "no/such/dir: not a directory") {
		t.Fatalf("status in a missing dir: %q", text(res))
	}
	want("refusals", map[string]string{"a.txt": "A\n", "src/b.txt": "b\n", "docs/c.txt": "c\n", "src/n.txt": ""})

	// commit src/ only, discard the rest.
	var cm struct {
		Run      string `json:"run"`
		Partial  bool   `json:"partial"`
		Snapshot struct {
			ID string `json:"id"`
		} `json:"snapshot"`
	}
	call(t, ctx, s, "commit", map[string]any{"paths": []string{"src"}}, false, &cm)
	if cm.Run != pending || !cm.Partial || cm.Snapshot.ID == "" {
		t.Fatalf("commit src: %+v", cm)
	}
	want("commit src", map[string]string{"src/b.txt": "B\n", "src/n.txt": "new\n", "docs/c.txt": "c\n"})
	var dc struct {
		Discarded string `json:"discarded"`
	}
	call(t, ctx, s, "discard", map[string]any{"id": pending}, false, &dc)
	if dc.Discarded != pending {
		t.Fatalf("discard: %+v", dc)
	}
	want("discard", map[string]string{"src/b.txt": "B\n", "docs/c.txt": "c\n"})
	call(t, ctx, s, "status", nil, false, &st)
	if len(st.Runs) != 0 {
		t.Fatalf("status after discard: %+v", st.Runs)
	}

	// undo twice (the commit, then the copy run), redo once.
	var ud struct {
		Snapshot struct {
			ID string `json:"id"`
		} `json:"snapshot"`
	}
	call(t, ctx, s, "undo", nil, false, &ud)
	if ud.Snapshot.ID != cm.Snapshot.ID {
		t.Fatalf("undo reverted %s, want the commit %s", ud.Snapshot.ID, cm.Snapshot.ID)
	}
	want("undo of the commit", map[string]string{"src/b.txt": "b\n", "src/n.txt": "", "a.txt": "A\n"})
	call(t, ctx, s, "undo", nil, false, &ud)
	if ud.Snapshot.ID != copyRun {
		t.Fatalf("undo reverted %s, want the copy run %s", ud.Snapshot.ID, copyRun)
	}
	want("undo of the copy run", map[string]string{"a.txt": "a\n", "src/b.txt": "b\n"})
	call(t, ctx, s, "redo", nil, false, &ud)
	if ud.Snapshot.ID != copyRun {
		t.Fatalf("redo put back %s, want %s", ud.Snapshot.ID, copyRun)
	}
	want("redo", map[string]string{"a.txt": "A\n", "src/b.txt": "b\n", "src/n.txt": ""})
	// list's all: the pre-undo and pre-redo records only when asked.
	kinds := func(args map[string]any) string {
		var ls struct {
			Snapshots []struct {
				Kind string `json:"kind"`
			} `json:"snapshots"`
		}
		call(t, ctx, s, "list", args, false, &ls)
		var k []string
		for _, m := range ls.Snapshots {
			k = append(k, m.Kind)
		}
		return strings.Join(k, " ")
	}
	if k := kinds(nil); strings.Contains(k, "pre-") {
		t.Fatalf("list: kinds %s, want no pre-undo/pre-redo records", k)
	}
	if k := kinds(map[string]any{"all": true}); !strings.Contains(k, "pre-undo") || !strings.Contains(k, "pre-redo") {
		t.Fatalf("list all: kinds %s, want the pre-undo and pre-redo records too", k)
	}

	// checkpoint: begin, an edit of the "agent", end: one undo step.
	res = call(t, ctx, s, "checkpoint", map[string]any{"action": "middle"}, true, nil)
	if !strings.Contains(text(res), "action") {
		t.Fatalf("checkpoint with a bad action: %q does not name the field", text(res))
	}
	var cb struct {
		ID     string `json:"id"`
		Opened bool   `json:"opened"`
	}
	call(t, ctx, s, "checkpoint", map[string]any{"action": "begin", "message": "turn 1", "session": "s1"}, false, &cb)
	if !cb.Opened {
		t.Fatalf("checkpoint begin: %+v", cb)
	}
	var cs struct {
		Open bool   `json:"open"`
		ID   string `json:"id"`
	}
	call(t, ctx, s, "checkpoint", map[string]any{"action": "status"}, false, &cs)
	if !cs.Open || cs.ID != cb.ID {
		t.Fatalf("checkpoint status: %+v, want %s open", cs, cb.ID)
	}
	treetest.Write(t, root, "docs/e.txt", "agent\n", 0o644)
	res = call(t, ctx, s, "undo", nil, true, nil) // refused while it is open
	var code struct{ Error string }
	b, _ := json.Marshal(res.StructuredContent)
	if json.Unmarshal(b, &code); code.Error != "checkpoint_open" {
		t.Fatalf("undo while a checkpoint is open: %s", b)
	}
	var ckEnd struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	call(t, ctx, s, "checkpoint", map[string]any{"action": "end", "session": "s1"}, false, &ckEnd)
	if ckEnd.State != "done" {
		t.Fatalf("checkpoint end: %+v", ckEnd)
	}
	call(t, ctx, s, "undo", nil, false, &ud)
	if ud.Snapshot.ID != ckEnd.ID {
		t.Fatalf("undo reverted %s, want the checkpoint %s", ud.Snapshot.ID, ckEnd.ID)
	}
	want("undo of the checkpoint", map[string]string{"docs/e.txt": "", "a.txt": "A\n"})

	// Two turns of session s2, reverted at once by undo with session.
	for i, f := range []string{"docs/t1.txt", "docs/t2.txt"} {
		call(t, ctx, s, "checkpoint", map[string]any{"action": "begin", "message": fmt.Sprint("turn ", i+1), "session": "s2"}, false, nil)
		treetest.Write(t, root, f, "turn\n", 0o644)
		call(t, ctx, s, "checkpoint", map[string]any{"action": "end", "session": "s2"}, false, &ckEnd)
		if ckEnd.State != "done" {
			t.Fatalf("checkpoint end of turn %d: %+v", i+1, ckEnd)
		}
	}
	want("two turns", map[string]string{"docs/t1.txt": "turn\n", "docs/t2.txt": "turn\n"})
	var us struct {
		Session   string            `json:"session"`
		Snapshots []json.RawMessage `json:"snapshots"`
	}
	call(t, ctx, s, "undo", map[string]any{"session": "s2"}, false, &us)
	if us.Session != "s2" || len(us.Snapshots) != 2 {
		t.Fatalf("undo of session s2: %+v", us)
	}
	want("undo of session s2", map[string]string{"docs/t1.txt": "", "docs/t2.txt": "", "a.txt": "A\n", "docs/c.txt": "c\n"})
}

// TestMCPWire drives the real `snapback mcp` line by line, as a client
// that makes mistakes would: a line that is not JSON gets a parse error
// and the server goes on (it exited 2, and the agent lost every tool);
// undo in another project, by an absolute dir or by climbing with "..",
// is a tool error naming it, and that project's last step stays done.
func TestMCPWire(t *testing.T) {
	bin := snapbackBinary(t)
	base := t.TempDir()
	proj, other := filepath.Join(base, "proj"), filepath.Join(base, "other")
	treetest.Write(t, proj, "a.txt", "a\n", 0o644)
	treetest.Write(t, other, "b.txt", "b\n", 0o644)
	sb(t, bin, proj, "snap")
	sb(t, bin, other, "snap")
	treetest.Write(t, other, "b.txt", "edited\n", 0o644)
	sb(t, bin, other, "snap")

	cmd := exec.Command(bin, "-C", proj, "mcp")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write: the server is gone: %v", err)
		}
	}
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("snapback mcp ended: %v", cmd.Wait())
			}
			return l
		case <-time.After(time.Minute):
			t.Fatal("no answer from snapback mcp in a minute")
		}
		return ""
	}
	send("this is not JSON")
	if l := next(); !strings.Contains(l, `"code":-32700`) || !strings.Contains(l, `"id":null`) {
		t.Fatalf("a line that is not JSON: answered %s", l)
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if l := next(); !strings.Contains(l, `"id":1,"result"`) {
		t.Fatalf("initialize: %s", l)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	for i, dir := range []string{other, "../other"} {
		b, _ := json.Marshal(dir)
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"undo","arguments":{"dir":%s}}}`, i+2, b))
		if l := next(); !strings.Contains(l, `"isError":true`) || !strings.Contains(l, "outside the project "+proj) {
			t.Fatalf("undo in %s: %s", dir, l)
		}
	}
	if got := readFile(t, filepath.Join(other, "b.txt")); got != "edited\n" {
		t.Fatalf("the other project's b.txt holds %q: an undo reached it", got)
	}
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"diff","arguments":{"id":"--stat"}}}`)
	if l := next(); !strings.Contains(l, `"isError":true`) || !strings.Contains(l, `not an id`) {
		t.Fatalf("diff with id --stat: %s", l)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("snapback mcp after stdin closed: %v", err)
	}
}
