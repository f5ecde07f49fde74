package snapshot_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// TestProgressReports: a snapshot reports its scan (paths and bytes so
// far, then a Done report with the totals) and an undo its apply (paths
// of the total), through Repo.Progress, from however many goroutines.
func TestProgressReports(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 50; i++ {
		treetest.Write(t, root, fmt.Sprintf("d/f%02d", i), "0123456789\n", 0o644)
	}
	r := openRepo(t, root)
	var mu sync.Mutex
	var got []snapshot.Progress
	r.Progress = func(p snapshot.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}
	if _, err := r.Snap(record.KindSnap, "base"); err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1]
	if last.Step != snapshot.StepScan || !last.Done || last.Paths != 51 || last.Bytes != 50*11 {
		t.Errorf("last report of the scan %+v, want Done with 51 paths and %d bytes", last, 50*11)
	}
	if n := len(got); n < 51 {
		t.Errorf("%d reports for a scan of 51 paths, want one a path", n)
	}
	treetest.Must(t, os.RemoveAll(filepath.Join(root, "d")))
	got = nil
	if _, _, err := r.Undo("", false); err != nil {
		t.Fatal(err)
	}
	var apply []snapshot.Progress
	for _, p := range got {
		if p.Step == snapshot.StepApply {
			apply = append(apply, p)
		}
	}
	if len(apply) == 0 {
		t.Fatalf("undo reported no apply: %+v", got)
	}
	end := apply[len(apply)-1]
	if !end.Done || end.Total < 51 || end.Paths < 51 || end.Paths > end.Total {
		t.Errorf("last report of the apply %+v, want Done with at least the 51 paths of the total", end)
	}
}

// TestSkippedSocket: a socket in the tree is not in a snapshot, and the
// scan says so (ScanStats.Skipped) rather than dropping it unseen.
func TestSkippedSocket(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a", "a\n", 0o644)
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	treetest.Must(t, err)
	defer l.Close()
	r := openRepo(t, root)
	m, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	if m.Files != 1 {
		t.Errorf("snapshot holds %d files, want 1 (the socket is not one)", m.Files)
	}
	want := []record.Skipped{{Path: "sock", Type: record.SkippedSocket}}
	if fmt.Sprint(r.LastScan.Skipped) != fmt.Sprint(want) {
		t.Errorf("skipped %v, want %v", r.LastScan.Skipped, want)
	}
}
