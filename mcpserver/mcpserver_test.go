package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves New(o) to the SDK's client over an in-memory pipe.
func connect(t *testing.T, o Options) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(o).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, c.(*mcp.TextContent).Text)
	}
	return strings.Join(parts, "\n")
}

// fakeSnapback writes a shell script standing in for the snapback binary.
// It is a fake for what the real binary does not do on purpose: crash
// with a panic, or write what is not JSON (cmd/snapback's TestMCP runs
// the real one). It also records its arguments in args.txt.
func fakeSnapback(t *testing.T, body string) (exe, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	exe, argsFile = filepath.Join(dir, "snapback"), filepath.Join(dir, "args.txt")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\n" + body + "\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe, argsFile
}

// TestVerbFailures: whatever the verb does, the call gets a result and
// the server lives on: a crash without an error object is a tool error
// that says so and carries the verb's stderr; output that is not JSON is
// one too; the CLI's notes on stderr come along with a result.
func TestVerbFailures(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body string
		isError    bool
		want       []string
	}{
		{"panic", "echo 'panic: runtime error' >&2; echo 'goroutine 1 [running]:' >&2; exit 2", true,
			[]string{"snapback status: exit status 2, without an error object", "panic: runtime error\ngoroutine 1"}},
		{"not json", "echo 'hello'", true, []string{"snapback status: its output is not a JSON object"}},
		{"killed", "kill -9 $$", true, []string{"snapback status: signal: killed, without an error object"}},
		{"error object", `echo 'snapback: warning: a note' >&2; echo '{"version":1,"error":"locked","message":"the store is locked by pid 7"}' >&2; exit 2`,
			true, []string{"the store is locked by pid 7", "snapback: warning: a note"}},
		{"result with a note", `echo 'snapback: warning: a note' >&2; printf '{\n  "version": 1,\n  "runs": []\n}\n'`,
			false, []string{`{"version":1,"runs":[]}`, "snapback: warning: a note"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, _ := fakeSnapback(t, tc.body)
			cs := connect(t, Options{Exe: exe, Dir: t.TempDir()})
			for range 2 { // the second call: the server is still there
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "status", Arguments: map[string]any{}})
				if err != nil {
					t.Fatal(err)
				}
				if res.IsError != tc.isError {
					t.Fatalf("isError %v, want %v: %s", res.IsError, tc.isError, resultText(res))
				}
				text := resultText(res)
				for _, w := range tc.want {
					if !strings.Contains(text, w) {
						t.Fatalf("result %q lacks %q", text, w)
					}
				}
				b, _ := json.Marshal(res.StructuredContent)
				var v struct{ Version int }
				if json.Unmarshal(b, &v) != nil || v.Version != 1 {
					t.Fatalf("structured content %s lacks \"version\": 1", b)
				}
			}
		})
	}
}

// TestArguments: each tool's input becomes the verb's arguments: global
// flags first, the verb's flags, then "--" and the ids and paths, a first
// path that could be read as an id made ./PATH; dir is relative to the
// server's directory.
func TestArguments(t *testing.T) {
	ctx := context.Background()
	exe, argsFile := fakeSnapback(t, `echo '{"version":1}'`)
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "sub", "d13"), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, Options{Exe: exe, Dir: base})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want []string // after --json -C DIR
		dir  string
	}{
		{"status", nil, []string{"status"}, base},
		{"list", map[string]any{"all": true, "dir": "sub"}, []string{"list", "--all"}, filepath.Join(base, "sub")},
		{"diff", map[string]any{"paths": []string{"src", "/abs"}, "patch": true}, []string{"diff", "--patch", "--", "src", "/abs"}, base},
		{"diff", map[string]any{"id": "aadd13", "paths": []string{"src"}, "stat": true}, []string{"diff", "--stat", "aadd13", "--", "src"}, base},
		{"diff", map[string]any{"id": "aadd13"}, []string{"diff", "aadd13"}, base},
		{"commit", map[string]any{"paths": []string{"d13", "/abs", "./x"}, "force": true}, []string{"commit", "--force", "--", "./d13", "/abs", "./x"}, base},
		{"commit", map[string]any{"id": "aadd13", "paths": []string{"-src"}}, []string{"commit", "--", "aadd13", "-src"}, base},
		{"diff", map[string]any{"paths": []string{"-C/"}}, []string{"diff", "--", "-C/"}, base},
		{"commit", map[string]any{"id": "aadd13"}, []string{"commit", "--", "aadd13"}, base},
		{"discard", map[string]any{"id": "aadd13"}, []string{"discard", "--", "aadd13"}, base},
		{"undo", map[string]any{"session": "s1", "force": true}, []string{"undo", "--force", "--session=s1"}, base},
		{"undo", map[string]any{"id": "aadd13"}, []string{"undo", "--", "aadd13"}, base},
		{"redo", map[string]any{}, []string{"redo"}, base},
		{"checkpoint", map[string]any{"action": "begin", "message": "fix the tests", "session": "s1"}, []string{"checkpoint", "begin", "--message=fix the tests", "--session=s1"}, base},
		{"checkpoint", map[string]any{"action": "end", "session": "s1"}, []string{"checkpoint", "end", "--session=s1"}, base},
		{"checkpoint", map[string]any{"action": "status"}, []string{"checkpoint", "status"}, base},
		{"checkpoint", map[string]any{"action": "begin", "message": "-m --json", "session": "-x"}, []string{"checkpoint", "begin", "--message=-m --json", "--session=-x"}, base},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil || res.IsError {
			t.Fatalf("%s %v: %v %s", tc.tool, tc.args, err, resultText(res))
		}
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		want := append([]string{"--json", "-C", tc.dir}, tc.want...)
		if !slices.Equal(got, want) {
			t.Errorf("%s %v ran snapback %q, want %q", tc.tool, tc.args, got, want)
		}
	}
	// Refused before any verb runs: a dir that is no directory, and an
	// id of commit that the CLI would read as a path (sub/d13 exists).
	os.Remove(argsFile)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"status", map[string]any{"dir": "nowhere"}, "dir " + filepath.Join(base, "nowhere") + ": not a directory"},
		{"commit", map[string]any{"dir": "sub", "id": "d13"}, "id d13 is also the name of a file in " + filepath.Join(base, "sub")},
		// An id that a command line would read as a flag: --stat gave
		// the default diff, -C/ ran diff in /.
		{"diff", map[string]any{"id": "--stat"}, `id "--stat": not an id`},
		{"diff", map[string]any{"id": "-C/"}, `id "-C/": not an id`},
		{"diff", map[string]any{"id": "a/../b"}, `id "a/../b": not an id`},
		{"undo", map[string]any{"id": "-aadd13"}, `id "-aadd13": not an id`},
		{"discard", map[string]any{"id": strings.Repeat("a", 65)}, "id "},
		{"undo", map[string]any{"session": " s"}, `session " s": space at an end`},
		{"checkpoint", map[string]any{"action": "begin", "message": "a\x00b"}, `message "a\x00b": a NUL byte`},
		{"diff", map[string]any{"paths": []string{""}}, "paths: an empty path"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil || !res.IsError || !strings.HasPrefix(resultText(res), tc.want) {
			t.Fatalf("%s %v: %v %q, want a tool error %q", tc.tool, tc.args, err, resultText(res), tc.want)
		}
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Fatal("a refused call ran the verb")
	}
}

// TestReadOnly: --read-only serves the reading tools only, and a call of
// another is refused without running anything.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	exe, argsFile := fakeSnapback(t, `echo '{"version":1}'`)
	cs := connect(t, Options{Exe: exe, Dir: t.TempDir(), ReadOnly: true})
	if c := cs.InitializeResult().Capabilities; c.Tools == nil || c.Logging != nil {
		t.Errorf("capabilities: tools %v, logging %v; want tools only", c.Tools, c.Logging)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if !tool.Annotations.ReadOnlyHint {
			t.Errorf("%s is not marked read-only", tool.Name)
		}
	}
	if slices.Sort(names); !slices.Equal(names, []string{"diff", "list", "status"}) {
		t.Fatalf("tools %v", names)
	}
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "undo", Arguments: map[string]any{}}); err == nil {
		t.Fatalf("undo in read-only mode: %s", resultText(r))
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Fatal("a refused call ran the verb")
	}
}

// realSnapback builds the snapback binary into a temp dir, and a project
// with a store and one snapshot.
func realSnapback(b *testing.B) (exe, root string) {
	b.Helper()
	dir := b.TempDir()
	exe, root = filepath.Join(dir, "snapback"), filepath.Join(dir, "p")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/snapback/snapback/cmd/snapback").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "src"), 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(root, "src", fmt.Sprintf("f%d.txt", i)), []byte("x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command(exe, "-C", root, "snap").CombinedOutput(); err != nil {
		b.Fatalf("snap: %v\n%s", err, out)
	}
	return exe, root
}

// BenchmarkToolCall: a list call through the server (the protocol, then
// the verb's process), against BenchmarkVerb, the same verb run directly.
func BenchmarkToolCall(b *testing.B) {
	exe, root := realSnapback(b)
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{Exe: exe, Dir: root}).Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	b.ResetTimer()
	for range b.N {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			b.Fatal(err, resultText(res))
		}
	}
}

func BenchmarkVerb(b *testing.B) {
	exe, root := realSnapback(b)
	b.ResetTimer()
	for range b.N {
		if out, err := exec.Command(exe, "--json", "-C", root, "list").CombinedOutput(); err != nil {
			b.Fatalf("list: %v\n%s", err, out)
		}
	}
}

// TestConfined: the server acts only in the project it serves and in the
// roots its client declares. A dir elsewhere (absolute, climbing out with
// "..", a symbolic link out, the project's name as a prefix of another's)
// is a tool error naming it, and runs nothing: `undo {"dir":
// "/other/project"}` reverted another project.
func TestConfined(t *testing.T) {
	ctx := context.Background()
	exe, argsFile := fakeSnapback(t, `echo '{"version":1}'`)
	base := t.TempDir()
	proj, other, extra := filepath.Join(base, "proj"), filepath.Join(base, "other"), filepath.Join(base, "extra")
	for _, d := range []string{filepath.Join(proj, "sub"), other, proj + "x", extra} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(other, filepath.Join(proj, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(proj, "sub"), filepath.Join(other, "in")); err != nil {
		t.Fatal(err)
	}
	o := Options{Exe: exe, Dir: filepath.Join(proj, "sub"), Root: proj}
	refused := func(cs *mcp.ClientSession, dir string) {
		t.Helper()
		os.Remove(argsFile)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "undo", Arguments: map[string]any{"dir": dir}})
		if err != nil || !res.IsError || !strings.Contains(resultText(res), "outside the project "+proj) || !strings.Contains(resultText(res), "dir ") {
			t.Fatalf("undo in %s: %v %q, want a tool error naming the directory", dir, err, resultText(res))
		}
		if _, err := os.Stat(argsFile); err == nil {
			t.Fatalf("undo in %s ran the verb", dir)
		}
	}
	served := func(cs *mcp.ClientSession, dir, want string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "undo", Arguments: map[string]any{"dir": dir}})
		if err != nil || res.IsError {
			t.Fatalf("undo in %s: %v %s", dir, err, resultText(res))
		}
		b, _ := os.ReadFile(argsFile)
		if got := strings.Split(string(b), "\n"); len(got) < 3 || got[2] != want {
			t.Fatalf("undo in %s ran snapback %q, want -C %s", dir, got, want)
		}
	}

	cs := connect(t, o) // the SDK's client: roots declared, none listed
	for _, dir := range []string{other, "../../other", "../..", "../out", proj + "x", "/", filepath.Join(extra)} {
		refused(cs, dir)
	}
	served(cs, "", filepath.Join(proj, "sub"))
	served(cs, "..", proj)
	served(cs, proj, proj)
	served(cs, filepath.Join(other, "in"), filepath.Join(proj, "sub")) // a link into the project: where it leads

	// A client declaring a root: served there too, and nowhere else.
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(o).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	client.AddRoots(&mcp.Root{URI: "file://" + extra})
	cs2, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	served(cs2, extra, extra)
	served(cs2, "", filepath.Join(proj, "sub"))
	refused(cs2, other)
}

// TestConfinedProjectAboveRoot: a dir in the root served whose project
// root, found from it as the verb finds it, lies above that root — a
// directory with no marker of its own inside a parent's git work tree —
// runs nothing: the verb would act on the parent. With a marker of its
// own, it is served.
func TestConfinedProjectAboveRoot(t *testing.T) {
	ctx := context.Background()
	exe, argsFile := fakeSnapback(t, `echo '{"version":1}'`)
	parent := t.TempDir()
	proj, extra := filepath.Join(parent, "proj"), filepath.Join(parent, "extra")
	for _, d := range []string{filepath.Join(parent, ".git"), filepath.Join(proj, "sub"), extra} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	call := func(cs *mcp.ClientSession, dir string) (*mcp.CallToolResult, bool) {
		t.Helper()
		os.Remove(argsFile)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "undo", Arguments: map[string]any{"dir": dir}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(argsFile)
		return res, err == nil
	}
	// The root served, and a root the client declares.
	cs := connect(t, Options{Exe: exe, Dir: proj, Root: proj})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(Options{Exe: exe, Dir: filepath.Join(parent, ".git"), Root: filepath.Join(parent, ".git")}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	client.AddRoots(&mcp.Root{URI: "file://" + extra})
	cs2, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	for _, c := range []struct {
		cs  *mcp.ClientSession
		dir string
	}{{cs, ""}, {cs, "sub"}, {cs, proj}, {cs2, extra}} {
		res, ran := call(c.cs, c.dir)
		if ran || !res.IsError || !strings.Contains(resultText(res), "its project root "+parent+" is outside") {
			t.Errorf("undo in %q: ran %v, %q; want a tool error naming the project root above", c.dir, ran, resultText(res))
		}
	}
	// A marker of its own makes it its own project.
	for _, d := range []string{proj, extra} {
		if err := os.WriteFile(filepath.Join(d, "snapback.toml"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		cs  *mcp.ClientSession
		dir string
	}{{cs, "sub"}, {cs2, extra}} {
		if res, ran := call(c.cs, c.dir); !ran || res.IsError {
			t.Errorf("undo in %q with a marker: ran %v, %q", c.dir, ran, resultText(res))
		}
	}
}
