//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// TestZFSMode: a project below its dataset's root, in the zfs mode. A
// run discarded at once, one kept for review then discarded, and one
// committed leave no snapshot or clone of the dataset, nor a mount point
// of theirs; the tree is as the discards and the commit say. A dataset
// mounted below the root is refused, naming it, as is a root on no
// dataset, each in one line with status 125 (as any mode that cannot
// work here), nothing made.
func TestZFSMode(t *testing.T) {
	bin := snapbackBinary(t)
	ds := treetest.ZFS(t)
	root := filepath.Join(treetest.ZFSMount(t, ds), "below", "proj")
	treetest.Write(t, root, "a", "before\n", 0o644)
	treetest.Write(t, root, "b", "kept\n", 0o644)
	treetest.Write(t, root, "dir/c", "c\n", 0o644)
	sb(t, bin, root, "snap", "-m", "base")
	before := treetest.Capture(t, root, snapshot.StoreDir)
	// The clones' mount points, named after the dataset (overlay/zfs).
	mounts := func() []string {
		h := fmt.Sprintf("%x", sha256.Sum256([]byte(ds)))[:8]
		names, _ := filepath.Glob("/run/snapback/zfs/snapback-" + h + "-*")
		return names
	}
	change := "echo after > a; rm b; rm -r dir; mkdir new; echo n > new/n; ls -a > seen"

	if st := sb(t, bin, root, "doctor"); !strings.Contains(st, "lies in the ZFS dataset "+ds) {
		t.Errorf("doctor does not offer the zfs mode:\n%s", st)
	}
	sb(t, bin, root, "run", "--mode", "zfs", "--then", "discard", "--", "sh", "-c", change)
	treetest.Equal(t, "after a discarded run", before, treetest.Capture(t, root, snapshot.StoreDir))
	noZFSLeft(t, "after --then discard", ds)

	sb(t, bin, root, "run", "--mode", "zfs", "--then", "review", "--", "sh", "-c", change)
	noZFSLeft(t, "while the run is pending", ds)
	if d := sb(t, bin, root, "diff"); !strings.Contains(d, "new/n") || !strings.Contains(d, "b") {
		t.Errorf("the pending run's diff lacks its changes:\n%s", d)
	}
	// Its clones are gone: no second command in them.
	runs, err := os.ReadDir(filepath.Join(root, snapshot.StoreDir, "runs"))
	treetest.Must(t, err)
	if len(runs) != 1 {
		t.Fatalf("want one pending run, have %d", len(runs))
	}
	cont := exec.Command(bin, "-C", root, "run", "--continue", runs[0].Name(), "--", "true")
	if out, _ := cont.CombinedOutput(); cont.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "a zfs run keeps no view between commands") {
		t.Errorf("run --continue of a zfs run: want status 125 saying why, got %d:\n%s", cont.ProcessState.ExitCode(), out)
	}
	sb(t, bin, root, "discard")
	treetest.Equal(t, "after discard", before, treetest.Capture(t, root, snapshot.StoreDir))
	noZFSLeft(t, "after discard", ds)

	sb(t, bin, root, "run", "--mode", "zfs", "--", "sh", "-c", change)
	noZFSLeft(t, "after a commit", ds)
	for f, want := range map[string]string{"a": "after\n", "new/n": "n\n", "seen": ".\n..\na\nnew\nseen\n"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != want {
			t.Errorf("after the commit %s = %q (%v), want %q (the store absent in the view)", f, b, err, want)
		}
	}
	for _, f := range []string{"b", "dir"} {
		if _, err := os.Lstat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("after the commit %s is still there (%v)", f, err)
		}
	}
	sb(t, bin, root, "undo")
	treetest.Equal(t, "after undo", before, treetest.Capture(t, root, snapshot.StoreDir))
	if len(mounts()) > 0 {
		t.Errorf("the clones' mount points are left: %v", mounts())
	}

	refused := func(what, dir, want string) {
		t.Helper()
		cmd := exec.Command(bin, "-C", dir, "run", "--mode", "zfs", "--", "true")
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), want) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Errorf("%s: want status 125 and one line saying %q, got %d:\n%s", what, want, cmd.ProcessState.ExitCode(), out)
		}
	}
	// A dataset of its own below the root: not in the clone.
	child := filepath.Join(root, "child")
	if _, err := fsutil.ZFS(context.Background(), "create", "-o", "mountpoint="+child, filepath.Dir(ds)+"/child"); err != nil {
		t.Fatal(err) // (under the zfs mount lock, as every mount here)
	}
	t.Cleanup(func() { // before the dataset it is mounted in
		var out []byte
		var err error
		for i := 0; i < 40; i++ { // zfs-fuse: "dataset is busy" for a moment after a use
			if out, err = exec.Command("zfs", "destroy", filepath.Dir(ds)+"/child").CombinedOutput(); err == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("zfs destroy: %v\n%s", err, out)
	})
	refused("a dataset below the root", root, child+" is a mount point below the root")
	noZFSLeft(t, "after a refused run", ds)
	refused("no dataset", t.TempDir(), "not on a ZFS dataset")
}
