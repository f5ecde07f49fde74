package backends_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/internal/treetest"
)

// The apfs fixture runs where the backend is available (macOS): a plain
// directory in the test's temp dir, on the APFS data volume, under the
// tree writer.
func init() {
	fixtures["apfs"] = fixture{
		setup: func(t *testing.T, root string) backends.Target {
			treetest.Must(t, os.Mkdir(filepath.Join(root, "data"), 0o755))
			return backends.Target{Backend: "apfs", Path: "data"}
		},
		bad: func(t *testing.T, root string) map[string]backends.Target {
			writeFile(t, filepath.Join(root, "file"), "x")
			treetest.Must(t, os.Symlink("data", filepath.Join(root, "link")))
			return map[string]backends.Target{
				"missing":   {Backend: "apfs", Path: "nope"},
				"a file":    {Backend: "apfs", Path: "file"},
				"a symlink": {Backend: "apfs", Path: "link"},
				"no path":   {Backend: "apfs"},
			}
		},
		state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
			return treeState(t, filepath.Join(root, tg.Path))
		},
		write: func(t *testing.T, tg backends.Target, root string) error {
			return treeWrite(filepath.Join(root, tg.Path))
		},
	}
}

// TestAPFSRestore (macOS): a restore drops what was made after the
// snapshot, and deletes the leftover of a killed restore.
func TestAPFSRestore(t *testing.T) {
	b := &backends.APFS{}
	ok, why := b.Available()
	if !treetest.Require(t, "apfs", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name it: " + why)
	}
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "data")
	treetest.Must(t, os.Mkdir(p, 0o755))
	for i := 0; i < 3; i++ {
		treetest.Must(t, treeWrite(p))
	}
	writeFile(t, filepath.Join(p, "sub", "file"), "kept")
	want := treetest.Capture(t, p)
	tg := backends.Target{Backend: "apfs", Path: p}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	writeFile(t, filepath.Join(p, "new"), "made after the snapshot")
	writeFile(t, filepath.Join(p, "sub", "file"), "changed")
	// A killed restore left its copy (or the old tree) beside the target.
	writeFile(t, filepath.Join(restoreName(p), "junk"), "leftover")
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	treetest.Equal(t, "after restore", want, treetest.Capture(t, p))
	if _, err := os.Lstat(restoreName(p)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the old tree is still there: %v", err)
	}
	treetest.Must(t, os.RemoveAll(p))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	treetest.Equal(t, "after restoring a deleted target", want, treetest.Capture(t, p))
}
