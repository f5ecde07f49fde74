package agent

import (
	"bytes"
	"os"
	"path/filepath"
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, h := range Harnesses {
			rel := h.Settings
			c, err := change(rel, data, h.install)
			if err != nil {
				if !strings.HasPrefix(err.Error(), rel+":") {
					t.Fatalf("the error does not name the file: %v", err)
				}
				continue
			}
			again, err := change(rel, c.New, h.install)
			if err != nil || again.Changed() {
				t.Fatalf("a second install: %v %v", again, err)
			}
			back, err := change(rel, c.New, h.uninstall)
			if err != nil {
				t.Fatalf("uninstall after install: %v", err)
			}
			// What uninstall alone makes of the original.
			alone, err := change(rel, data, h.uninstall)
			if err != nil {
				t.Fatalf("uninstall of the original: %v", err)
			}
			want, err := parseSettings(alone.New, rel)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseSettings(back.New, rel)
			if err != nil {
				t.Fatal(err)
			}
			if w, g := bare(want).encode("  "), bare(got).encode("  "); !bytes.Equal(w, g) {
				t.Fatalf("install then uninstall changed the document:\n%s\nbecame\n%s", w, g)
			}
		}
	})
}
