package snapshot_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// A target payload that lost its settings is damage, named with the
// snapshot that needs it; a damaged record's payloads survive the sweep
// after the record is moved aside.
func TestCheckPayloads(t *testing.T) {
	snapshot.UseBackends(func(name string) (snapshot.Backend, error) { return backends.Get(name) }) // as the program does
	root := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(root, "app.db")) // the driver the sqlite backend registers
	treetest.Must(t, err)
	_, err = db.Exec("CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('one')")
	treetest.Must(t, err)
	treetest.Must(t, db.Close())
	treetest.Write(t, root, "a.txt", "alpha\n", 0o644)
	r := openRepo(t, root)
	r.Targets = []config.Target{{Name: "app", Backend: "sqlite", Path: "app.db"}}
	s1, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	s2, err := r.Snap(record.KindSnap, "two")
	treetest.Must(t, err)

	rep, err := r.Check(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	if len(rep.Damaged) != 0 || rep.SnapshotsChecked != 2 || rep.ObjectsChecked == 0 {
		t.Fatalf("good store: %+v", rep)
	}

	payload := s1.Targets[0].Payload
	treetest.Must(t, os.Remove(filepath.Join(r.Dir, payload, "target.json")))
	rep, err = r.Check(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	if len(rep.Damaged) != 1 {
		t.Fatalf("damage %+v, want the payload alone", rep.Damaged)
	}
	d := rep.Damaged[0]
	if d.Kind != snapshot.DamagePayload || d.ID != payload || !strings.Contains(d.Problem, "target.json") ||
		len(d.Snapshots) != 1 || d.Snapshots[0] != s1.ID {
		t.Fatalf("damage %+v, want payload %s of %s", d, payload, s1.ID)
	}

	// s2's record cut short: listing it is an error naming it, until it
	// is moved aside; its payload stays through the sweep.
	rec := filepath.Join(r.Dir, "snapshots", s2.ID+".json")
	treetest.Must(t, os.Truncate(rec, 40))
	if _, err := r.List(); err == nil || !strings.Contains(err.Error(), rec) {
		t.Fatalf("List with a damaged record: %v, want an error naming %s", err, rec)
	}
	moved, err := r.MoveDamagedAside()
	treetest.Must(t, err)
	if len(moved) != 1 || !strings.Contains(moved[0], s2.ID) {
		t.Fatalf("moved %q", moved)
	}
	treetest.Must(t, r.SweepPayloads())
	if _, err := os.Stat(filepath.Join(r.Dir, s2.Targets[0].Payload, "data")); err != nil {
		t.Fatalf("the payload of a record moved aside was swept: %v", err)
	}
}

// A record whose target payload points out of the store does not decode:
// restores would read and write there.
func TestMetaPayloadOutsideStore(t *testing.T) {
	for _, p := range []string{"../../etc", "targets/20200101-000000-aaaaaa/../../x", "/tmp/x", "targets/x/0"} {
		m := &record.Meta{ID: "20200101-000000-aaaaaa", Kind: record.KindSnap, Scope: record.ScopeTree,
			Manifest: strings.Repeat("0", 64), Targets: []record.TargetState{{Name: "t", Backend: "sqlite", Payload: p}}}
		m.CreatedAt = m.CreatedAt.AddDate(2020, 0, 0)
		b, err := record.EncodeMeta(m)
		treetest.Must(t, err)
		if _, err := record.DecodeMeta(b); err == nil {
			t.Errorf("payload %q: decoded", p)
		}
	}
}
