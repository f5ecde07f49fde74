package catalog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// FuzzDecodeSummary: any input is either refused or a summary that
// passes its own checks.
func FuzzDecodeSummary(f *testing.F) {
	f.Add([]byte(`{"format":"snapback-archive/1","id":"0123456789abcdef0123456789abcdef","snapshot":"20261130-000000-abcdef","kind":"snap","project":"/p","project_id":"0123456789abcdef0123456789abcdef","snapshot_created_at":"2026-11-30T00:00:00Z","created_at":"2026-11-30T00:00:00Z","files":1,"objects":1,"targets":0,"entries":3,"bytes":10,"archive_sha256":"` + strings.Repeat("a", 64) + `"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"snapback-archive/1","files":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if s.Format != Format || len(s.ID) != 32 || s.Files < 0 || s.Bytes < 0 {
			t.Fatalf("accepted %+v", s)
		}
	})
}

var restored atomic.Int64

// FuzzArchive: any file is either refused with a code, or verifies and
// then restores only beneath the directory it is restored into.
func FuzzArchive(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	lim := Limits{MaxEntries: 1000, MaxEntrySize: 1 << 20, MaxTotal: 4 << 20, MaxRatio: 50, MaxMeta: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := newReader(bytes.NewReader(b), int64(len(b)), "fuzz", lim)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if err := r.check(context.Background(), "", nil); err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		// It verifies: then a restore writes only beneath its directory.
		if r.manifest == nil && r.meta == nil {
			t.Fatal("verified, but its snapshot was not read")
		}
		// Every byte counts: the same bytes with one more before or
		// after, or holding a path in a project's store, do not verify.
		for _, c := range [][]byte{append([]byte{0}, b...), append(bytes.Clone(b), 0)} {
			if r2, err := newReader(bytes.NewReader(c), int64(len(c)), "fuzz", lim); err == nil && r2.check(context.Background(), "", nil) == nil {
				t.Fatal("verified with a byte added")
			}
		}
		for _, e := range r.manifest {
			if e.Path == snapshot.StoreDir || strings.HasPrefix(e.Path, snapshot.StoreDir+"/") {
				t.Fatalf("verified with %q in it", e.Path)
			}
		}
		if checkRestorable(r.manifest) != nil {
			return
		}
		// What a restore would write holds no store at any depth.
		for _, e := range r.manifest {
			if inStore(e.Path) {
				t.Fatalf("restorable with %q in it", e.Path)
			}
		}
		if restored.Add(1) > 20 {
			return // restoring writes and syncs files: a few per process tell enough
		}
		c := &Catalog{Dir: t.TempDir(), Limits: lim}
		name := FileName(r.summary.ID)
		if err := os.WriteFile(filepath.Join(c.Dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		outer := t.TempDir()
		if _, err := c.Restore(context.Background(), name, filepath.Join(outer, "into"), RestoreOptions{}, nil); err != nil && CodeOf(err) == "" {
			t.Fatalf("restore error without a code: %v", err)
		}
		if ents, _ := os.ReadDir(outer); len(ents) > 1 {
			t.Fatalf("restore wrote beside its directory: %v", ents)
		}
		// Never into a store, or beneath one.
		for _, into := range []string{filepath.Join(outer, snapshot.StoreDir), filepath.Join(outer, snapshot.StoreDir, "objects")} {
			if _, err := c.Restore(context.Background(), name, into, RestoreOptions{Merge: true}, nil); CodeOf(err) != CodeStoreEntry {
				t.Fatalf("restore into %s: %v, want %s", into, err, CodeStoreEntry)
			}
		}
		if _, err := os.Lstat(filepath.Join(outer, snapshot.StoreDir)); err == nil {
			t.Fatal("a refused restore made a store")
		}
	})
}

// fuzzSeeds: a real small archive (files, a link, a symlink, a fifo),
// and a few shapes that are not.
func fuzzSeeds(f *testing.F) [][]byte {
	root := f.TempDir()
	treetest.Write(f, root, "a.txt", "alpha\n", 0o644)
	treetest.Write(f, root, "d/b.txt", "bravo\n", 0o600)
	treetest.Must(f, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "d/hard")))
	treetest.Must(f, os.Symlink("../a.txt", filepath.Join(root, "d/link")))
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(f, err)
	defer repo.Close()
	m, err := repo.Snap(record.KindSnap, "seed")
	treetest.Must(f, err)
	c := &Catalog{Dir: f.TempDir(), Limits: DefaultLimits}
	archive := func(repo *snapshot.Repo, m *record.Meta) []byte {
		p, err := PlanArchive(repo, m)
		treetest.Must(f, err)
		s, _, err := c.Create(context.Background(), repo, p, projectOf(f, repo), nil)
		treetest.Must(f, err)
		b, err := os.ReadFile(c.Path(s.ID))
		treetest.Must(f, err)
		return b
	}
	b := archive(repo, m)
	// A nested project's store, and files named like a store's: what a
	// restore into (or of) a store would plant.
	treetest.Write(f, root, "sub/.snapback/journal.json", `{"op":"restore"}`, 0o600)
	treetest.Write(f, root, "journal.json", `{"op":"restore"}`, 0o600)
	treetest.Write(f, root, "objects/ab/"+strings.Repeat("c", 62), "planted", 0o600)
	m, err = repo.Snap(record.KindSnap, "nested store")
	treetest.Must(f, err)
	nested := archive(repo, m)
	// The shapes the layout check refuses, for the fuzzer to start from.
	comment := append(bytes.Clone(b), "payload"...)
	comment[len(b)-2] = 7
	flipped := bytes.Clone(b)
	flipped[31] ^= 1
	return [][]byte{b, nested, []byte("PK\x03\x04"), {}, append([]byte("prefix"), b...), append(bytes.Clone(b), "suffix"...), comment, flipped}
}
