package snapshot_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// A checkpoint records what changed between begin and end, whoever
// changed it, as one step: undo brings back the state at begin for
// exactly those paths, and an edit made after end survives it.
func TestCheckpointExact(t *testing.T) {
	root := t.TempDir()
	treetest.Tricky(t, root, 1<<20)
	// (mutate grows the sparse file to a GiB: reading it is all the
	// test would time; TestUndoRedoExact covers sparse files)
	treetest.Must(t, os.Remove(filepath.Join(root, "sparse.img")))
	r := openRepo(t, root)
	before := capture(t, root)
	m, opened, err := r.BeginCheckpoint("s1", "turn 1")
	treetest.Must(t, err)
	if !opened || m.State != record.StateOpen || m.Session != "s1" || m.Message != "turn 1" {
		t.Fatalf("begin: opened=%v %+v", opened, m)
	}
	mutate(t, root)
	after := capture(t, root)
	end, dropped, err := r.EndCheckpoint("s1")
	treetest.Must(t, err)
	if dropped || end == nil || end.ID != m.ID || end.State != record.StateDone || end.Scope != record.ScopePaths {
		t.Fatalf("end: dropped=%v %+v", dropped, end)
	}
	got, err := r.ReadMeta(m.ID)
	treetest.Must(t, err)
	if got.State != record.StateDone || got.Session != "s1" || got.Message != "turn 1" {
		t.Fatalf("record after end: %+v", got)
	}
	// An edit after the checkpoint is no part of it.
	treetest.Write(t, root, "later.txt", "the user's\n", 0o644)
	withLater := func(st treetest.State) treetest.State {
		out := treetest.State{}
		for k, v := range st {
			out[k] = v
		}
		for k, v := range capture(t, root) {
			if k == "later.txt" {
				out[k] = v
			}
		}
		return out
	}
	undone, _, err := r.Undo("", false)
	treetest.Must(t, err)
	if undone.ID != m.ID {
		t.Fatalf("undo took %s, not the checkpoint %s", undone.ID, m.ID)
	}
	treetest.Equal(t, "after undo of the checkpoint", withLater(before), capture(t, root))
	_, _, err = r.Redo(false)
	treetest.Must(t, err)
	treetest.Equal(t, "after redo of the checkpoint", withLater(after), capture(t, root))
}

// begin is re-entrant; end of a stretch that changed nothing leaves no
// record; end with nothing open does nothing.
func TestCheckpointReentrantAndDropped(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "a\n", 0o644)
	r := openRepo(t, root)
	m1, opened, err := r.BeginCheckpoint("", "first")
	treetest.Must(t, err)
	if !opened {
		t.Fatal("the first begin did not open")
	}
	m2, opened, err := r.BeginCheckpoint("other", "second")
	treetest.Must(t, err)
	if opened || m2.ID != m1.ID || m2.Message != "first" {
		t.Fatalf("a second begin: opened=%v id %s (first %s) message %q", opened, m2.ID, m1.ID, m2.Message)
	}
	// A session's end leaves another's checkpoint open.
	m, _, err := r.EndCheckpoint("other")
	treetest.Must(t, err)
	if m != nil {
		t.Fatalf("end --session other closed %s", m.ID)
	}
	m, dropped, err := r.EndCheckpoint("")
	treetest.Must(t, err)
	if m == nil || !dropped {
		t.Fatalf("end of an empty stretch: %v dropped=%v", m, dropped)
	}
	if _, err := r.ReadMeta(m1.ID); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("the dropped checkpoint's record: %v", err)
	}
	if m, _, err = r.EndCheckpoint(""); err != nil || m != nil {
		t.Fatalf("end with none open: %v %v", m, err)
	}
	if _, _, err := r.Undo("", false); !errors.Is(err, snapshot.ErrNothingToUndo) {
		t.Fatalf("undo after a dropped checkpoint: %v", err)
	}
	if err := record.ValidSession("bad\nname"); err == nil {
		t.Fatal("a session with a newline is valid")
	}
	if _, _, err := r.BeginCheckpoint(strings.Repeat("x", 200), ""); err == nil {
		t.Fatal("a 200-byte session was taken")
	}
}

// While a checkpoint is open, what would mix other changes into it is
// refused, naming it; recover leaves it open (it is no dead run), and a
// later end still records the stretch.
func TestCheckpointRefusals(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "a\n", 0o644)
	r := openRepo(t, root)
	base, err := r.Snap(record.KindSnap, "base")
	treetest.Must(t, err)
	m, _, err := r.BeginCheckpoint("s", "")
	treetest.Must(t, err)
	treetest.Write(t, root, "a.txt", "changed\n", 0o644)
	refused := func(what string, err error) {
		t.Helper()
		var ce *snapshot.CheckpointOpenError
		if !errors.As(err, &ce) || ce.Checkpoint.ID != m.ID || !strings.Contains(err.Error(), m.ID) {
			t.Errorf("%s while a checkpoint is open: %v", what, err)
		}
	}
	_, err = r.Snap(record.KindSnap, "")
	refused("snap", err)
	_, _, err = r.Undo("", false)
	refused("undo", err)
	_, _, err = r.Undo(base.ID, true)
	refused("undo ID --force", err)
	_, _, err = r.Redo(false)
	refused("redo", err)
	_, _, err = r.Restore(base.ID)
	refused("restore", err)
	_, err = r.BeginTreeRun([]string{"true"}, "copy")
	refused("a copy-mode run", err)
	_, _, err = r.UndoSession("s", false)
	refused("undo --session", err)
	if _, err := r.Recover(); err != nil {
		t.Fatal(err)
	}
	if open, err := r.OpenCheckpoint(); err != nil || open == nil || open.ID != m.ID {
		t.Fatalf("after recover, the open checkpoint is %v (%v)", open, err)
	}
	end, dropped, err := r.EndCheckpoint("")
	treetest.Must(t, err)
	if dropped || end.Files != 1 {
		t.Fatalf("end: dropped=%v files=%d", dropped, end.Files)
	}
	if _, err := r.Snap(record.KindSnap, ""); err != nil {
		t.Fatalf("snap once the checkpoint has ended: %v", err)
	}
}

// Many callers begin at once (the tool calls of one agent turn): exactly
// one checkpoint opens, and every caller gets it.
func TestCheckpointParallelGoroutines(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 200; i++ {
		treetest.Write(t, root, fmt.Sprintf("d/f%03d", i), strings.Repeat("x", i), 0o644)
	}
	openRepo(t, root).Close() // makes the store
	const n = 8
	var wg sync.WaitGroup
	ids := make([]string, n)
	opened := make([]bool, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Verb: "test", LockWait: time.Minute})
			if errs[i] = err; err != nil {
				return
			}
			defer r.Close()
			m, o, err := r.BeginCheckpoint("s", fmt.Sprint(i))
			if errs[i] = err; err == nil {
				ids[i], opened[i] = m.ID, o
			}
		}(i)
	}
	wg.Wait()
	checkOneOpened(t, ids, opened, errs)
}

func checkOneOpened(t *testing.T, ids []string, opened []bool, errs []error) {
	t.Helper()
	n := 0
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("callers got different checkpoints: %q", ids)
		}
		if opened[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d callers opened a checkpoint, want exactly 1", n)
	}
}

// The same with processes, as hooks are: this test binary, started again
// as TestCheckpointBeginProcess.
func TestCheckpointParallelProcesses(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 200; i++ {
		treetest.Write(t, root, fmt.Sprintf("d/f%03d", i), strings.Repeat("y", i), 0o644)
	}
	openRepo(t, root).Close()
	const n = 8
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestCheckpointBeginProcess$")
		cmds[i].Env = append(os.Environ(), "SNAPBACK_TEST_BEGIN_ROOT="+root)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		treetest.Must(t, cmds[i].Start())
	}
	ids := make([]string, n)
	opened := make([]bool, n)
	errs := make([]error, n)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			errs[i] = fmt.Errorf("%v: %s", err, outs[i].String())
			continue
		}
		var o bool
		if _, err := fmt.Sscanf(outs[i].String()[strings.Index(outs[i].String(), "BEGIN "):], "BEGIN %s %t", &ids[i], &o); err != nil {
			errs[i] = fmt.Errorf("output %q: %v", outs[i].String(), err)
		}
		opened[i] = o
	}
	checkOneOpened(t, ids, opened, errs)
}

// TestCheckpointBeginProcess is one caller of
// TestCheckpointParallelProcesses (it does nothing when run by itself).
func TestCheckpointBeginProcess(t *testing.T) {
	root := os.Getenv("SNAPBACK_TEST_BEGIN_ROOT")
	if root == "" {
		return // run by itself: nothing to do (not a capability: it needs none)
	}
	r, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Verb: "test", LockWait: time.Minute})
	treetest.Must(t, err)
	defer r.Close()
	m, opened, err := r.BeginCheckpoint("s", "")
	treetest.Must(t, err)
	fmt.Printf("BEGIN %s %t\n", m.ID, opened)
}

// undo --session reverts all of a session's checkpoints as one step and
// keeps what others changed in between: another session's checkpoint and
// the user's edits.
func TestUndoSession(t *testing.T) {
	root := t.TempDir()
	w := func(p, s string) { treetest.Write(t, root, p, s, 0o644) }
	w("a.txt", "a0\n")
	w("b.txt", "b0\n")
	w("c.txt", "c0\n")
	w("dir/x.txt", "x0\n")
	w("user.txt", "u0\n")
	treetest.Must(t, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "a-link")))
	r := openRepo(t, root)
	before := capture(t, root)
	step := func(session string, change func()) {
		t.Helper()
		_, _, err := r.BeginCheckpoint(session, session+" turn")
		treetest.Must(t, err)
		change()
		m, dropped, err := r.EndCheckpoint(session)
		treetest.Must(t, err)
		if m == nil || dropped {
			t.Fatalf("session %s: no step recorded", session)
		}
	}
	step("A", func() {
		w("a.txt", "a1\n") // through the hard link: a-link changes too
		w("b.txt", "b1\n")
	})
	w("user.txt", "u1\n") // the user, between two turns
	step("B", func() { w("c.txt", "c1\n") })
	step("A", func() {
		w("b.txt", "b2\n")
		treetest.Must(t, os.RemoveAll(filepath.Join(root, "dir")))
		w("new/n.txt", "n\n")
	})
	afterA := capture(t, root)
	steps, saved, err := r.UndoSession("A", false)
	treetest.Must(t, err)
	if len(steps) != 2 || saved.Undoes != steps[1].ID || len(saved.UndoesMore) != 1 || saved.UndoesMore[0] != steps[0].ID {
		t.Fatalf("undo --session A: %d steps, saved %+v", len(steps), saved)
	}
	want := treetest.State{}
	now := capture(t, root)
	for p, d := range before {
		want[p] = d
	}
	want["user.txt"], want["c.txt"] = now["user.txt"], now["c.txt"]
	treetest.Equal(t, "after undo --session A", want, now)
	if afterA["c.txt"] != now["c.txt"] || afterA["user.txt"] != now["user.txt"] {
		t.Fatal("undo --session A changed what it did not do")
	}
	h, err := r.History()
	treetest.Must(t, err)
	for _, s := range steps {
		if !h.Undone[s.ID] {
			t.Fatalf("step %s is not undone", s.ID)
		}
	}
	if _, _, err := r.UndoSession("A", false); !errors.Is(err, snapshot.ErrNothingToUndo) {
		t.Fatalf("a second undo --session A: %v", err)
	}
	_, _, err = r.Redo(false)
	treetest.Must(t, err)
	treetest.Equal(t, "after redo of the session", afterA, capture(t, root))
	if h, err = r.History(); err != nil || h.Undone[steps[0].ID] || h.Undone[steps[1].ID] {
		t.Fatalf("after redo the session's steps are still undone (%v)", err)
	}
	// A path of the session changed since by someone else: a conflict,
	// nothing changed.
	w("b.txt", "the user's b\n")
	cur := capture(t, root)
	_, _, err = r.UndoSession("A", false)
	var ce *snapshot.ConflictError
	if !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "b.txt" {
		t.Fatalf("undo --session over a changed path: %v", err)
	}
	treetest.Equal(t, "after a refused undo --session", cur, capture(t, root))
}

// A checkpoint left open for days (its harness died) says since when with
// the date, so that status shows how old it is.
func TestDescribeCheckpoint(t *testing.T) {
	old := time.Now().Add(-72 * time.Hour)
	got := snapshot.DescribeCheckpoint(&record.Meta{CreatedAt: old, Session: "s1", Message: "turn 4"})
	want := fmt.Sprintf("since %s, session s1, %q", old.Local().Format("2006-01-02 15:04:05"), "turn 4")
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := snapshot.DescribeCheckpoint(&record.Meta{CreatedAt: time.Now()}); !strings.HasPrefix(got, "since ") || strings.Contains(got, "-") {
		t.Fatalf("a checkpoint of today: %q", got)
	}
}
