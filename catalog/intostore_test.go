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

// snapTree makes a project of files (path: content), snapshots it and
// archives the snapshot into c.
func snapTree(t *testing.T, c *Catalog, files map[string]string) *Summary {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		treetest.Write(t, root, p, content, 0o644)
	}
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	m, err := repo.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	return create(t, c, repo, m)
}

// An archive whose files are named like a store's (journal.json,
// objects/…) restored into a store would plant a journal that the next
// snapback there "finishes" over the project's tree: a restore never
// writes into a store, however the directory is named.
func TestRestoreNeverIntoAStore(t *testing.T) {
	c := newCatalog(t)
	s := snapTree(t, c, map[string]string{
		"journal.json":                          `{"op":"restore"}`,
		"objects/ab/" + strings.Repeat("c", 62): "planted",
	})
	victim := t.TempDir()
	treetest.Write(t, victim, "work.txt", "the victim's work\n", 0o644)
	repo, err := snapshot.Open(victim, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	_, err = repo.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	repo.Close()
	before := treetest.Capture(t, victim)
	store := filepath.Join(victim, snapshot.StoreDir)
	link := filepath.Join(t.TempDir(), "link")
	treetest.Must(t, os.Symlink(store, link))
	for _, into := range []string{
		store,                                   // the store itself
		filepath.Join(store, "objects"),         // beneath it
		filepath.Join(store, "new", "dir"),      // beneath it, not there yet
		filepath.Join(t.TempDir(), ".snapback"), // one it would make
		filepath.Join(link, "objects"),          // through a symlink to it
	} {
		for _, merge := range []bool{false, true} {
			_, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{Merge: merge}, nil)
			code(t, err, CodeStoreEntry)
			if !strings.Contains(err.Error(), ".snapback") {
				t.Errorf("restore into %s: %v does not name the store", into, err)
			}
		}
	}
	treetest.Equal(t, "the victim after refused restores", before, treetest.Capture(t, victim))
}

// A .snapback component anywhere in an archived path (a nested
// project's store) is refused before anything is written; the archive
// itself is a faithful record and verifies.
func TestRestoreRefusesNestedStoreEntries(t *testing.T) {
	c := newCatalog(t)
	s := snapTree(t, c, map[string]string{
		"a.txt":                      "alpha",
		"sub/.snapback/journal.json": `{"op":"restore"}`,
	})
	if _, err := c.Verify(context.Background(), FileName(s.ID), nil); err != nil {
		t.Fatal(err)
	}
	into := filepath.Join(t.TempDir(), "into")
	for _, merge := range []bool{false, true} {
		_, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{Merge: merge}, nil)
		code(t, err, CodeStoreEntry)
		if !strings.Contains(err.Error(), "sub/.snapback") {
			t.Errorf("%v does not name the path", err)
		}
		if _, err := os.Lstat(into); !os.IsNotExist(err) {
			t.Fatalf("a refused restore made %s: %v", into, err)
		}
	}
}

// A target payload whose path has a .snapback component (forged: a
// backend never writes one) would make DIR/.snapback-targets/N a
// project with a planted store: refused before anything is written.
func TestRestoreRefusesStoreInPayload(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "alpha", 0o644)
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	defer repo.Close()
	m, err := repo.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	journal := filepath.Join(t.TempDir(), "journal.json")
	treetest.Write(t, filepath.Dir(journal), "journal.json", `{"op":"restore"}`, 0o600)
	meta := *m
	meta.Targets = []record.TargetState{{Name: "db", Backend: "sqlite", Payload: "targets/" + m.ID + "/0", Bytes: 16}}
	p.meta = &meta
	p.metaJSON, err = record.EncodeMeta(&meta)
	treetest.Must(t, err)
	p.payloads = []payloadFile{{name: targetsDir + "0/.snapback/journal.json", path: journal, size: 16}}
	c := newCatalog(t)
	s, _, err := c.Create(context.Background(), repo, p, projectOf(t, repo), nil)
	treetest.Must(t, err)
	if _, err := c.Verify(context.Background(), FileName(s.ID), nil); err != nil {
		t.Fatal(err)
	}
	into := filepath.Join(t.TempDir(), "into")
	_, err = c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
	code(t, err, CodeStoreEntry)
	if _, err := os.Lstat(into); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made %s: %v", into, err)
	}
}
