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
// (write_file and replace: file_path). Codex CLI's apply_patch names its
// files in the patch's headers (PatchPaths).
var editTools = map[string]map[string]string{
	"claude-code": {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"},
	"gemini-cli":  {"write_file": "file_path", "replace": "file_path"},
}

// Writes says what the tool call of p is about to write in the tree at
// root: an edit tool's file, or the files a Codex CLI apply_patch names
// (relative to root; nothing for one outside the tree), else any path.
// An edit tool's input without a path it can read is any path too:
// nothing exact is known.
func (h *Harness) Writes(p *Payload, root string) snapshot.Writes {
	files := h.editFiles(p)
	if len(files) == 0 {
		return snapshot.Writes{Any: true}
	}
	roots := []string{root}
	if real, err := filepath.EvalSymlinks(root); err == nil && real != root {
		roots = append(roots, real)
	}
	var w snapshot.Writes
	for _, file := range files {
		if strings.IndexByte(file, 0) >= 0 {
			return snapshot.Writes{Any: true}
		}
		if !filepath.IsAbs(file) {
			if !filepath.IsAbs(p.Cwd) {
				return snapshot.Writes{Any: true}
			}
			file = filepath.Join(p.Cwd, file)
		}
		file = filepath.Clean(file)
		// The tool writes through symbolic links: the path it names, the
		// same with its directory resolved, and where a link it names leads.
		names := []string{file}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(file)); err == nil {
			names = append(names, filepath.Join(dir, filepath.Base(file)))
		}
		if real, err := filepath.EvalSymlinks(file); err == nil {
			names = append(names, real)
		}
		found := false
		for _, n := range names {
			for _, r := range roots {
				rel, err := filepath.Rel(r, n)
				if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(os.PathSeparator)) {
					continue
				}
				w.Paths = append(w.Paths, filepath.ToSlash(rel))
				found = true
			}
		}
		if !found && inside(file, roots) {
			return snapshot.Writes{Any: true} // the root itself: no file
		}
	}
	return w
}

// editFiles returns the files the tool call of p names as those it
// writes, or nil when it is no edit tool (or its input names none).
func (h *Harness) editFiles(p *Payload) []string {
	if h.Name == "codex" && p.Tool == "apply_patch" {
		return PatchPaths(p)
	}
	field, ok := editTools[h.Name][p.Tool]
	if !ok {
		return nil
	}
	var in map[string]json.RawMessage
	var file string
	if json.Unmarshal(p.Input, &in) != nil || json.Unmarshal(in[field], &file) != nil || file == "" {
		return nil
	}
	return []string{file}
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
