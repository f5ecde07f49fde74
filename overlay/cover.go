package overlay

import "path/filepath"

// Uncovered says why no view can cover the project at root, or "" when
// one can. A view is a mount on the root's own path; mounted on /, it
// does not change the root directory of the processes started in it
// (their root stays the directory below the mount), so every absolute
// path the command names would lead to the real disk: isolated in name
// only.
func Uncovered(root string) string {
	if filepath.Clean(root) == "/" {
		return "the project root is /, where no view can isolate the command: a mount on / does not change the root directory of the processes started in it, so the command would write to the real disk"
	}
	return ""
}
