package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// An edit tool's payload names the file it writes, relative to the
// project (through a symbolic link too); a shell command, an unknown
// tool or an input without a path may write any path; a file outside
// the project claims nothing.
func TestWrites(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	in := func(m map[string]any) json.RawMessage {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		h     *Harness
		tool  string
		input json.RawMessage
		cwd   string
		paths []string
		any   bool
	}{
		{ClaudeCode, "Write", in(map[string]any{"file_path": filepath.Join(root, "src/a.go"), "content": "x"}), "", []string{"src/a.go"}, false},
		{ClaudeCode, "Edit", in(map[string]any{"file_path": filepath.Join(root, "link/a.go")}), "", []string{"link/a.go", "src/a.go"}, false},
		{ClaudeCode, "MultiEdit", in(map[string]any{"file_path": "b.go"}), filepath.Join(root, "src"), []string{"src/b.go"}, false},
		{ClaudeCode, "NotebookEdit", in(map[string]any{"notebook_path": filepath.Join(root, "n.ipynb")}), "", []string{"n.ipynb"}, false},
		{ClaudeCode, "Write", in(map[string]any{"file_path": filepath.Join(outside, "x")}), "", nil, false},
		{ClaudeCode, "Write", in(map[string]any{"file_path": filepath.Join(root, "../x")}), "", nil, false},
		{ClaudeCode, "Write", in(map[string]any{"file_path": 3}), "", nil, true},
		{ClaudeCode, "Write", in(map[string]any{}), "", nil, true},
		{ClaudeCode, "Write", in(map[string]any{"file_path": root}), "", nil, true},
		{ClaudeCode, "Bash", in(map[string]any{"command": "sed -i s/a/b/ f"}), "", nil, true},
		{ClaudeCode, "write_file", in(map[string]any{"file_path": filepath.Join(root, "a")}), "", nil, true},
		{GeminiCLI, "write_file", in(map[string]any{"file_path": filepath.Join(root, "a")}), "", []string{"a"}, false},
		{GeminiCLI, "replace", in(map[string]any{"file_path": filepath.Join(root, "src/c")}), "", []string{"src/c"}, false},
		{GeminiCLI, "run_shell_command", in(map[string]any{"command": "make"}), "", nil, true},
		// Codex CLI's apply_patch names its files in the patch, relative
		// to the session's directory: an added, an updated and moved,
		// and a deleted one, and one outside the tree (claimed by none).
		{Codex, "apply_patch", in(map[string]any{"command": "*** Begin Patch\n*** Add File: src/new.go\n+x\n*** Update File: a.go\n*** Move to: src/moved.go\n@@\n-a\n+b\n*** Delete File: old.go\n*** Update File: ../../elsewhere\n*** End Patch\n"}), root, []string{"a.go", "old.go", "src/moved.go", "src/new.go"}, false},
		{Codex, "apply_patch", in(map[string]any{"command": "not a patch"}), root, nil, true},
		{Codex, "Bash", in(map[string]any{"command": "make"}), root, nil, true},
	} {
		w := c.h.Writes(&Payload{Tool: c.tool, Input: c.input, Cwd: c.cwd}, root)
		slices.Sort(w.Paths)
		if !slices.Equal(slices.Compact(w.Paths), c.paths) || w.Any != c.any {
			t.Errorf("%s %s %s: %+v, want paths %q any %v", c.h.Name, c.tool, c.input, w, c.paths, c.any)
		}
	}
}
