package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCitesRepositoryFiles: every file or directory of the
// repository the README, CONTRIBUTING.md and docs/ cite (a link, relative
// to the citing file, or a path in backquotes that starts with one of the
// repository's top-level directories) is in the repository: users only
// have the repository.
func TestReadmeCitesRepositoryFiles(t *testing.T) {
	const top = "../.."
	docs, err := filepath.Glob(filepath.Join(top, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 3 {
		t.Fatalf("docs/ holds %d documents: is the glob still right?", len(docs))
	}
	for _, f := range append([]string{filepath.Join(top, "README.md"), filepath.Join(top, "CONTRIBUTING.md")}, docs...) {
		checkCitations(t, top, f)
	}
}

func checkCitations(t *testing.T, top, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
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
			rel, err := filepath.Rel(top, filepath.Join(filepath.Dir(file), m[1]))
			if err != nil {
				t.Fatal(err)
			}
			cited = append(cited, rel)
		}
	}
	for _, m := range regexp.MustCompile("`([A-Za-z0-9_.-]+/[^`\\s*<]*)`").FindAllStringSubmatch(string(b), -1) {
		p := strings.TrimPrefix(m[1], "./")
		if first, _, _ := strings.Cut(p, "/"); dirs[first] {
			cited = append(cited, p)
		}
	}
	if filepath.Base(file) == "README.md" && len(cited) < 5 {
		t.Fatalf("%s: found only %d citations (%q): is the pattern still right?", file, len(cited), cited)
	}
	for _, p := range cited {
		if _, err := os.Stat(filepath.Join(top, p)); err != nil {
			t.Errorf("%s cites %s, which is not in the repository", filepath.Base(file), p)
		}
	}
}
