package catalog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// threeArchives makes a catalog with three archives of one project, each
// of a newer snapshot, archived in that order.
func threeArchives(t *testing.T) (*Catalog, []string) {
	t.Helper()
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "v0", 0o644)
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	c := newCatalog(t)
	var ids []string
	for i := 0; i < 3; i++ {
		treetest.Write(t, root, "a.txt", strings.Repeat("v", i+2), 0o644)
		m, err := repo.Snap(record.KindSnap, "")
		treetest.Must(t, err)
		ids = append(ids, create(t, c, repo, m).ID)
	}
	return c, ids
}

// allThere fails the test unless every archive is still in the catalog
// and verifies.
func allThere(t *testing.T, c *Catalog, ids []string, corrupt string) {
	t.Helper()
	for _, id := range ids {
		if _, err := os.Lstat(c.Path(id)); err != nil {
			t.Errorf("a refused prune deleted %s: %v", id, err)
		} else if _, err := c.Verify(context.Background(), FileName(id), nil); (err != nil) != (id == corrupt) {
			t.Errorf("archive %s: verify %v", id, err)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(c.Dir, ".snapback-prune-*")); len(ents) > 0 {
		t.Errorf("staging left behind: %v", ents)
	}
}

// A kept archive damaged after the preview (a byte flipped, its mtime set
// back) makes the apply refuse: deleting the others would leave no valid
// archive.
func TestPruneRechecksKept(t *testing.T) {
	c, ids := threeArchives(t)
	tokens := t.TempDir()
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Kept) != 1 || plan.Kept[0].ID != ids[2] || len(plan.Delete) != 2 {
		t.Fatalf("plan keeps %v, deletes %v", plan.Kept, plan.Delete)
	}
	kept := c.Path(ids[2])
	st, err := os.Stat(kept)
	treetest.Must(t, err)
	b, err := os.ReadFile(kept)
	treetest.Must(t, err)
	b[len(b)/3] ^= 1
	f, err := os.OpenFile(kept, os.O_WRONLY, 0)
	treetest.Must(t, err)
	_, err = f.WriteAt(b, 0)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
	treetest.Must(t, os.Chtimes(kept, st.ModTime(), st.ModTime()))
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeStale)
	allThere(t, c, ids, ids[2])
}

// A kept archive whose owner changed after the preview, even changed
// back (only its ctime says so), makes the apply refuse.
func TestPruneRechecksKeptOwner(t *testing.T) {
	if !treetest.Require(t, "root", os.Geteuid() == 0, "giving a file away needs root") {
		t.Skip("SNAPBACK_REQUIRE does not name root: not root")
	}
	for _, back := range []bool{false, true} {
		c, ids := threeArchives(t)
		tokens := t.TempDir()
		plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
		treetest.Must(t, err)
		kept := c.Path(ids[2])
		treetest.Must(t, os.Chown(kept, 1001, 1001))
		corrupt := ids[2] // not the user's: not a valid catalog member
		if back {
			treetest.Must(t, os.Chown(kept, os.Geteuid(), os.Getegid()))
			corrupt = ""
		}
		_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
		code(t, err, CodeStale)
		allThere(t, c, ids, corrupt)
	}
}

// The catalog directory replaced by another holding the same files (hard
// links: the same inodes, sizes and mtimes) is not the catalog previewed.
func TestPruneBindsTheDirectory(t *testing.T) {
	c, ids := threeArchives(t)
	tokens := t.TempDir()
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	old := c.Dir + ".old"
	treetest.Must(t, os.Rename(c.Dir, old))
	treetest.Must(t, os.Mkdir(c.Dir, 0o700))
	for _, id := range ids {
		treetest.Must(t, os.Link(filepath.Join(old, FileName(id)), c.Path(id)))
	}
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeStale)
	if !strings.Contains(err.Error(), c.Dir) {
		t.Errorf("%v does not name the directory", err)
	}
	allThere(t, c, ids, "")
}

// "Newest" is the state an archive holds: an old snapshot archived last
// is still the oldest, and prune keeps the newer states.
func TestPruneKeepsNewestSnapshots(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "old", 0o644)
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	defer repo.Close()
	old, err := repo.Snap(record.KindSnap, "old")
	treetest.Must(t, err)
	treetest.Write(t, root, "a.txt", "new", 0o644)
	newer, err := repo.Snap(record.KindSnap, "new")
	treetest.Must(t, err)
	c := newCatalog(t)
	sNew := create(t, c, repo, newer)
	sOld := create(t, c, repo, old) // written last
	l, err := c.List(context.Background(), nil)
	treetest.Must(t, err)
	if len(l.Archives) != 2 || l.Archives[1].ID != sNew.ID {
		t.Fatalf("listed %v, want the newer snapshot's archive last", l.Archives)
	}
	tokens := t.TempDir()
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Kept) != 1 || plan.Kept[0].ID != sNew.ID || len(plan.Delete) != 1 || plan.Delete[0].ID != sOld.ID {
		t.Fatalf("plan keeps %v, deletes %v; want the newer state kept", plan.Kept, plan.Delete)
	}
	res, err := c.PruneApply(context.Background(), plan.Token, tokens, nil)
	treetest.Must(t, err)
	if len(res.Deleted) != 1 || res.Deleted[0] != FileName(sOld.ID) {
		t.Fatalf("deleted %v", res.Deleted)
	}
}

// A listing's change check sees a change that only the ctime shows (a
// mode changed and set back during the scan).
func TestListSeesCtime(t *testing.T) {
	c, ids := threeArchives(t)
	once := false
	_, err := c.List(context.Background(), func(int64) {
		if !once {
			once = true
			p := c.Path(ids[0])
			treetest.Must(t, os.Chmod(p, 0o644))
			treetest.Must(t, os.Chmod(p, 0o600))
		}
	})
	code(t, err, CodeChanged)
}
