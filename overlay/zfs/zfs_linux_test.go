//go:build linux

package zfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay/layer"
	"golang.org/x/sys/unix"
)

// TestWriteLayer makes a real view of a project below a dataset's root,
// changes its clone as a command would, and reads the layer written from
// it: a same-size rewrite within the snapshot's second (zfs-fuse's times
// are whole seconds) is found by content, a deletion is a whiteout, a new
// hard link joins its partner's copy, an untouched file stays out, the
// store's copy is passed over; Destroy leaves nothing, twice over.
func TestWriteLayer(t *testing.T) {
	ds := treetest.ZFS(t)
	out, err := exec.Command("zfs", "get", "-H", "-o", "value", "mountpoint", ds).Output()
	treetest.Must(t, err)
	root := filepath.Join(strings.TrimSpace(string(out)), "proj")
	treetest.Write(t, root, "same-size", "before\n", 0o644)
	treetest.Write(t, root, "untouched", "kept\n", 0o644)
	treetest.Write(t, root, "gone", "x\n", 0o644)
	treetest.Write(t, root, "hard/x", "linked\n", 0o644)
	treetest.Write(t, root, ".snapback/objects/o", "stored\n", 0o600)
	if ok, why := Check(root); !ok {
		t.Fatalf("Check: %s", why)
	}
	c, err := Names(root, "20990101-000000-abcdef")
	treetest.Must(t, err)
	if c.Sub != "proj" || c.Dataset != ds {
		t.Fatalf("Names: %+v, want dataset %s, sub proj", c, ds)
	}
	treetest.Must(t, c.Make())
	t.Cleanup(func() { _ = c.Destroy() })
	v := c.ViewRoot()
	treetest.Must(t, os.WriteFile(filepath.Join(v, "same-size"), []byte("after!\n"), 0o644))
	treetest.Must(t, os.Remove(filepath.Join(v, "gone")))
	treetest.Must(t, os.Link(filepath.Join(v, "hard/x"), filepath.Join(v, "hard/y")))
	treetest.Must(t, os.WriteFile(filepath.Join(v, ".snapback", "objects", "o"), []byte("changed\n"), 0o600))
	upper := t.TempDir()
	treetest.Must(t, WriteLayer(c.BaseRoot(), v, upper, c.Taken))

	if b, err := os.ReadFile(filepath.Join(upper, "same-size")); err != nil || string(b) != "after!\n" {
		t.Errorf("the same-size rewrite: %q, %v", b, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "gone"), &st); err != nil || !layer.IsWhiteout(st.Mode, st.Rdev, st.Size, layer.PathGetter(filepath.Join(upper, "gone"))) {
		t.Errorf("gone is no whiteout in the layer: %v", err)
	}
	var x, y unix.Stat_t
	treetest.Must(t, unix.Lstat(filepath.Join(upper, "hard/x"), &x))
	treetest.Must(t, unix.Lstat(filepath.Join(upper, "hard/y"), &y))
	if x.Ino != y.Ino {
		t.Errorf("hard/x and hard/y are not one file in the layer")
	}
	for _, p := range []string{"untouched", ".snapback"} {
		if _, err := os.Lstat(filepath.Join(upper, p)); !os.IsNotExist(err) {
			t.Errorf("%s is in the layer (%v)", p, err)
		}
	}

	treetest.Must(t, c.Destroy())
	treetest.Must(t, c.Destroy()) // a missing one is no error
	if ok, err := c.Complete(); ok || err != nil {
		t.Errorf("Complete after Destroy: %v, %v", ok, err)
	}
	for _, d := range []string{c.ViewDir(), c.BaseDir()} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("mount point %s left (%v)", d, err)
		}
	}
	out, err = exec.Command("zfs", "list", "-H", "-t", "all", "-o", "name").Output()
	treetest.Must(t, err)
	for _, n := range []string{c.Snap, c.View, c.Base} {
		if strings.Contains("\n"+string(out), "\n"+n+"\n") {
			t.Errorf("%s left", n)
		}
	}
}
