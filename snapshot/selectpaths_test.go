package snapshot

import (
	"testing"

	"github.com/snapback/snapback/snapshot/record"
)

// A partial commit of d, whose d/c is a hard link to b left pending:
// the selection (the journal's manifest) must decode. With the link
// kept, a commit killed after writing its journal left a journal that
// recover could not read, for ever (found by the model test).
func TestSelectPathsDropsLinksOutside(t *testing.T) {
	var id record.ObjectID
	id[0] = 1
	target := record.Manifest{
		{Path: "b", Type: record.File, Mode: 0o644, Size: 5, Object: id},
		{Path: "d", Type: record.Dir, Mode: 0o755},
		{Path: "d/c", Type: record.File, Mode: 0o644, Size: 5, Object: id, Link: "b"},
	}
	sel, _, err := (&Repo{}).selectPaths(&ViewRun{ID: "r"}, target, []string{"d"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 2 || sel[1].Path != "d/c" || sel[1].Link != "" {
		t.Fatalf("selection %+v: want d and d/c, unlinked", sel)
	}
	if _, err := record.DecodeManifest(record.EncodeManifest(sel)); err != nil {
		t.Fatalf("the selection does not decode: %v", err)
	}
	// Both selected: the link stays.
	sel, _, err = (&Repo{}).selectPaths(&ViewRun{ID: "r"}, target, []string{"b", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 3 || sel[2].Link != "b" {
		t.Fatalf("selection %+v: want d/c linked to b", sel)
	}
}
