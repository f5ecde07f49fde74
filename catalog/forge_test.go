package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// forge writes into a fresh catalog a self-consistent archive of m whose
// manifest edit changed: archives are not signed, so anyone can make one
// like it, and only what verify and restore check stands in the way.
func forge(t *testing.T, repo *snapshot.Repo, m *snapshot.Meta, edit func(snapshot.Manifest) snapshot.Manifest) (*Catalog, *Summary) {
	t.Helper()
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	mf, err := snapshot.DecodeManifest(p.manifest)
	treetest.Must(t, err)
	mf = edit(mf)
	mf.Sort()
	raw := snapshot.EncodeManifest(mf)
	sum := sha256.Sum256(raw)
	meta := *m
	meta.Manifest = hex.EncodeToString(sum[:])
	p.meta, p.manifest = &meta, raw
	p.metaJSON, err = snapshot.EncodeMeta(&meta)
	treetest.Must(t, err)
	p.files = 0
	for i := range mf {
		if mf[i].Type == snapshot.File {
			p.files++
		}
	}
	c := newCatalog(t)
	s, _, err := c.Create(repo, p, projectOf(t, repo), nil)
	treetest.Must(t, err)
	return c, s
}

// firstFile is a file entry of m, to copy.
func firstFile(t *testing.T, m snapshot.Manifest) snapshot.Entry {
	t.Helper()
	for _, e := range m {
		if e.Type == snapshot.File && e.Link == "" {
			return e
		}
	}
	t.Fatal("no file in the manifest")
	return snapshot.Entry{}
}

// An archive never writes a project's store: entries under .snapback/
// are refused at verify time with their code, and restore (fresh or
// merged into a project) creates nothing there.
func TestStoreEntriesRefused(t *testing.T) {
	repo, m := project(t, false)
	for _, paths := range [][]string{{".snapback"}, {".snapback", ".snapback/journal"}} {
		c, s := forge(t, repo, m, func(mf snapshot.Manifest) snapshot.Manifest {
			for i, p := range paths {
				e := firstFile(t, mf)
				if i < len(paths)-1 {
					e = snapshot.Entry{Type: snapshot.Dir, Mode: 0o755}
				}
				e.Path = p
				mf = append(mf, e)
			}
			return mf
		})
		_, err := c.Verify(FileName(s.ID), nil)
		code(t, err, CodeStoreEntry)
		into := filepath.Join(t.TempDir(), "into")
		_, err = c.Restore(FileName(s.ID), into, false, nil)
		code(t, err, CodeStoreEntry)
		_, err = c.Restore(FileName(s.ID), repo.Root, true, nil)
		code(t, err, CodeStoreEntry)
		if _, err := os.Lstat(filepath.Join(repo.Root, ".snapback", "journal")); err == nil {
			t.Fatal("a merge restore planted a journal in the store")
		}
		if _, err := os.Lstat(filepath.Join(into, ".snapback")); err == nil {
			t.Fatal("a restore made .snapback")
		}
	}
}
