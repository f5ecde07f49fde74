package agent

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// The headers of a patch in Codex CLI's apply_patch format
// (openai/codex, codex-rs/apply-patch/apply_patch_tool_instructions.md):
// each names a file the patch adds, deletes, updates, or moves an
// updated file to.
var patchHeaders = []string{"*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "}

// PatchPaths returns the files an apply_patch call names, in the order
// they first appear, as the patch gives them (relative to the session's
// directory, or absolute); nil for another tool, or input that holds no
// patch. Codex CLI passes the patch as tool_input.command.
func PatchPaths(p *Payload) []string {
	if p.Tool != "apply_patch" || len(p.Input) == 0 {
		return nil
	}
	var in struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(p.Input, &in) != nil {
		return nil
	}
	var paths []string
	seen := map[string]bool{}
	for _, l := range strings.Split(in.Command, "\n") {
		l = strings.TrimSpace(l)
		for _, h := range patchHeaders {
			if f, ok := strings.CutPrefix(l, h); ok && f != "" && !seen[f] {
				seen[f] = true
				paths = append(paths, f)
			}
		}
	}
	return paths
}

// Outside returns the paths of paths (relative ones taken from dir)
// that lie outside root: a patch's files there are not in the project,
// and no undo step of its covers them.
func Outside(root, dir string, paths []string) []string {
	var out []string
	for _, f := range paths {
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		rel, err := filepath.Rel(root, filepath.Clean(f))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			out = append(out, f)
		}
	}
	return out
}
