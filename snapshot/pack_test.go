package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// packTree writes n small files (100 B to 8 KiB, distinct) and one of
// undoBringsBack edits every one of files, undoes, and checks that each
// holds its content again (read from the packs).
func undoBringsBack(t *testing.T, r *snapshot.Repo, root string, files map[string][]byte) {
	t.Helper()
	for p := range files {
		treetest.Write(t, root, p, "edited\n", 0o644)
	}
	_, _, err := r.Undo("", false)
	treetest.Must(t, err)
	sameFiles(t, root, files)
}

// 40 KiB, and returns their contents by path.
func packTree(t *testing.T, root string, n int) map[string][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(7, uint64(n)))
	files := map[string][]byte{}
	for i := 0; i < n; i++ {
		b := make([]byte, 100+r.IntN(8<<10-100))
		for j := range b {
			b[j] = 'a' + byte(r.IntN(26))
		}
		files[fmt.Sprintf("d%d/f%03d.txt", i%7, i)] = b
	}
	files["big.bin"] = bytes.Repeat([]byte("0123456789abcdef"), 40<<10/16)
	for p, b := range files {
		treetest.Write(t, root, p, string(b), 0o644)
	}
	return files
}

func sameFiles(t *testing.T, root string, files map[string][]byte) {
	t.Helper()
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: not as snapped (%v)", p, err)
		}
	}
}

// diskUsage is what du counts for the tree at dir, leaving out the store.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	n := int64(0)
	treetest.Must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Name() == snapshot.StoreDir {
			return filepath.SkipDir
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	}))
	return n
}

func looseObjects(t *testing.T, store string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(store, "objects", "*", "*"))
	treetest.Must(t, err)
	return len(names)
}

// Small contents go to one pack, a large one stays a file of its own; the
// store then takes less room than the tree, every content reads back
// (undo, in this process and in the next), and check finds no damage.
func TestPackSmallContents(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 300)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	if n, p := looseObjects(t, r.Dir), len(snapshot.PackedObjects(r.Store)); n != 2 || p != 300 {
		t.Fatalf("%d loose objects and %d packed, want 2 (the manifest and big.bin) and 300", n, p)
	}
	packs, _ := filepath.Glob(filepath.Join(r.Dir, "packs", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs: %v, want one", packs)
	}
	size, err := r.Size()
	treetest.Must(t, err)
	if tree := diskUsage(t, root); size >= tree {
		t.Fatalf("the store takes %d bytes, the tree %d: packing should make it smaller", size, tree)
	}

	undoBringsBack(t, r, root, files)

	// A new process reads the packs from disk.
	r.Close()
	r = openRepo(t, root)
	_, err = r.Snap(record.KindSnap, "again")
	treetest.Must(t, err)
	for p := range files {
		treetest.Must(t, os.Remove(filepath.Join(root, p)))
	}
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	sameFiles(t, root, files)
	rep, err := r.Check(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	if len(rep.Damaged) != 0 || rep.ObjectsChecked < 302 {
		t.Fatalf("check: %+v", rep)
	}
}

// A flipped byte in a pack is found by check and never written back; check
// --repair packs the pack's intact contents again, sets the pack aside and
// stores the damaged content again from the tree.
func TestPackDamaged(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 20)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	victim := "d3/f010.txt"
	id := record.ObjectID(sha256.Sum256(files[victim]))
	pack, off, ok := snapshot.PackedAt(r.Store, id)
	if !ok {
		t.Fatalf("%s is not packed", victim)
	}
	flipAt(t, pack, off)
	r.Close()
	r = openRepo(t, root)

	treetest.Write(t, root, victim, "edited\n", 0o644)
	if _, _, err := r.Undo("", false); !strings.Contains(fmt.Sprint(err), "is damaged") {
		t.Fatalf("undo over a damaged content: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, victim)); string(b) != "edited\n" {
		t.Fatalf("the failed undo changed %s", victim)
	}
	treetest.Write(t, root, victim, string(files[victim]), 0o644)
	rep, err := r.Repair(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	if len(rep.Damaged) != 1 || rep.Damaged[0].Kind != snapshot.DamageObject || rep.Damaged[0].ID != id.String() ||
		!strings.Contains(rep.Damaged[0].Repair, "its pack") || !strings.Contains(rep.Damaged[0].Repair, "stored again from the tree") {
		t.Fatalf("check --repair: %+v", rep.Damaged)
	}
	if _, err := os.Lstat(pack); err == nil {
		t.Fatalf("the damaged pack %s is still in packs/", pack)
	}
	aside, _ := filepath.Glob(filepath.Join(r.Dir, snapshot.DamagedDir, "pack-*"))
	if len(aside) != 1 {
		t.Fatalf("set aside: %v, want the pack", aside)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

// packedTwice snaps a tree of small files and packs one content, id,
// twice: its pack copied under a name that sorts first (first), the
// copy there damaged. It returns the repository opened again.
func packedTwice(t *testing.T) (r *snapshot.Repo, root string, files map[string][]byte, id record.ObjectID, first string) {
	t.Helper()
	root = t.TempDir()
	files = packTree(t, root, 10)
	r = openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	id = record.ObjectID(sha256.Sum256(files["d3/f003.txt"]))
	pack, off, ok := snapshot.PackedAt(r.Store, id)
	if !ok {
		t.Fatal("d3/f003.txt is not packed")
	}
	b, err := os.ReadFile(pack)
	treetest.Must(t, err)
	first = filepath.Join(filepath.Dir(pack), strings.Repeat("0", 64)+".pack")
	treetest.Must(t, os.WriteFile(first, b, 0o444))
	flipAt(t, first, off)
	r.Close()
	r = openRepo(t, root)
	if at, _, _ := snapshot.PackedAt(r.Store, id); at != first {
		t.Fatalf("d3/f003.txt is read from %s first, want the damaged copy in %s", at, first)
	}
	return r, root, files, id, first
}

// A content packed twice (a watched checkpoint packs blind, a crash in
// gc leaves both), its copy in the pack first by name damaged: an undo
// reads the intact copy, and gc, merging the two packs, keeps the intact
// copy and drops the damaged one (it kept the first it met).
func TestPackTwiceOneDamaged(t *testing.T) {
	r, root, files, id, first := packedTwice(t)
	undoBringsBack(t, r, root, files)

	// A new version of one file, then gc of the old: both packs hold
	// the old content, so both are written again, merged.
	files["d0/f000.txt"] = []byte("version 2\n")
	treetest.Write(t, root, "d0/f000.txt", "version 2\n", 0o644)
	_, err := r.Snap(record.KindSnap, "two")
	treetest.Must(t, err)
	_, err = r.GC(1, nil)
	treetest.Must(t, err)
	if _, err := os.Lstat(first); err == nil {
		t.Fatalf("gc left %s", first)
	}
	if _, err := r.Store.ReadObject(id); err != nil {
		t.Fatalf("after gc: %v", err)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

// check reports the damaged copy of a content packed twice, affecting
// no snapshot (the intact copy is read), and --repair sets its pack
// aside, the pack's intact contents packed again.
func TestPackTwiceCheck(t *testing.T) {
	r, root, files, id, first := packedTwice(t)
	for _, repair := range []bool{false, true} {
		check := r.Check
		if repair {
			check = r.Repair
		}
		rep, err := check(snapshot.CheckOptions{ReadData: true})
		treetest.Must(t, err)
		if len(rep.Damaged) != 1 || rep.Damaged[0].ID != id.String() || len(rep.Damaged[0].Snapshots) != 0 ||
			!strings.Contains(rep.Damaged[0].Problem, "intact copy") {
			t.Fatalf("check (repair %v): %+v", repair, rep.Damaged)
		}
		if repair && !strings.Contains(rep.Damaged[0].Repair, filepath.Base(first)) {
			t.Fatalf("repair: %q, want the damaged copy's pack set aside", rep.Damaged[0].Repair)
		}
	}
	if _, err := os.Lstat(first); err == nil {
		t.Fatalf("--repair left %s", first)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

// A pack whose index cannot be read: its contents are missing (named by
// check), --repair sets it aside and stores them again from the tree.
func TestPackUnreadable(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 20)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	packs, _ := filepath.Glob(filepath.Join(r.Dir, "packs", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs: %v", packs)
	}
	treetest.Must(t, os.Chmod(packs[0], 0o600))
	treetest.Must(t, os.Truncate(packs[0], 1000))
	r.Close()
	r = openRepo(t, root)
	var warned []string
	r.Warn = func(m string) { warned = append(warned, m) }
	rep, err := r.Repair(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	kinds := map[string]int{}
	for _, d := range rep.Damaged {
		kinds[d.Kind]++
	}
	if kinds[snapshot.DamagePack] != 1 || kinds[snapshot.DamageObject] != 20 {
		t.Fatalf("check --repair: %+v", rep.Damaged)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

// gc drops the packed contents no kept snapshot needs, by writing their
// packs again without them, and merges small packs.
func TestPackGC(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 10)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	old := record.ObjectID(sha256.Sum256(files["d0/f000.txt"]))
	for i := 0; i < 3; i++ {
		files["d0/f000.txt"] = []byte(fmt.Sprint("version ", i, "\n"))
		treetest.Write(t, root, "d0/f000.txt", string(files["d0/f000.txt"]), 0o644)
		_, err = r.Snap(record.KindSnap, fmt.Sprint("v", i))
		treetest.Must(t, err)
	}
	if packs, _ := filepath.Glob(filepath.Join(r.Dir, "packs", "*.pack")); len(packs) != 4 {
		t.Fatalf("packs: %v, want one a snapshot", packs)
	}
	st, err := r.GC(1, nil)
	treetest.Must(t, err)
	if st.Snapshots != 3 || st.Objects < 3 {
		t.Fatalf("gc: %+v, want 3 snapshots and the 3 old contents of d0/f000.txt", st)
	}
	if r.HasObject(old) {
		t.Fatal("gc kept a content no snapshot needs")
	}
	if packs, _ := filepath.Glob(filepath.Join(r.Dir, "packs", "*.pack")); len(packs) != 1 {
		t.Fatalf("packs after gc: %v, want one", packs)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

// A store of loose small objects, as snapback wrote before packs, keeps
// working: its contents are read where they are and not packed again.
func TestPackLooseStore(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 5)
	r := openRepo(t, root)
	for _, b := range files {
		h := fmt.Sprintf("%x", sha256.Sum256(b))
		treetest.Must(t, os.MkdirAll(filepath.Join(r.Dir, "objects", h[:2]), 0o700))
		treetest.Must(t, os.WriteFile(filepath.Join(r.Dir, "objects", h[:2], h[2:]), b, 0o400))
	}
	_, err := r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	if p := len(snapshot.PackedObjects(r.Store)); p != 0 {
		t.Fatalf("%d contents packed again", p)
	}
	cleanCheck(t, r)
	undoBringsBack(t, r, root, files)
}

func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	treetest.Must(t, os.Chmod(path, 0o600))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	treetest.Must(t, err)
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	treetest.Must(t, err)
	_, err = f.WriteAt([]byte{b[0] ^ 1}, off)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
}

func cleanCheck(t *testing.T, r *snapshot.Repo) {
	t.Helper()
	rep, err := r.Check(snapshot.CheckOptions{ReadData: true})
	treetest.Must(t, err)
	if len(rep.Damaged) != 0 {
		t.Fatalf("check: %+v", rep.Damaged)
	}
}

// The stat cache names contents: those waiting for a pack are written
// before it is saved. A process that ends after a scan saved the cache,
// without a Flush (killed), leaves no cache entry naming a content the
// store lacks: the next snapshot, trusting the cache, is whole.
func TestPackBeforeStatCache(t *testing.T) {
	root := t.TempDir()
	files := packTree(t, root, 30)
	time.Sleep(100 * time.Millisecond) // older than the cache's racy window
	r := openRepo(t, root)
	_, err := r.ScanTree(true)
	treetest.Must(t, err)
	r.Close() // no Flush: as if killed here
	r = openRepo(t, root)
	_, err = r.Snap(record.KindSnap, "one")
	treetest.Must(t, err)
	if r.LastScan.FilesRead != 0 {
		t.Fatalf("the snap read %d files: the stat cache was not trusted, the test tests nothing", r.LastScan.FilesRead)
	}
	cleanCheck(t, r)
	for p := range files {
		treetest.Must(t, os.Remove(filepath.Join(root, p)))
	}
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	sameFiles(t, root, files)
}

// A store of more packs than a process keeps open reads every one.
func TestPackMany(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	files := map[string][]byte{}
	for i := 0; i < 70; i++ {
		p := fmt.Sprintf("f%02d.txt", i)
		files[p] = []byte(fmt.Sprintf("content %d\n", i))
		treetest.Write(t, root, p, string(files[p]), 0o644)
		_, err := r.Snap(record.KindSnap, p)
		treetest.Must(t, err)
	}
	if packs, _ := filepath.Glob(filepath.Join(r.Dir, "packs", "*.pack")); len(packs) != 70 {
		t.Fatalf("%d packs, want 70", len(packs))
	}
	r.Close()
	r = openRepo(t, root)
	cleanCheck(t, r)
	for p := range files {
		treetest.Must(t, os.Remove(filepath.Join(root, p)))
	}
	_, _, err := r.Undo("", false)
	treetest.Must(t, err)
	sameFiles(t, root, files)
}
