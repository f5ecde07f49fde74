package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellNeedsBashCompletion: the line after a bash install says
// whether the bash-completion package, through which alone bash loads
// the script, is there.
func TestShellNeedsBashCompletion(t *testing.T) {
	saved := bashCompletionMain
	t.Cleanup(func() { bashCompletionMain = saved })
	dir := t.TempDir()
	bashCompletionMain = []string{filepath.Join(dir, "none")}
	if got := shellNeeds("bash", dir); !strings.Contains(got, "bash-completion package, which is not installed") {
		t.Errorf("without bash-completion: %q", got)
	}
	main := filepath.Join(dir, "bash_completion")
	if err := os.WriteFile(main, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bashCompletionMain = append(bashCompletionMain, main)
	if got := shellNeeds("bash", dir); !strings.Contains(got, "installed: "+main) {
		t.Errorf("with bash-completion: %q", got)
	}
}
