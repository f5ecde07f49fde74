package snapshot_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// TestScanFileRemovedWhileRead: a file removed between the scan's listing
// and its read (as `git gc` removes loose objects it has packed while a
// checkpoint begins) is not part of the snapshot; the snapshot does not
// fail. A real race would hit that moment only by chance, so a test hook
// removes the file at exactly that point.
func TestScanFileRemovedWhileRead(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "keep.txt", "kept\n", 0o644)
	treetest.Write(t, root, ".git/objects/0d/ab13", "loose object\n", 0o444)
	treetest.Write(t, root, ".git/objects/pack/p.pack", "pack\n", 0o444)
	r := openRepo(t, root)
	var once sync.Once
	snapshot.SetBeforeHash(func(p string) {
		if p == ".git/objects/0d/ab13" {
			once.Do(func() { treetest.Must(t, os.Remove(filepath.Join(root, p))) })
		}
	})
	t.Cleanup(func() { snapshot.SetBeforeHash(nil) })
	m, err := r.Snap(record.KindSnap, "")
	if err != nil {
		t.Fatalf("snap with a file removed while it was read: %v", err)
	}
	mf, err := r.LoadManifest(m.Manifest)
	treetest.Must(t, err)
	if e := mf.Find(".git/objects/0d/ab13"); e != nil {
		t.Fatalf("the removed file is in the snapshot: %+v", e)
	}
	for _, p := range []string{"keep.txt", ".git/objects/pack/p.pack"} {
		if e := mf.Find(p); e == nil || e.Type != record.File {
			t.Fatalf("%s missing from the snapshot: %+v", p, e)
		}
	}
	// Listed paths keep an entry each: the removed one as absent.
	treetest.Write(t, root, "again.txt", "x\n", 0o644)
	snapshot.SetBeforeHash(func(p string) {
		if p == "again.txt" {
			treetest.Must(t, os.Remove(filepath.Join(root, p)))
		}
	})
	pm, err := r.ScanPaths([]string{"again.txt", "keep.txt"}, true, false)
	treetest.Must(t, err)
	if e := pm.Find("again.txt"); e == nil || e.Type != record.Absent {
		t.Fatalf("a listed path removed while read: %+v, want absent", e)
	}
}
