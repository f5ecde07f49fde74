package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// TestOpenAccess: each access level deals with a journal it cannot follow
// as it says: a reader is warned and goes on, a writer refuses, a repair
// opens to set it aside. Open and OpenReader each take only their own.
func TestOpenAccess(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "alpha\n", 0o644)
	if _, err := snapshot.OpenReader(root, snapshot.Options{}); !errors.Is(err, snapshot.ErrNoStore) {
		t.Fatalf("reader of a project with no store: %v, want ErrNoStore", err)
	}
	if _, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForRead}); err == nil {
		t.Fatal("Open for reading: no error")
	}
	if _, err := snapshot.OpenReader(root, snapshot.Options{Access: snapshot.ForChange}); err == nil {
		t.Fatal("OpenReader for changing: no error")
	}
	w, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	_, err = w.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	w.Close()
	treetest.Write(t, filepath.Join(root, snapshot.StoreDir), "journal.json", "not a journal", 0o600)

	var warnings []string
	r, err := snapshot.OpenReader(root, snapshot.Options{Warn: func(m string) { warnings = append(warnings, m) }})
	treetest.Must(t, err)
	h, err := r.History()
	treetest.Must(t, err)
	r.Close()
	if len(h.All) != 1 || len(warnings) != 1 || !strings.Contains(warnings[0], "not followed") {
		t.Fatalf("reader: %d records, warnings %q; want 1 record and the journal not followed", len(h.All), warnings)
	}
	if _, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange}); err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("writer over a bad journal: %v, want a refusal naming it", err)
	}
	rp, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForRepair})
	treetest.Must(t, err)
	defer rp.Close()
	rep, err := rp.Repair(snapshot.CheckOptions{})
	treetest.Must(t, err)
	if len(rep.Damaged) != 1 || rep.Damaged[0].Kind != snapshot.DamageJournal {
		t.Fatalf("repair found %+v, want the journal", rep.Damaged)
	}
	if _, err := os.Lstat(filepath.Join(root, snapshot.StoreDir, "journal.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after the repair: %v, want it set aside", err)
	}
}
