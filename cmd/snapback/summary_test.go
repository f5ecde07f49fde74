//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestSummaryOnTerminal checks the real test for a terminal (run_summary
// stands in for one with SNAPBACK_TERMINAL): with stderr on a pty, a copy
// run ends with the summary line; with stdout alone on it, or -q, it
// does not.
func TestSummaryOnTerminal(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "a", "a\n", 0o644)
	want := regexp.MustCompile(`snapback: run \S+ committed 1 path \(copy mode\); snapback undo reverts it\r?\n`)
	for _, c := range []struct {
		name       string
		args       []string
		ttyStderr  bool
		wantSummed bool
	}{
		{"stderr on a terminal", nil, true, true},
		{"-q", []string{"-q"}, true, false},
		{"only stdout on a terminal", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, tty := openPTY(t)
			args := append(append([]string{"-C", root}, c.args...), "run", "--mode", "copy", "--", "sh", "-c", "date > a")
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "SNAPBACK_TERMINAL=")
			var other bytes.Buffer
			cmd.Stdout, cmd.Stderr = tty, &other
			if c.ttyStderr {
				cmd.Stdout, cmd.Stderr = &other, tty
			}
			var out bytes.Buffer
			copied := make(chan struct{})
			go func() { out.ReadFrom(master); close(copied) }()
			err := cmd.Run()
			tty.Close() // the last terminal side: the reader gets EIO once it has read all
			<-copied
			treetest.Must(t, err)
			got := out.String() + other.String()
			if want.MatchString(got) != c.wantSummed {
				t.Errorf("summary shown: %v, want %v; output:\n%s", !c.wantSummed, c.wantSummed, got)
			}
		})
	}
}

// TestOneLineOnTerminal: with stdout and stderr on one real terminal,
// undo says what it did once (the summary), not also in its stdout line.
func TestOneLineOnTerminal(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "a", "a\n", 0o644)
	run := exec.Command(bin, "-C", root, "run", "--mode", "copy", "--", "sh", "-c", "date > a")
	run.Env = append(os.Environ(), "SNAPBACK_TERMINAL=")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	master, tty := openPTY(t)
	cmd := exec.Command(bin, "-C", root, "undo")
	cmd.Env = append(os.Environ(), "SNAPBACK_TERMINAL=")
	cmd.Stdout, cmd.Stderr = tty, tty
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { out.ReadFrom(master); close(copied) }()
	err := cmd.Run()
	tty.Close() // the last terminal side: the reader gets EIO once it has read all
	<-copied
	treetest.Must(t, err)
	want := regexp.MustCompile(`\Asnapback: undid run \S+: 1 path changed; snapback redo puts it back\r?\n\z`)
	if !want.MatchString(out.String()) {
		t.Errorf("terminal shows %q, want the one summary line", out.String())
	}
}
