package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

func openRepo(t testing.TB, root string, ignore ...string) *snapshot.Repo {
	t.Helper()
	src := ""
	if len(ignore) > 0 {
		src = "[snapshot]\nignore = [\"" + strings.Join(ignore, "\", \"") + "\"]\n"
	}
	cfg, err := config.Parse(filepath.Join(root, config.FileName), []byte(src))
	treetest.Must(t, err)
	r, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true, Verb: "test", LockWait: time.Second, Config: cfg})
	treetest.Must(t, err)
	t.Cleanup(r.Close)
	return r
}

func capture(t testing.TB, root string) treetest.State {
	t.Helper()
	return treetest.Capture(t, root, snapshot.StoreDir)
}

// mutate changes the tricky tree in every way a restore must undo.
func mutate(t *testing.T, root string) {
	t.Helper()
	p := func(s string) string { return filepath.Join(root, s) }
	treetest.Write(t, root, "plain.txt", "changed\n", 0o644)
	_ = unix.Removexattr(p("plain.txt"), "user.note") // absent when the fs has no xattrs
	treetest.Must(t, os.Chmod(p("exec.sh"), 0o600))
	future := time.Now().Add(time.Hour)
	treetest.Must(t, os.Chtimes(p("deep/a/b/c/d.txt"), future, future))
	treetest.Must(t, os.RemoveAll(p("deep/a")))
	treetest.Write(t, root, "brand/new/file", "new\n", 0o644)
	treetest.Must(t, os.RemoveAll(p("with space")))
	treetest.Write(t, root, "with space", "now a file\n", 0o644) // dir -> file
	treetest.Must(t, os.Remove(p("rel-in")))
	treetest.Must(t, os.Mkdir(p("rel-in"), 0o700)) // symlink -> dir
	treetest.Must(t, os.Remove(p("abs-out")))
	treetest.Must(t, os.Symlink("/etc/hostname", p("abs-out")))
	treetest.Must(t, os.Remove(p("hard/two")))
	treetest.Write(t, root, "hard/two", "unlinked now\n", 0o644)
	treetest.Must(t, os.Link(p("exec.sh"), p("exec-link")))
	treetest.Must(t, os.Remove(p("pipe")))
	treetest.Must(t, os.Rename(p("bad-\xff\xfe-utf8"), p("renamed\n\xff")))
	treetest.Must(t, os.Remove(p("empty/dir")))
	treetest.Must(t, os.Chmod(p("sticky"), 0o755))
	if os.Geteuid() == 0 {
		treetest.Must(t, os.Lchown(p("locked"), 1234, 1234))
	}
	if _, err := os.Stat(p("sparse.img")); err == nil {
		f, err := os.OpenFile(p("sparse.img"), os.O_WRONLY, 0)
		treetest.Must(t, err)
		_, err = f.WriteAt([]byte("later"), 1<<30)
		treetest.Must(t, err)
		treetest.Must(t, f.Close())
	}
}

func TestUndoRedoExact(t *testing.T) {
	root := t.TempDir()
	const sparse = 2 << 30 // several GiB would only slow the test; holes are what matter
	treetest.Tricky(t, root, sparse)
	r := openRepo(t, root)
	before := capture(t, root)
	s, err := r.Snap(record.KindSnap, "before")
	treetest.Must(t, err)
	mutate(t, root)
	after := capture(t, root)
	if len(treetest.Diff(before, after)) < 10 {
		t.Fatalf("mutate changed too little: %v", treetest.Diff(before, after))
	}
	for i := 0; i < 3; i++ {
		undone, _, err := r.Undo("", false)
		treetest.Must(t, err)
		if undone.ID != s.ID {
			t.Fatalf("undo %d reverted %s, want %s", i, undone.ID, s.ID)
		}
		t.Logf("undo scan: %+v", r.LastScan)
		treetest.Equal(t, "after undo", before, capture(t, root))
		if a := treetest.Allocated(t, filepath.Join(root, "sparse.img")); a > 64<<20 {
			t.Fatalf("sparse file not sparse after undo: %d bytes allocated", a)
		}
		h, err := r.History()
		treetest.Must(t, err)
		if !h.Undone[s.ID] {
			t.Fatalf("snapshot %s not marked undone", s.ID)
		}
		_, _, err = r.Redo(false)
		treetest.Must(t, err)
		treetest.Equal(t, "after redo", after, capture(t, root))
	}
	if _, _, err := r.Redo(false); !errors.Is(err, snapshot.ErrNothingToRedo) {
		t.Fatalf("second redo: got %v, want ErrNothingToRedo", err)
	}
}

func TestSecondSnapReadsNothing(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 200; i++ {
		treetest.Write(t, root, filepath.Join("d", string(rune('a'+i%26)), "f"+string(rune('0'+i%10))+".txt"), strings.Repeat("x", i), 0o644)
	}
	time.Sleep(100 * time.Millisecond) // past the racy-timestamp margin
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	if r.LastScan.FilesRead == 0 {
		t.Fatal("first snap read nothing")
	}
	_, err = r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	if r.LastScan.FilesRead != 0 || r.LastScan.BytesRead != 0 {
		t.Fatalf("second snap of an unchanged tree read %d files, %d bytes", r.LastScan.FilesRead, r.LastScan.BytesRead)
	}
	treetest.Write(t, root, "d/a/f0.txt", "changed", 0o644)
	_, err = r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	if r.LastScan.FilesRead != 1 {
		t.Fatalf("snap after one change read %d files, want 1", r.LastScan.FilesRead)
	}
}

func TestContentStoredOnce(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 50; i++ {
		treetest.Write(t, root, filepath.Join("copies", "c"+string(rune('a'+i%26))+string(rune('a'+i/26))), "same content\n", 0o644)
	}
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	n := 0
	filepath.Walk(filepath.Join(root, snapshot.StoreDir, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n++
		}
		return nil
	})
	if p := len(snapshot.PackedObjects(r.Store)); n != 1 || p != 1 { // the manifest once, the (small) content once in a pack
		t.Fatalf("store holds %d loose objects and %d packed, want 1 and 1", n, p)
	}
}

// runChange simulates a copy-mode run: fn is the command.
func runChange(t *testing.T, r *snapshot.Repo, fn func()) *record.Meta {
	t.Helper()
	run, err := r.BeginTreeRun([]string{"cmd"}, "copy")
	treetest.Must(t, err)
	fn()
	status := 0
	treetest.Must(t, r.FinishTreeRun(run, &status))
	return run.Meta
}

func TestRunUndoKeepsOtherEdits(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a", "a0", 0o644)
	treetest.Write(t, root, "b", "b0", 0o644)
	treetest.Write(t, root, "dir/c", "c0", 0o644)
	r := openRepo(t, root)
	runChange(t, r, func() {
		treetest.Write(t, root, "a", "a1", 0o644)
		treetest.Must(t, os.RemoveAll(filepath.Join(root, "dir")))
		treetest.Write(t, root, "made/by/run", "new", 0o644)
	})
	treetest.Write(t, root, "b", "b1 edited later by someone else", 0o644)
	want := capture(t, root)
	_, _, err := r.Undo("", false)
	treetest.Must(t, err)
	got := capture(t, root)
	if strings.Contains(got["a"], "sha=") && got["a"] == want["a"] {
		t.Fatal("undo did not revert a")
	}
	if _, ok := got["made"]; ok {
		t.Fatal("undo left the run's new directory")
	}
	if _, ok := got["dir/c"]; !ok {
		t.Fatal("undo did not bring back dir/c")
	}
	if got["b"] != want["b"] {
		t.Fatalf("undo of the run touched b, which the run never changed:\nwant %s\ngot  %s", want["b"], got["b"])
	}
	b, _ := os.ReadFile(filepath.Join(root, "a"))
	if string(b) != "a0" {
		t.Fatalf("a = %q after undo, want a0", b)
	}
	_, _, err = r.Redo(false)
	treetest.Must(t, err)
	treetest.Equal(t, "after redo", want, capture(t, root))
}

func TestUndoConflict(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a", "a0", 0o644)
	r := openRepo(t, root)
	runChange(t, r, func() {
		treetest.Write(t, root, "a", "a1", 0o644)
		treetest.Write(t, root, "newdir/x", "x", 0o644)
	})
	treetest.Write(t, root, "a", "a2 by someone else", 0o644)
	treetest.Write(t, root, "newdir/y", "y by someone else", 0o644)
	edited := capture(t, root)
	_, _, err := r.Undo("", false)
	var ce *snapshot.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("undo over a later edit: got %v, want a conflict", err)
	}
	if strings.Join(ce.Paths, ",") != "a,newdir/y" {
		t.Fatalf("conflicts %q, want a and newdir/y", ce.Paths)
	}
	treetest.Equal(t, "a refused undo changes nothing", edited, capture(t, root))
	_, saved, err := r.Undo("", true)
	treetest.Must(t, err)
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "a0" {
		t.Fatalf("forced undo left a = %q", b)
	}
	// What --force overwrote is saved: restoring the pre-undo record brings it back.
	_, _, err = r.Restore(saved.ID)
	treetest.Must(t, err)
	treetest.Equal(t, "restore of what force overwrote", edited, capture(t, root))
}

func TestRestoreNeverFollowsSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	treetest.Write(t, outside, "x", "outside, must stay", 0o644)
	treetest.Write(t, root, "d/x", "inside", 0o644)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	outsideBefore := treetest.Capture(t, outside)
	// Replace d with a symlink to the outside directory: a restore that
	// followed it would write d/x into outside/x.
	treetest.Must(t, os.RemoveAll(filepath.Join(root, "d")))
	treetest.Must(t, os.Symlink(outside, filepath.Join(root, "d")))
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	treetest.Equal(t, "outside the root", outsideBefore, treetest.Capture(t, outside))
	if fi, err := os.Lstat(filepath.Join(root, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("d not restored as a directory: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "d/x")); string(b) != "inside" {
		t.Fatalf("d/x = %q", b)
	}
}

func TestSnapshotDoesNotReadThroughSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	treetest.Write(t, outside, "secret", "never stored", 0o600)
	treetest.Must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")))
	treetest.Must(t, os.Symlink(outside, filepath.Join(root, "dirlink")))
	r := openRepo(t, root)
	m, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	mf, err := r.LoadManifest(m.Manifest)
	treetest.Must(t, err)
	if len(mf) != 2 || mf[0].Type != record.Symlink || mf[1].Type != record.Symlink {
		t.Fatalf("manifest %+v, want two symlinks", mf)
	}
	if m.Files != 0 {
		t.Fatalf("snapshot counted %d files through symlinks", m.Files)
	}
}

func TestIgnoredPathsSurviveUndo(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "src.go", "v1", 0o644)
	treetest.Write(t, root, "trace.jsonl", "log1\n", 0o644)
	r := openRepo(t, root, "trace.jsonl", "node_modules")
	_, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	treetest.Write(t, root, "src.go", "v2", 0o644)
	treetest.Write(t, root, "trace.jsonl", "log1\nlog2\n", 0o644)
	treetest.Write(t, root, "node_modules/pkg/index.js", "x", 0o644)
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	if b, _ := os.ReadFile(filepath.Join(root, "src.go")); string(b) != "v1" {
		t.Fatalf("src.go = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "trace.jsonl")); string(b) != "log1\nlog2\n" {
		t.Fatalf("ignored trace.jsonl was reverted: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "node_modules/pkg/index.js")); err != nil {
		t.Fatalf("ignored node_modules removed: %v", err)
	}
}

func TestGCKeepsWhatUndoNeeds(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	var states []treetest.State
	for i := 0; i < 4; i++ {
		treetest.Write(t, root, "f", strings.Repeat("v", i+1)+"\n", 0o644)
		treetest.Write(t, root, "only"+string(rune('0'+i)), "unique content "+string(rune('0'+i)), 0o644)
		states = append(states, capture(t, root))
		_, err := r.Snap(record.KindSnap, "")
		treetest.Must(t, err)
	}
	treetest.Write(t, root, "f", "latest\n", 0o644)
	latest := capture(t, root)
	_, _, err := r.Undo("", false) // back to states[3]
	treetest.Must(t, err)
	st, err := r.GC(1, nil)
	treetest.Must(t, err)
	if st.Snapshots == 0 || st.Objects == 0 {
		t.Fatalf("gc removed nothing: %+v", st)
	}
	// redo still works: its pre-undo record was kept.
	_, _, err = r.Redo(false)
	treetest.Must(t, err)
	treetest.Equal(t, "redo after gc", latest, capture(t, root))
	h, err := r.History()
	treetest.Must(t, err)
	for _, m := range h.All {
		mf, err := r.LoadManifest(m.Manifest)
		treetest.Must(t, err)
		mf.Objects(func(o record.ObjectID) {
			if !r.HasObject(o) {
				t.Fatalf("snapshot %s lost object %s to gc", m.ID, o)
			}
		})
	}
	// And a snap after gc does not reference objects gc removed.
	treetest.Write(t, root, "f", "v\n", 0o644) // content of a collected object
	m, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	mf, err := r.LoadManifest(m.Manifest)
	treetest.Must(t, err)
	mf.Objects(func(o record.ObjectID) {
		if !r.HasObject(o) {
			t.Fatalf("snap after gc references missing object %s", o)
		}
	})
	_ = states
}

func TestLockWaitsThenNamesHolder(t *testing.T) {
	root := t.TempDir()
	a := openRepo(t, root)
	second := snapshot.Options{Access: snapshot.ForChange, Verb: "second", LockWait: 300 * time.Millisecond}
	start := time.Now()
	_, err := snapshot.Open(root, second)
	if !errors.Is(err, snapshot.ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatal("second lock did not wait")
	}
	if !strings.Contains(err.Error(), "pid ") || !strings.Contains(err.Error(), "(test)") {
		t.Fatalf("lock error does not name the holder: %v", err)
	}
	a.Unlock()
	b, err := snapshot.Open(root, second)
	treetest.Must(t, err)
	b.Close()
}

func TestStoreIsPrivate(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "f", "x", 0o644)
	r := openRepo(t, root)
	_, err := r.Snap(record.KindSnap, "")
	treetest.Must(t, err)
	fi, err := os.Stat(filepath.Join(root, snapshot.StoreDir))
	treetest.Must(t, err)
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("store mode %o, want 0700", fi.Mode().Perm())
	}
}

// TestFullDisk: a snapshot that runs out of space fails with ENOSPC and
// leaves the tree exactly as it was, with nothing recorded; an undo that
// would need more space than there is refuses before changing anything;
// an undo that only removes needs none (what it saves is linked, not
// copied).
func TestFullDisk(t *testing.T) {
	root := treetest.SmallFS(t, 2048)
	big := strings.Repeat("z", 700<<10)
	treetest.Write(t, root, "a", big, 0o644)
	treetest.Write(t, root, "b", "small", 0o644)
	r := openRepo(t, root)
	s, err := r.Snap(record.KindSnap, "fits")
	treetest.Must(t, err)
	// A second large file does not fit twice (tree and store).
	treetest.Write(t, root, "c", strings.Repeat("y", 600<<10), 0o644)
	before := capture(t, root)
	if _, err := r.Snap(record.KindSnap, "too big"); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("snap on a full disk: %v, want ENOSPC", err)
	}
	treetest.Equal(t, "tree after a failed snap", before, capture(t, root))
	h, err := r.History()
	treetest.Must(t, err)
	if len(h.All) != 1 {
		t.Fatalf("a failed snap left %d records", len(h.All))
	}
	// Undo removes c: saving it is a hard link, so it needs no space.
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	if _, err := os.Stat(filepath.Join(root, "c")); !os.IsNotExist(err) {
		t.Fatalf("undo left c: %v", err)
	}
	undone := capture(t, root)
	// Redo must write c back (600 KiB) while the store keeps its copy:
	// more than is free, so it refuses before changing anything.
	if _, _, err := r.Redo(false); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("redo needing more space than there is: %v, want ENOSPC", err)
	}
	treetest.Equal(t, "tree after a refused redo", undone, capture(t, root))
	did, err := r.Recover()
	treetest.Must(t, err)
	if did {
		t.Fatal("a refused undo left a journal behind")
	}
	// The tree is as the undo left it: exactly the snapshot.
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != big {
		t.Fatal("a not as recorded")
	}
	_ = s
}
