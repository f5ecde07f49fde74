//go:build linux

package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterrupt sends SIGINT, then SIGTERM, to the real binary during a
// slow verb (snap of 8 GiB of sparse files: reading them takes seconds):
// it stops, exits 128+N with the code `interrupted` (a JSON error under
// --json) and leaves nothing half-done: no snapshot, no temp file, a
// store check accepts. It died silently on SIGINT, with the signal's
// status but no word, and scripts saw nothing on stderr.
func TestInterrupt(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	for i := range 400 {
		f, err := os.Create(filepath.Join(root, fmt.Sprintf("f%03d", i)))
		if err == nil {
			err = f.Truncate(20 << 20) // sparse: no disk, but read in full
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		json bool
		code int
		want string
	}{
		{syscall.SIGINT, false, 130, "snapback: snap: interrupted by SIGINT\n"},
		{syscall.SIGTERM, true, 143, `{"version":1,"error":"interrupted","message":"snap: interrupted by SIGTERM"}` + "\n"},
	} {
		args := []string{"-C", root, "snap"}
		if tc.json {
			args = append([]string{"--json"}, args...)
		}
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Once the store exists the scan is under way.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(root, ".snapback", "lock")); err == nil || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != tc.code || stderr.String() != tc.want || stdout.Len() > 0 {
			t.Fatalf("snap, then %s: %v, stdout %q, stderr %q; want exit %d and %q", tc.sig, err, stdout.String(), stderr.String(), tc.code, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("snap took %v to stop after %s", d, tc.sig)
		}
		var ls struct{ Snapshots []json.RawMessage }
		if err := json.Unmarshal([]byte(sb(t, bin, root, "--json", "list")), &ls); err != nil || len(ls.Snapshots) != 0 {
			t.Fatalf("after the interrupted snap, list: %v %d snapshots, want none", err, len(ls.Snapshots))
		}
		if left, _ := os.ReadDir(filepath.Join(root, ".snapback", "tmp")); len(left) > 0 {
			t.Fatalf("after the interrupted snap, .snapback/tmp holds %v", left)
		}
		if out := sb(t, bin, root, "check"); strings.Contains(out, "damaged") {
			t.Fatalf("check after the interrupted snap: %s", out)
		}
	}
}

// TestInterruptTargetRestore: a Ctrl-C while undo restores a database
// target, the tree already moved, does not stop the target's restore
// half-way (the database left at its state after the step while the files
// went back, and "interrupted" all the user heard): the undo completes,
// exit 0, and says that the signal came too late to stop it.
func TestInterruptTargetRestore(t *testing.T) {
	bin := snapbackBinary(t)
	root := t.TempDir()
	sqliteTarget(t, root)
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb(t, bin, root, "snap", "-m", "base")
	sqliteExec(t, root, `INSERT INTO t VALUES ('two')`)
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-C", root, "undo")
	cmd.Env = append(os.Environ(), "SNAPBACK_SIGNAL_AT=target-restore")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil || !strings.Contains(stderr.String(), "snapback: warning: SIGINT came while undo could not stop half-way: it completed\n") {
		t.Errorf("undo, SIGINT during the target's restore: %v, stderr %q; want exit 0 and a word of the signal", err, stderr.String())
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "one\n" {
		t.Errorf("a holds %q after the undo", b)
	}
	db, err := sql.Open("sqlite", filepath.Join(root, "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows string
	if err := db.QueryRow("SELECT group_concat(v) FROM t").Scan(&rows); err != nil || rows != "one" {
		t.Errorf("the target after the undo holds %q (%v), want one: half-restored", rows, err)
	}
}
