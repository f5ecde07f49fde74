package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// cacheTree writes a small tree, waits until the stat cache will trust
// it, and takes a first snapshot, which writes the cache.
func cacheTree(t *testing.T) (root string, r *snapshot.Repo, first *record.Meta, warnings *[]string) {
	t.Helper()
	root = t.TempDir()
	treetest.Write(t, root, "a.txt", "alpha\n", 0o644)
	treetest.Write(t, root, "d/b.txt", "bravo\n", 0o644)
	treetest.Write(t, root, "d/e/c.txt", strings.Repeat("charlie ", 1000), 0o600)
	// The cache only trusts files whose ctime is safely older than the
	// moment they were hashed (50 ms with nanosecond timestamps).
	time.Sleep(100 * time.Millisecond)
	r = openRepo(t, root)
	warnings = new([]string)
	r.Warn = func(msg string) { *warnings = append(*warnings, msg) }
	first, err := r.Snap(record.KindSnap, "first")
	treetest.Must(t, err)
	// The cache is believed from here on: a second scan reads nothing.
	if _, err := r.ScanTree(true); err != nil {
		t.Fatal(err)
	}
	if r.LastScan.FilesRead != 0 {
		t.Fatalf("scan with a warm cache read %d files, want 0", r.LastScan.FilesRead)
	}
	if len(*warnings) != 0 {
		t.Fatalf("warnings on a good store: %q", *warnings)
	}
	return root, r, first, warnings
}

// checkSnapAfterDamage takes a snapshot after the cache was damaged: it
// must warn, read every file again, and record the tree exactly as the
// first snapshot did, naming only objects the store holds.
func checkSnapAfterDamage(t *testing.T, r *snapshot.Repo, first *record.Meta, warnings *[]string, what string) {
	t.Helper()
	*warnings = nil
	m, err := r.Snap(record.KindSnap, what)
	if err != nil {
		t.Fatalf("%s: snap: %v", what, err)
	}
	if len(*warnings) != 1 || !strings.Contains((*warnings)[0], "stat cache") || !strings.Contains((*warnings)[0], "damaged") {
		t.Fatalf("%s: warnings %q, want one saying the stat cache is damaged", what, *warnings)
	}
	if r.LastScan.FilesRead != 3 {
		t.Fatalf("%s: snap read %d files, want all 3 (the cache must not be believed)", what, r.LastScan.FilesRead)
	}
	if m.Manifest != first.Manifest {
		t.Fatalf("%s: manifest %s, want %s (the tree did not change)", what, m.Manifest, first.Manifest)
	}
	mf, err := r.LoadManifest(m.Manifest)
	treetest.Must(t, err)
	mf.Objects(func(o record.ObjectID) {
		if !r.HasObject(o) {
			t.Fatalf("%s: the snapshot names object %s, which the store lacks", what, o)
		}
	})
}

// A flipped bit anywhere in the stat cache is caught: the cache is
// discarded with a warning and the snapshot is what a full read gives.
func TestStatCacheBitFlip(t *testing.T) {
	_, r, first, warnings := cacheTree(t)
	index := filepath.Join(r.Dir, "index")
	good, err := os.ReadFile(index)
	treetest.Must(t, err)
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 1 << (i % 8)
		treetest.Must(t, os.WriteFile(index, bad, 0o600))
		*warnings = nil
		m, err := r.ScanTree(true)
		if err != nil {
			t.Fatalf("bit %d of byte %d flipped: scan: %v", i%8, i, err)
		}
		if len(*warnings) != 1 || r.LastScan.FilesRead != 3 {
			t.Fatalf("bit %d of byte %d flipped: warnings %q, %d files read; want one warning and 3 read", i%8, i, *warnings, r.LastScan.FilesRead)
		}
		id, err := r.PutManifest(m)
		treetest.Must(t, err)
		if id.String() != first.Manifest {
			t.Fatalf("bit %d of byte %d flipped: manifest %s, want %s", i%8, i, id, first.Manifest)
		}
	}
	// And once more through a real snapshot.
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x10
	treetest.Must(t, os.WriteFile(index, bad, 0o600))
	checkSnapAfterDamage(t, r, first, warnings, "bit flip")
}

// An entry rewritten to name another file's object (the checksum left as
// it was) is caught by the checksum: undo must never write b's content
// into a.
func TestStatCacheEntryPointsElsewhere(t *testing.T) {
	_, r, first, warnings := cacheTree(t)
	index := filepath.Join(r.Dir, "index")
	b, err := os.ReadFile(index)
	treetest.Must(t, err)
	alpha, bravo := sha256.Sum256([]byte("alpha\n")), sha256.Sum256([]byte("bravo\n"))
	if bytes.Count(b, alpha[:]) != 1 {
		t.Fatalf("the cache does not hold a.txt's object once")
	}
	treetest.Must(t, os.WriteFile(index, bytes.Replace(b, alpha[:], bravo[:], 1), 0o600))
	checkSnapAfterDamage(t, r, first, warnings, "entry pointing at another object")
}

// A cache that is truncated, empty, of an unknown version, oversized,
// out of order, not a regular file, or holds an invalid path, is
// discarded likewise.
func TestStatCacheDamagedForms(t *testing.T) {
	_, r, first, warnings := cacheTree(t)
	index := filepath.Join(r.Dir, "index")
	good, err := os.ReadFile(index)
	treetest.Must(t, err)
	rehash := func(body []byte) []byte {
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	body := good[:len(good)-sha256.Size]
	cases := map[string]func(){
		"truncated":       func() { treetest.Must(t, os.WriteFile(index, good[:len(good)-7], 0o600)) },
		"only the header": func() { treetest.Must(t, os.WriteFile(index, []byte("snapback-index-4\n"), 0o600)) },
		"unknown version": func() {
			treetest.Must(t, os.WriteFile(index, rehash(bytes.Replace(body, []byte("index-4"), []byte("index-9"), 1)), 0o600))
		},
		"entries twice": func() {
			// Every entry again after the last, the checksum
			// recomputed: out of order, so not believed.
			twice := append(bytes.Clone(body), body[len("snapback-index-4\n"):]...)
			treetest.Must(t, os.WriteFile(index, rehash(twice), 0o600))
		},
		"invalid path": func() {
			// "a.txt" becomes "../ax", the checksum recomputed: only the
			// path check can catch it.
			i := bytes.Index(body, []byte("a.txt"))
			bad := bytes.Clone(body)
			copy(bad[i:], "../ax")
			treetest.Must(t, os.WriteFile(index, rehash(bad), 0o600))
		},
		"a FIFO": func() {
			treetest.Must(t, unix.Mkfifo(index, 0o600))
		},
		"a symlink to /dev/zero": func() {
			treetest.Must(t, os.Symlink("/dev/zero", index))
		},
		"2 GiB of zeros": func() {
			f, err := os.Create(index)
			treetest.Must(t, err)
			treetest.Must(t, f.Truncate(2<<30)) // sparse: no space used
			treetest.Must(t, f.Close())
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			os.Remove(index) // the last case's rewrite (or none: damaged ones are removed)
			damage()
			checkSnapAfterDamage(t, r, first, warnings, name)
		})
	}
}

// On a large tree, a scan that found only a few files changed leaves the
// cache file as it was (rewriting all of it would cost more than reading
// those files again); the next scan reads them again, and once enough
// have piled up (the square root of the cache's size), the cache is
// saved and nothing is read twice.
func TestStatCacheDefersFewChanges(t *testing.T) {
	root := t.TempDir()
	const n = 5000 // more than lazySaveMin
	for i := range n {
		treetest.Write(t, root, fmt.Sprintf("d%02d/f%04d", i%50, i), fmt.Sprintf("file %d\n", i), 0o644)
	}
	time.Sleep(100 * time.Millisecond) // until the cache trusts them
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "first")
	treetest.Must(t, err)
	index := filepath.Join(r.Dir, "index")
	saved, err := os.ReadFile(index)
	treetest.Must(t, err)
	edit := func(from, to int) {
		for i := from; i < to; i++ {
			treetest.Write(t, root, fmt.Sprintf("d%02d/f%04d", i%50, i), fmt.Sprintf("file %d, edited\n", i), 0o644)
		}
		time.Sleep(100 * time.Millisecond)
	}
	scan := func(wantRead int, wantSaved bool) {
		t.Helper()
		m, err := r.ScanTree(true)
		treetest.Must(t, err)
		if r.LastScan.FilesRead != wantRead {
			t.Fatalf("scan read %d files, want %d", r.LastScan.FilesRead, wantRead)
		}
		now, err := os.ReadFile(index)
		treetest.Must(t, err)
		if got := !bytes.Equal(now, saved); got != wantSaved {
			t.Fatalf("cache rewritten: %v, want %v", got, wantSaved)
		}
		saved = now
		// What the scan records is the tree as it is, whatever the cache
		// file holds.
		e := m.Find("d00/f0000")
		if want := sha256.Sum256([]byte("file 0, edited\n")); e == nil || e.Object != want {
			t.Fatalf("d00/f0000 recorded as %+v, want object %x", e, want)
		}
	}
	edit(0, 3)
	scan(3, false)
	scan(3, false) // read again: the cache file does not have them
	edit(3, 71)    // 71² ≥ 5000
	scan(71, true)
	scan(0, false)
}
