package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCitesRepositoryFiles: every file or directory of the
// repository the README cites (a link, or a path in backquotes that starts
// with one of the repository's top-level directories) is in the
// repository: users only have the repository.
func TestReadmeCitesRepositoryFiles(t *testing.T) {
	const top = "../.."
	b, err := os.ReadFile(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs[e.Name()] = true
		}
	}
	var cited []string
	for _, m := range regexp.MustCompile(`\]\(([^)#\s]+)`).FindAllStringSubmatch(string(b), -1) {
		if !strings.Contains(m[1], "://") {
			cited = append(cited, m[1])
		}
	}
	for _, m := range regexp.MustCompile("`([A-Za-z0-9_.-]+/[^`\\s*<]*)`").FindAllStringSubmatch(string(b), -1) {
		p := strings.TrimPrefix(m[1], "./")
		if first, _, _ := strings.Cut(p, "/"); dirs[first] {
			cited = append(cited, p)
		}
	}
	if len(cited) < 5 {
		t.Fatalf("found only %d citations (%q): is the pattern still right?", len(cited), cited)
	}
	for _, p := range cited {
		if _, err := os.Stat(filepath.Join(top, p)); err != nil {
			t.Errorf("README cites %s, which is not in the repository", p)
		}
	}
}
