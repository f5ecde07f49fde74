//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
)

// TestPickInterrupt: Ctrl-C while commit -p waits for an answer ends it
// at once (exit 130, the code `interrupted`), nothing committed and the
// run still pending. It waited for a line of stdin that never came.
func TestPickInterrupt(t *testing.T) {
	bin := snapbackBinary(t)
	if !slices.Contains(posixModes(t, bin), "overlayfs") {
		t.Skip("no overlayfs mode here")
	}
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "one\ntwo\n", 0o644)
	sbT(t, bin, root, "snap")
	sbT(t, bin, root, "run", "--mode", "overlayfs", "--then", "review", "--", "sh", "-c", "echo three >> a.txt")
	cmd := exec.Command(bin, "-C", root, "commit", "-p")
	in, err := cmd.StdinPipe() // open, never written: the answer never comes
	treetest.Must(t, err)
	defer in.Close()
	out, err := cmd.StdoutPipe()
	treetest.Must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	treetest.Must(t, cmd.Start())
	var seen bytes.Buffer
	for buf := make([]byte, 4096); !strings.Contains(seen.String(), "Commit this hunk"); {
		n, err := out.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("commit -p ended before asking: %v\n%s%s", err, seen.String(), stderr.String())
		}
	}
	start := time.Now()
	treetest.Must(t, cmd.Process.Signal(syscall.SIGINT))
	stuck := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
	defer stuck.Stop()
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted by SIGINT") {
		t.Fatalf("commit -p, then SIGINT: %v, stderr %q; want exit 130, interrupted", err, stderr.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("commit -p took %v to stop", d)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "one\ntwo\n" {
		t.Fatalf("a.txt after the interrupted commit -p: %q", b)
	}
	if st := sbT(t, bin, root, "status"); !strings.Contains(st, "pending") {
		t.Fatalf("the run is no longer pending:\n%s", st)
	}
}
