package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
)

func TestMessage(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	for prompt, want := range map[string]string{
		"Fix the bug\nin main.go": "Fix the bug",
		"\n\n   \n  tidy up  \nx": "tidy up",
		"":                        "",
		" \n\t\n":                 "",
		long:                      strings.Repeat("é", 98) + "…",
	} {
		got := Message(prompt)
		if got != want {
			t.Errorf("Message(%.20q) = %q, want %q", prompt, got, want)
		}
		if len(got) > MaxMessage {
			t.Errorf("Message(%.20q) is %d bytes, over %d", prompt, len(got), MaxMessage)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		h           *Harness
		event, tool string
		want        Action
	}{
		{ClaudeCode, "UserPromptSubmit", "", NoteTurn},
		{ClaudeCode, "PreToolUse", "Bash", OpenLazily},
		{ClaudeCode, "PreToolUse", "NotebookEdit", OpenLazily},
		{ClaudeCode, "PreToolUse", "Read", None},
		{ClaudeCode, "PreToolUse", "mcp__fs__write", None},
		{ClaudeCode, "SubagentStop", "", None},
		{ClaudeCode, "Stop", "", Close},
		{ClaudeCode, "StopFailure", "", Close},
		{ClaudeCode, "SessionEnd", "", CloseSession},
		{ClaudeCode, "Notification", "", None},
		{GeminiCLI, "BeforeAgent", "", NoteTurn},
		{GeminiCLI, "BeforeTool", "replace", OpenLazily},
		{GeminiCLI, "BeforeTool", "read_file", None},
		{GeminiCLI, "AfterAgent", "", Close},
		{GeminiCLI, "Stop", "", None},
	} {
		if got := c.h.Decide(&Payload{Event: c.event, Tool: c.tool}); got != c.want {
			t.Errorf("%s %s %s: %v, want %v", c.h.Name, c.event, c.tool, got, c.want)
		}
	}
}

func TestTurnNote(t *testing.T) {
	store := t.TempDir()
	if tn, err := LoadTurn(store, "claude-code", "s/../1"); err != nil || tn.Message != "" {
		t.Fatalf("no note: %+v %v", tn, err)
	}
	if err := SaveTurn(store, Turn{Harness: "claude-code", Session: "s/../1", Message: "fix it"}); err != nil {
		t.Fatal(err)
	}
	if tn, err := LoadTurn(store, "claude-code", "s/../1"); err != nil || tn.Message != "fix it" {
		t.Fatalf("the note read back: %+v %v", tn, err)
	}
	// Another session's note planted under this one's name is refused.
	other := filepath.Join(store, TurnDir, turnName("claude-code", "s2"))
	b, _ := os.ReadFile(filepath.Join(store, TurnDir, turnName("claude-code", "s/../1")))
	if err := os.WriteFile(other, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTurn(store, "claude-code", "s2"); err == nil || !strings.Contains(err.Error(), "not this session's") {
		t.Fatalf("a planted note: %v", err)
	}
	if err := DropTurn(store, "claude-code", "s/../1"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(store, TurnDir)); len(ents) != 1 {
		t.Fatalf("after drop: %v", ents)
	}
	// A note untouched for a month (its session never ended) goes when
	// another is written.
	old := time.Now().Add(-31 * 24 * time.Hour)
	if err := os.Chtimes(other, old, old); err != nil {
		t.Fatal(err)
	}
	if err := SaveTurn(store, Turn{Harness: "gemini-cli", Session: "s3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("a stale note stayed: %v", err)
	}
}

// TestTurnNoteHostile: what is in a note's place is refused at once,
// never waited on or followed: a FIFO (opening it for reading would block
// until a writer came: the agent's tool call would wait for the harness's
// timeout), a symbolic link to a file outside, a huge file; and an agent
// directory that is a symbolic link is not written through.
func TestTurnNoteHostile(t *testing.T) {
	outside := t.TempDir()
	treetest.Write(t, outside, "victim.json", `{"version":1,"harness":"claude-code","session":"s","message":"planted"}`, 0o600)
	for what, plant := range map[string]func(p string) error{
		"a FIFO":          func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"a symbolic link": func(p string) error { return os.Symlink(filepath.Join(outside, "victim.json"), p) },
		"a huge file": func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, 1<<30)
		},
		"a directory": func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		t.Run(what, func(t *testing.T) {
			store := t.TempDir()
			treetest.Must(t, os.Mkdir(filepath.Join(store, TurnDir), 0o700))
			treetest.Must(t, plant(filepath.Join(store, TurnDir, turnName("claude-code", "s"))))
			done := make(chan error, 1)
			go func() { _, err := LoadTurn(store, "claude-code", "s"); done <- err }()
			select {
			case err := <-done:
				if err == nil || strings.Contains(err.Error(), "\n") {
					t.Fatalf("LoadTurn over %s: %v, want a one-line refusal", what, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("LoadTurn over %s blocked", what)
			}
		})
	}
	t.Run("agent is a symbolic link", func(t *testing.T) {
		store := t.TempDir()
		treetest.Must(t, os.Symlink(outside, filepath.Join(store, TurnDir)))
		if err := SaveTurn(store, Turn{Harness: "claude-code", Session: "s", Message: "m"}); err == nil {
			t.Fatal("SaveTurn wrote through a symbolic link")
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("the directory outside changed: %v", ents)
		}
		if _, err := LoadTurn(store, "claude-code", "s"); err == nil {
			t.Fatal("LoadTurn read through a symbolic link")
		}
	})
}

// bare drops what uninstall cannot tell from its own leftovers: empty
// event lists in "hooks", and "hooks" when that leaves it empty.
func bare(doc *node) *node {
	if doc.kind != '{' {
		return doc
	}
	if hooks := doc.get("hooks"); hooks != nil && hooks.kind == '{' {
		for i := 0; i < len(hooks.keys); i++ {
			if v := hooks.vals[i]; v.kind == '[' && len(v.elems) == 0 {
				hooks.del(hooks.keys[i])
				i--
			}
		}
		if len(hooks.keys) == 0 {
			doc.del("hooks")
		}
	}
	return doc
}

// filled counts the empty containers install fills (and uninstall, left
// with an empty one, removes): an empty file or root, an empty "hooks",
// an empty event list.
func filled(h *Harness, doc *node) int {
	if doc.start < 0 || len(doc.keys) == 0 {
		return 1
	}
	hooks := doc.get("hooks")
	if hooks == nil {
		return 0
	}
	if len(hooks.keys) == 0 {
		return 1
	}
	n := 0
	for _, ev := range h.Install {
		if g := hooks.get(ev); g != nil && g.kind == '[' && len(g.elems) == 0 {
			n++
		}
	}
	return n
}

// TestSettingsKept: install splices its hooks into the file's own bytes
// (a lone surrogate escape, `\u0026`, a number's digits, tabs and the
// file's layout stay as written), and uninstall gives the file back
// byte for byte; duplicate keys are refused naming their line.
func TestSettingsKept(t *testing.T) {
	user := "{\n\t\"permissions\": {\"allow\": [\"Bash(a \\u0026\\u0026 b)\"]},\n\t\"note\": \"\\ud800 lone\",\n\t\"n\": 1.50e3,\n" +
		"\t\"hooks\": {\n\t\t\"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"./mine \\udfff\"}]}]\n\t}\n}\n"
	// The same with lines ending in CR LF: new lines end so too.
	for _, user := range []string{user, strings.ReplaceAll(user, "\n", "\r\n")} {
		for _, h := range Harnesses {
			c, err := h.change(h.Settings, []byte(user), h.install)
			if err != nil || !c.Changed() {
				t.Fatalf("%s install: %v %v", h.Name, c, err)
			}
			for _, kept := range []string{`\ud800 lone`, `\u0026\u0026`, `1.50e3`, `./mine \udfff`, "\t\"n\": "} {
				if !bytes.Contains(c.New, []byte(kept)) {
					t.Errorf("%s install lost %q:\n%s", h.Name, kept, c.New)
				}
			}
			if _, err := parseSettings(c.New, h.Settings); err != nil {
				t.Fatalf("%s install wrote what it cannot read: %v\n%s", h.Name, err, c.New)
			}
			if strings.Contains(user, "\r\n") && strings.Count(string(c.New), "\n") != strings.Count(string(c.New), "\r\n") {
				t.Errorf("%s install mixed line ends into a CR LF file:\n%q", h.Name, c.New)
			}
			back, err := h.change(h.Settings, c.New, h.uninstall)
			if err != nil || string(back.New) != user {
				t.Fatalf("%s uninstall after install: %v\n%s\nwant\n%s", h.Name, err, back.New, user)
			}
		}
	}
	dup := "{\n  \"hooks\": {},\n  \"model\": \"x\",\n  \"hooks\": {\"Stop\": []}\n}\n"
	if _, err := ClaudeCode.change(".claude/settings.json", []byte(dup), ClaudeCode.install); err == nil || err.Error() != `.claude/settings.json:4: duplicate key "hooks"` {
		t.Fatalf("duplicate hooks: %v", err)
	}
}

// FuzzSettings: any settings file is either refused with a line number
// and left alone, or install then uninstall gives back the document that
// uninstall alone gives (the file itself when it held no hook of
// snapback's: every key, value and order kept), and a second install
// changes nothing.
func FuzzSettings(f *testing.F) {
	for _, s := range []string{
		`{}`, ``, `{"hooks": {}}`, `{"a": 1, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x && y"}]}]}, "z": [1.50, "é\u00e9", null]}`,
		`{"hooks": {"enabled": true, "PreToolUse": [{"matcher": "*", "hooks": [{"command": "snapback agent hook claude-code"}]}]}}`,
		`{"hooks": []}`, `[1]`, `{"a": }`, `{"a": 1} {}`,
		// A lone surrogate and escapes a re-encoding would change.
		`{"a": "\ud800 \u0026 \/", "hooks": {"Stop": [{"hooks": [{"command": "x \udfff"}]}]}, "n": 1.50e3}`,
		// Duplicate keys, at the top and deeper.
		`{"hooks": {}, "hooks": {"Stop": []}}`, `{"a": {"b": 1, "b": 2}}`, `{"hooks": {"Stop": [], "Stop": []}}`,
		"{\n\t\"x\": [1,2],\n\t\"hooks\": {\"PreToolUse\": [ ]}\n}\n",
		"{\r\n  \"a\": 1,\r\n  \"hooks\": {\r\n    \"Stop\": [\r\n      {\"hooks\": []}\r\n    ]\r\n  }\r\n}\r\n",
		// JSONC (Gemini CLI's): comments and trailing commas.
		"// top\n{\n  // a\n  \"a\": 1, // one\n  /* b */ \"hooks\": { // none\n  },\n}\n",
		"{ /* x */ }", "{\"a\": [1, 2,], \"s\": \"// not a comment\", \"hooks\": {\"AfterAgent\": [ /* later */ ]}}",
		"// only a comment\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, h := range Harnesses {
			rel := h.Settings
			c, err := h.change(rel, data, h.install)
			if err != nil {
				if !strings.HasPrefix(err.Error(), rel+":") || strings.Contains(err.Error(), "\n") {
					t.Fatalf("the error is not one line naming the file: %v", err)
				}
				continue
			}
			doc, _, _ := parseSettingsText(data, rel, h.Comments)
			hooks := doc.get("hooks")
			if hooks != nil && c.Changed() {
				// Every byte outside the hooks is the user's, as it was.
				if !bytes.HasPrefix(c.New, data[:hooks.start]) || !bytes.HasSuffix(c.New, data[hooks.end:]) {
					t.Fatalf("install changed bytes outside the hooks:\n%s\nbecame\n%s", data, c.New)
				}
			}
			again, err := h.change(rel, c.New, h.install)
			if err != nil || again.Changed() {
				t.Fatalf("a second install: %v %v", again, err)
			}
			back, err := h.change(rel, c.New, h.uninstall)
			if err != nil {
				t.Fatalf("uninstall after install: %v", err)
			}
			// What uninstall alone makes of the original.
			alone, err := h.change(rel, data, h.uninstall)
			if err != nil {
				t.Fatalf("uninstall of the original: %v", err)
			}
			want, _, err := parseSettingsText(alone.New, rel, h.Comments)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := parseSettingsText(back.New, rel, h.Comments)
			if err != nil {
				t.Fatal(err)
			}
			if w, g := bare(want).encode("  "), bare(got).encode("  "); !bytes.Equal(w, g) {
				t.Fatalf("install then uninstall changed the document:\n%s\nbecame\n%s", w, g)
			}
			// A file that held none of snapback's hooks and nothing empty
			// for install to fill is back byte for byte.
			if !alone.Changed() && filled(h, doc) == 0 && !bytes.Equal(back.New, data) {
				t.Fatalf("install then uninstall is not a no-op:\n%q\nbecame\n%q", data, back.New)
			}
		}
	})
}

// TestInstallInPlace: install changes the settings file in place, after
// a backup: its inode (a hard link to it still shows the change), owner
// and mode stay (an install run as root must not take the user's file
// away from them), and the backup goes. A backup left by an edit cut
// short is named and never passed over. A FIFO in the file's place is
// refused at once.
func TestInstallInPlace(t *testing.T) {
	root := t.TempDir()
	rel := ClaudeCode.LocalSettings
	path := filepath.Join(root, rel)
	treetest.Write(t, root, rel, "{\n  \"model\": \"opus\"\n}\n", 0o640)
	link := filepath.Join(root, "elsewhere.json")
	treetest.Must(t, os.Link(path, link))
	if os.Geteuid() == 0 {
		treetest.Must(t, os.Chown(path, 12345, 23456))
	}
	var before syscall.Stat_t
	treetest.Must(t, syscall.Stat(path, &before))
	if _, err := ClaudeCode.InstallHooks(root, rel, true); err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	treetest.Must(t, syscall.Stat(path, &after))
	if after.Ino != before.Ino || after.Uid != before.Uid || after.Gid != before.Gid || after.Mode != before.Mode || after.Nlink != 2 {
		t.Fatalf("install replaced the file: inode %d→%d, owner %d:%d→%d:%d, mode %o→%o, links %d",
			before.Ino, after.Ino, before.Uid, before.Gid, after.Uid, after.Gid, before.Mode, after.Mode, after.Nlink)
	}
	if b, _ := os.ReadFile(link); !bytes.Contains(b, []byte(ClaudeCode.Command())) {
		t.Fatalf("the hard link does not show the hooks:\n%s", b)
	}
	if _, err := os.Lstat(path + BackupSuffix); !os.IsNotExist(err) {
		t.Fatalf("the backup stayed: %v", err)
	}

	treetest.Write(t, root, rel+BackupSuffix, "{}\n", 0o600)
	if _, err := ClaudeCode.UninstallHooks(root, rel, true); err == nil || !strings.Contains(err.Error(), rel+BackupSuffix+" is there") {
		t.Fatalf("a leftover backup: %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte(ClaudeCode.Command())) {
		t.Fatal("the file changed though a backup was in the way")
	}

	fifo := filepath.Join(root, ".gemini", "settings.json")
	treetest.Must(t, os.MkdirAll(filepath.Dir(fifo), 0o755))
	treetest.Must(t, syscall.Mkfifo(fifo, 0o644))
	done := make(chan error, 1)
	go func() { _, err := GeminiCLI.InstallHooks(root, GeminiCLI.Settings, true); done <- err }()
	select {
	case err := <-done:
		if err == nil || err.Error() != ".gemini/settings.json: not a regular file (a named pipe)" {
			t.Fatalf("a FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("install blocked on a FIFO")
	}
}

// TestPatchPaths: the files a Codex CLI apply_patch call names, from the
// headers of its patch (tool_input.command), and which lie outside the
// project.
func TestPatchPaths(t *testing.T) {
	patch := "*** Begin Patch\n*** Add File: new.txt\n+hi\n*** Delete File: /abs/gone.txt\n" +
		"*** Update File: old/name.txt\n*** Move to: ../elsewhere/name.txt\n@@\n-a\n+b\n" +
		"  *** Update File: new.txt\n*** End Patch\n"
	in, _ := json.Marshal(map[string]string{"command": patch})
	p := &Payload{Tool: "apply_patch", Input: in}
	got := PatchPaths(p)
	want := []string{"new.txt", "/abs/gone.txt", "old/name.txt", "../elsewhere/name.txt"}
	if !slices.Equal(got, want) {
		t.Fatalf("PatchPaths = %q, want %q", got, want)
	}
	if out := Outside("/p", "/p", got); !slices.Equal(out, []string{"/abs/gone.txt", "/elsewhere/name.txt"}) {
		t.Fatalf("Outside = %q", out)
	}
	if out := Outside("/p", "/p/src", got); !slices.Equal(out, []string{"/abs/gone.txt"}) {
		t.Fatalf("Outside from a subdirectory = %q", out)
	}
	for _, q := range []*Payload{
		{Tool: "Bash", Input: in},
		{Tool: "apply_patch", Input: json.RawMessage(`"not an object"`)},
		{Tool: "apply_patch"},
	} {
		if got := PatchPaths(q); got != nil {
			t.Errorf("PatchPaths(%s %s) = %q, want none", q.Tool, q.Input, got)
		}
	}
}

// TestSettingsJSONC: Gemini CLI's settings may hold comments and trailing
// commas (JSONC), which it reads; install merges its hooks in keeping
// every comment and byte of the user's, uninstall gives the file back
// byte for byte, and a harness that reads plain JSON (Claude Code)
// refuses such a file naming its line.
func TestSettingsJSONC(t *testing.T) {
	for name, user := range map[string]string{
		"settings": `// Gemini CLI settings for this project.
{
  // The model the team uses.
  "model": {
    "name": "gemini-2.5-pro", // the fast one is too fast
  },
  /* Tools
     the agent may use. */
  "tools": {
    "sandbox": false,
    "exclude": ["run_shell_command(rm)",], // never rm
  },
  "ui": {"theme": "GitHub"} // last
}
`,
		"hooks with comments": `{
  "general": {"vimMode": true},
  "hooks": {
    // Ours come later.
  },
}
`,
		"an event of the user's": `{
  "hooks": {
    "BeforeTool": [
      // lint before writes, some day
    ],
    /* and a notifier */ "AfterAgent": [{"hooks": [{"name": "notify", "type": "command", "command": "notify-send done"}]},],
  },
}
`,
		"only comments inside": "{ /* nothing yet */ }\n",
		"crlf":                 "{\r\n  // a comment\r\n  \"a\": 1, // one\r\n}\r\n",
		// A lone CR does not end a // comment for Gemini CLI: "b" is
		// in the comment, and the hooks must go after it.
		"a CR inside a comment": "{\n  \"hooks\": { // a\rb\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := GeminiCLI.change(GeminiCLI.Settings, []byte(user), GeminiCLI.install)
			if err != nil || !c.Changed() {
				t.Fatalf("install: %v %v", c, err)
			}
			for _, cm := range regexp.MustCompile(`(?s)//[^\r\n]*|/\*.*?\*/`).FindAllString(user, -1) {
				if !strings.Contains(string(c.New), cm) {
					t.Errorf("install lost the comment %q:\n%s", cm, c.New)
				}
			}
			doc, _, err := parseSettingsText(c.New, GeminiCLI.Settings, true)
			if err != nil {
				t.Fatalf("install wrote what it cannot read: %v\n%s", err, c.New)
			}
			if n := len(doc.get("hooks").get("BeforeTool").elems); n == 0 {
				t.Fatalf("no BeforeTool hook after install:\n%s", c.New)
			}
			if strings.Contains(user, "\r\n") && strings.Count(string(c.New), "\n") != strings.Count(string(c.New), "\r\n") {
				t.Errorf("install mixed line ends into a CR LF file:\n%q", c.New)
			}
			if again, err := GeminiCLI.change(GeminiCLI.Settings, c.New, GeminiCLI.install); err != nil || again.Changed() {
				t.Fatalf("a second install: %v %v", again, err)
			}
			back, err := GeminiCLI.change(GeminiCLI.Settings, c.New, GeminiCLI.uninstall)
			if err != nil || string(back.New) != user {
				t.Fatalf("uninstall after install: %v\n%s\nwant\n%s", err, back.New, user)
			}
		})
	}
	if _, err := ClaudeCode.change(ClaudeCode.Settings, []byte("{\n  // no\n}\n"), ClaudeCode.install); err == nil || !strings.HasPrefix(err.Error(), ".claude/settings.json:2: ") {
		t.Errorf("Claude Code's settings with a comment: %v", err)
	}
	// To Gemini CLI the comment runs on over the CR and the "}" to the
	// line's end, and the document ends inside the outer object.
	if _, err := GeminiCLI.change(GeminiCLI.Settings, []byte("{\"hooks\": { // n\r},\n}\n"), GeminiCLI.install); err == nil || !strings.HasPrefix(err.Error(), ".gemini/settings.json:") {
		t.Errorf("a comment that a CR does not end: %v", err)
	}
	if _, err := GeminiCLI.change(GeminiCLI.Settings, []byte("// nothing but this\n"), GeminiCLI.install); err == nil || err.Error() != ".gemini/settings.json: holds only comments: write {} after them, then install again" {
		t.Errorf("a file of comments only: %v", err)
	}
}

// TestFired: a hook's stamp reads back as written, a fresh one is not
// rewritten, a harness that never fired has the zero time, and a stamp
// that is not a regular file of this harness's is an error naming it,
// never followed.
func TestFired(t *testing.T) {
	store := t.TempDir()
	if at, err := LastFired(store, "codex"); err != nil || !at.IsZero() {
		t.Fatalf("before any hook: %v %v", at, err)
	}
	now := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	treetest.Must(t, MarkFired(store, "codex", now))
	if at, err := LastFired(store, "codex"); err != nil || !at.Equal(now) {
		t.Fatalf("after a hook: %v %v", at, err)
	}
	if at, err := LastFired(store, "gemini-cli"); err != nil || !at.IsZero() {
		t.Fatalf("another harness: %v %v", at, err)
	}
	// The file was just written (its mtime is now): a stamp a minute
	// later is not written again.
	treetest.Must(t, MarkFired(store, "codex", time.Now().Add(time.Minute)))
	if at, _ := LastFired(store, "codex"); !at.Equal(now) {
		t.Fatalf("a fresh stamp was rewritten: %v", at)
	}
	p := filepath.Join(store, TurnDir, firedName("codex"))
	treetest.Must(t, os.WriteFile(p, []byte(`{"version":1,"harness":"claude-code","at":"2026-12-05T14:00:00Z"}`), 0o600))
	if _, err := LastFired(store, "codex"); err == nil || !strings.Contains(err.Error(), "not codex's stamp") {
		t.Fatalf("another harness's stamp: %v", err)
	}
	outside := filepath.Join(t.TempDir(), "victim.json")
	treetest.Must(t, os.WriteFile(outside, []byte(`{"version":1,"harness":"codex","at":"2026-12-05T14:00:00Z"}`), 0o600))
	treetest.Must(t, os.Remove(p))
	treetest.Must(t, os.Symlink(outside, p))
	if _, err := LastFired(store, "codex"); err == nil {
		t.Fatal("a stamp that is a symbolic link was followed")
	}
}

// TestConfigHooks: a Codex CLI config.toml whose [hooks] tables run
// snapback's hook is told from one whose hooks are others', or that has
// none; a config that is not TOML is an error naming it.
func TestConfigHooks(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		toml string
		want bool
	}{
		"snapback's": {`model = "gpt-5-codex"

[[hooks.PreToolUse]]
matcher = "Bash|apply_patch"

[[hooks.PreToolUse.hooks]]
type = "command"
command = "snapback agent hook codex"
timeout = 180

[hooks.state."/p/.codex/config.toml:pre_tool_use:0:0"]
trusted_hash = "abc"
`, true},
		"others'": {`[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "notify-send done"
`, false},
		"none":   {"model = \"o3\"\n[features]\nhooks = true\n", false},
		"absent": {"", false},
	} {
		rel := ".codex/config-" + strings.ReplaceAll(name, "'", "") + ".toml"
		if c.toml != "" {
			treetest.Write(t, dir, rel, c.toml, 0o644)
		}
		if got, err := Codex.ConfigHooks(dir, rel); err != nil || got != c.want {
			t.Errorf("%s: %v %v, want %v", name, got, err, c.want)
		}
	}
	treetest.Write(t, dir, ".codex/bad.toml", "[hooks\n", 0o644)
	if _, err := Codex.ConfigHooks(dir, ".codex/bad.toml"); err == nil || !strings.HasPrefix(err.Error(), ".codex/bad.toml: ") {
		t.Errorf("a config that is not TOML: %v", err)
	}
	if got, err := ClaudeCode.ConfigHooks(dir, ClaudeCode.Config); err != nil || got {
		t.Errorf("a harness without a TOML config: %v %v", got, err)
	}
}
