package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTreeSizeBudget: the estimate of a wide root's size stops at its
// budget and then says "at least"; a tree within it is counted exactly.
func TestTreeSizeBudget(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c", "d/e", "d/f"} {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := treeSize(dir); got != "4.9 KiB in 5 files" {
		t.Errorf("whole tree: %q", got)
	}
	saved := sizeBudgetEntries
	t.Cleanup(func() { sizeBudgetEntries = saved })
	sizeBudgetEntries = 3
	if got := treeSize(dir); !strings.HasPrefix(got, "at least ") || strings.HasSuffix(got, " 5 files") {
		t.Errorf("over the budget: %q", got)
	}
}
