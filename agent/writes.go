package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/snapshot"
)

// editTools names, for each harness, its edit tools and the fields of
// their input that name the file each writes: the exact source of which
// session wrote a path when two sessions' turns overlap (see
// snapshot/sessions.go). Any other tool that may change files (a shell
// command) may write any path.
//
// Claude Code: https://code.claude.com/docs/en/hooks ("PreToolUse
// Input": Write, Edit and MultiEdit carry file_path, NotebookEdit
// notebook_path). Gemini CLI: https://geminicli.com/docs/tools/file-system
// (write_file and replace: file_path).
var editTools = map[string]map[string]string{
	"claude-code": {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"},
	"gemini-cli":  {"write_file": "file_path", "replace": "file_path"},
}

// Writes says what the tool call of p is about to write in the tree at
// root: an edit tool's file (relative to root; nothing when it is
// outside the tree), else any path. An edit tool's input without a path
// it can read is any path too: nothing exact is known.
func (h *Harness) Writes(p *Payload, root string) snapshot.Writes {
	field, ok := editTools[h.Name][p.Tool]
	if !ok {
		return snapshot.Writes{Any: true}
	}
	var in map[string]json.RawMessage
	var file string
	if json.Unmarshal(p.Input, &in) != nil || json.Unmarshal(in[field], &file) != nil || file == "" || strings.IndexByte(file, 0) >= 0 {
		return snapshot.Writes{Any: true}
	}
	if !filepath.IsAbs(file) {
		if !filepath.IsAbs(p.Cwd) {
			return snapshot.Writes{Any: true}
		}
		file = filepath.Join(p.Cwd, file)
	}
	file = filepath.Clean(file)
	roots := []string{root}
	if real, err := filepath.EvalSymlinks(root); err == nil && real != root {
		roots = append(roots, real)
	}
	// The tool writes through symbolic links: the path it names, the
	// same with its directory resolved, and where a link it names leads.
	names := []string{file}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(file)); err == nil {
		names = append(names, filepath.Join(dir, filepath.Base(file)))
	}
	if real, err := filepath.EvalSymlinks(file); err == nil {
		names = append(names, real)
	}
	var w snapshot.Writes
	for _, n := range names {
		for _, r := range roots {
			rel, err := filepath.Rel(r, n)
			if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(os.PathSeparator)) {
				continue
			}
			w.Paths = append(w.Paths, filepath.ToSlash(rel))
		}
	}
	if len(w.Paths) == 0 && inside(file, roots) {
		w.Any = true // the root itself: no file
	}
	return w
}

// inside reports whether file is root or below one of roots.
func inside(file string, roots []string) bool {
	for _, r := range roots {
		if rel, err := filepath.Rel(r, file); err == nil && rel == "." {
			return true
		}
	}
	return false
}
