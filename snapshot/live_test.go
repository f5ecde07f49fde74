package snapshot_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot/record"
)

// Live records: a checkpoint's begin and end, and every open's recovery,
// read the live records' markers, not the history. Shown by damaging
// every closed record: begin and end still work, and find each other's
// open checkpoint, while the verbs that read the history still report the
// damage. A store made before markers existed (no live/) is read whole
// until an open that may change it marks what is live, once; a marker
// left by a crash is passed over.
func TestLiveRecords(t *testing.T) {
	root := t.TempDir()
	treetest.Must(t, os.WriteFile(filepath.Join(root, "f"), []byte("0"), 0o644))
	r := openRepo(t, root)
	live := filepath.Join(r.Dir, "live")
	var ids []string
	for i := 0; i < 20; i++ {
		treetest.Must(t, os.WriteFile(filepath.Join(root, "f"), []byte(fmt.Sprint(i)), 0o644))
		m, err := r.Snap(record.KindSnap, fmt.Sprint("s", i))
		treetest.Must(t, err)
		ids = append(ids, m.ID)
	}
	if _, err := os.Stat(filepath.Join(live, "complete")); err != nil {
		t.Fatalf("a new store's markers are not complete: %v", err)
	}
	// Begin: marked; another session's begin sees it.
	a, _, err := r.BeginCheckpoint("a", "")
	treetest.Must(t, err)
	if _, err := os.Stat(filepath.Join(live, a.ID)); err != nil {
		t.Fatalf("an open checkpoint has no marker: %v", err)
	}
	// Every closed record damaged: the hot verbs do not read them.
	for _, id := range ids {
		treetest.Must(t, os.WriteFile(filepath.Join(r.Dir, "snapshots", id+".json"), []byte("{"), 0o600))
	}
	b, _, err := r.BeginCheckpoint("b", "")
	treetest.Must(t, err)
	open, err := r.OpenCheckpoints()
	treetest.Must(t, err)
	if len(open) != 2 || open[0].ID != a.ID || open[1].ID != b.ID {
		t.Fatalf("open checkpoints %v, want %s and %s", open, a.ID, b.ID)
	}
	if b.CreatedAt.Before(a.CreatedAt) || !b.CreatedAt.After(a.CreatedAt) {
		t.Fatalf("b made at %v, not after a at %v", b.CreatedAt, a.CreatedAt)
	}
	if _, err := r.List(); err == nil {
		t.Fatal("List read the damaged history without an error")
	}
	treetest.Must(t, os.WriteFile(filepath.Join(root, "f"), []byte("by a"), 0o644))
	if _, _, err := r.EndCheckpoint("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(live, a.ID)); !os.IsNotExist(err) {
		t.Fatalf("a closed checkpoint's marker is still there: %v", err)
	}
	// A marker left by a crash (its record closed, or gone) is passed over.
	treetest.Must(t, os.WriteFile(filepath.Join(live, a.ID), nil, 0o600))
	treetest.Must(t, os.WriteFile(filepath.Join(live, "20990101-000000-abcdef"), nil, 0o600))
	open, err = r.OpenCheckpoints()
	treetest.Must(t, err)
	if len(open) != 1 || open[0].ID != b.ID {
		t.Fatalf("open checkpoints %v, want only %s", open, b.ID)
	}
	// A store without markers (made before them): read whole, then
	// marked by the next open that may change the store.
	treetest.Must(t, os.RemoveAll(live))
	for _, id := range ids {
		treetest.Must(t, os.Remove(filepath.Join(r.Dir, "snapshots", id+".json")))
	}
	open, err = r.OpenCheckpoints()
	treetest.Must(t, err)
	if len(open) != 1 || open[0].ID != b.ID {
		t.Fatalf("without markers: open checkpoints %v, want %s", open, b.ID)
	}
	r.Close()
	r2 := openRepo(t, root)
	for _, n := range []string{"complete", b.ID} {
		if _, err := os.Stat(filepath.Join(r2.Dir, "live", n)); err != nil {
			t.Fatalf("the open after markers existed did not mark: %v", err)
		}
	}
	if _, _, err := r2.EndCheckpoint("b"); err != nil {
		t.Fatal(err)
	}
}
