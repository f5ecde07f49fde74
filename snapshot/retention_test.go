package snapshot_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// snaps records n snapshots, each with a content of its own, and returns
// the tree's state at each.
func snaps(t *testing.T, r *snapshot.Repo, root string, n int) []treetest.State {
	t.Helper()
	var states []treetest.State
	for i := 0; i < n; i++ {
		treetest.Write(t, root, "f", strings.Repeat("v", i+1)+"\n", 0o644)
		states = append(states, capture(t, root))
		_, err := r.Snap(record.KindSnap, "")
		treetest.Must(t, err)
	}
	return states
}

func TestRetainKeepsWhatUndoRedoAndPendingRunsNeed(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	states := snaps(t, r, root, 4)
	treetest.Write(t, root, "f", "latest\n", 0o644)
	latest := capture(t, root)
	_, _, err := r.Undo("", false) // the 4th snap is undone: redo needs its pre-undo
	treetest.Must(t, err)
	p, err := r.StartViewRun([]string{"true"}, "overlayfs")
	treetest.Must(t, err)
	treetest.Must(t, r.EndCommand(p, 0))

	if st, err := r.Retain(snapshot.Retention{}); err != nil || st.Snapshots != 0 {
		t.Fatalf("no bounds: removed %+v, %v", st, err)
	}
	// keep = 1 keeps the 4th (undone) and the 3rd (what undo takes next).
	st, err := r.Retain(snapshot.Retention{Keep: 1})
	treetest.Must(t, err)
	if st.Snapshots != 2 || st.Objects == 0 || st.Bytes == 0 {
		t.Fatalf("retention removed %+v, want the 2 oldest snapshots and their objects", st)
	}
	if ps, err := r.PendingRuns(); err != nil || len(ps) != 1 || ps[0].ID != p.ID {
		t.Fatalf("pending runs after retention: %v, %v", ps, err)
	}
	_, _, err = r.Redo(false)
	treetest.Must(t, err)
	treetest.Equal(t, "redo after retention", latest, capture(t, root))
	treetest.Must(t, r.DiscardViewRun(p))
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	treetest.Equal(t, "undo after retention", states[3], capture(t, root))
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	treetest.Equal(t, "second undo after retention", states[2], capture(t, root))
}

func TestRetainByAgeKeepsTheNextUndo(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	states := snaps(t, r, root, 3)
	treetest.Write(t, root, "f", "latest\n", 0o644)
	time.Sleep(time.Millisecond)
	st, err := r.Retain(snapshot.Retention{MaxAge: time.Millisecond})
	treetest.Must(t, err)
	if st.Snapshots != 2 {
		t.Fatalf("retention by age removed %d snapshots, want 2 (all but the newest)", st.Snapshots)
	}
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	treetest.Equal(t, "undo after retention by age", states[2], capture(t, root))
	// Nothing falls outside the bounds now: no gc runs.
	if st, err := r.Retain(snapshot.Retention{Keep: 5}); err != nil || st != (snapshot.GCStats{}) {
		t.Fatalf("retention within bounds did %+v, %v", st, err)
	}
}

// gc --keep N keeps what undo reverts next even when the N newest are
// all undone (the redo chain): else that undo says "nothing to undo".
// Found by TestModel (cmd/snapback).
func TestGCKeepsTheNextUndoBehindTheRedoChain(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	states := snaps(t, r, root, 3)
	for i := 0; i < 2; i++ { // the 3rd and the 2nd undone
		_, _, err := r.Undo("", false)
		treetest.Must(t, err)
	}
	treetest.Write(t, root, "f", "edited\n", 0o644)
	_, err := r.GC(1, nil)
	treetest.Must(t, err)
	_, _, err = r.Undo("", false)
	treetest.Must(t, err)
	treetest.Equal(t, "undo after gc --keep 1", states[0], capture(t, root))
}

// gc keeps the undone snapshots of the redo chain, not only the pre-undo
// records redo puts back: after redo, undo takes them again. (It kept
// the pre-undo alone: redo worked, and the undo after it reverted an
// older snapshot instead.) Found by TestModel (cmd/snapback).
func TestGCKeepsTheRedoChainsSnapshots(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	states := snaps(t, r, root, 3)
	for i := 0; i < 2; i++ { // the 3rd and the 2nd undone: the redo chain
		_, _, err := r.Undo("", false)
		treetest.Must(t, err)
	}
	_, err := r.GC(1, nil)
	treetest.Must(t, err)
	for i := 0; i < 2; i++ {
		_, _, err = r.Redo(false)
		treetest.Must(t, err)
	}
	treetest.Equal(t, "two redos after gc", states[2], capture(t, root))
	for _, want := range []int{2, 1} { // undo reverts the 3rd, then the 2nd
		_, _, err = r.Undo("", false)
		treetest.Must(t, err)
		treetest.Equal(t, fmt.Sprintf("undo back to snapshot %d after gc", want+1), states[want], capture(t, root))
	}
}

// collectWithCheckpointOpen opens a checkpoint, collects with keep = 1
// (gc, or the retention a snap or run applies) while it is open, and
// closes it having changed nothing, so that it leaves no step.
func collectWithCheckpointOpen(t *testing.T, r *snapshot.Repo, gc bool) {
	t.Helper()
	_, opened, err := r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	if !opened {
		t.Fatal("no checkpoint opened")
	}
	if gc {
		_, err = r.GC(1, nil)
	} else {
		_, err = r.Retain(snapshot.Retention{Keep: 1})
	}
	treetest.Must(t, err)
	_, dropped, err := r.EndCheckpoint("")
	treetest.Must(t, err)
	if !dropped {
		t.Fatal("a checkpoint that changed nothing left a step")
	}
}

// An open checkpoint is no step yet: retention neither counts it against
// keep nor takes it for what undo reverts next. Found by TestModel
// (cmd/snapback): keep = 1 with a checkpoint open deleted the only snap,
// and once the checkpoint closed with nothing changed, undo found nothing.
func TestRetainLooksPastAnOpenCheckpoint(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprintf("gc=%v", gc), func(t *testing.T) {
			root := t.TempDir()
			r := openRepo(t, root)
			states := snaps(t, r, root, 2)
			collectWithCheckpointOpen(t, r, gc)
			treetest.Write(t, root, "f", "later\n", 0o644)
			_, _, err := r.Undo("", false)
			treetest.Must(t, err)
			treetest.Equal(t, "undo after retention with a checkpoint open", states[1], capture(t, root))
		})
	}
}

// Nor does an open checkpoint end the redo chain: it may close having
// changed nothing, and then redo takes the undos back in order. Found by
// TestModel (cmd/snapback): keep = 1 with a checkpoint open deleted the
// newest undo and the step it undid (an open checkpoint counted as a new
// step), and once the checkpoint closed empty, redo reapplied an older
// undo first.
func TestRetainKeepsTheRedoChainPastAnOpenCheckpoint(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprintf("gc=%v", gc), func(t *testing.T) {
			root := t.TempDir()
			r := openRepo(t, root)
			var states []treetest.State // after each of three steps
			for i := 0; i < 3; i++ {
				_, _, err := r.BeginCheckpoint("", "")
				treetest.Must(t, err)
				treetest.Write(t, root, fmt.Sprintf("f%d", i), "step\n", 0o644)
				_, _, err = r.EndCheckpoint("")
				treetest.Must(t, err)
				states = append(states, capture(t, root))
			}
			for i := 0; i < 2; i++ { // the 3rd step, then the 2nd undone
				_, _, err := r.Undo("", false)
				treetest.Must(t, err)
			}
			treetest.Equal(t, "two undos", states[0], capture(t, root))
			collectWithCheckpointOpen(t, r, gc)
			for _, want := range []int{1, 2} { // redo takes the 2nd, then the 3rd
				_, _, err := r.Redo(false)
				treetest.Must(t, err)
				treetest.Equal(t, fmt.Sprintf("redo of step %d after retention with a checkpoint open", want+1), states[want], capture(t, root))
			}
		})
	}
}

// A checkpoint that ends having changed something is a new step: redo has
// nothing left to reapply.
func TestCheckpointEndsTheRedoChain(t *testing.T) {
	root := t.TempDir()
	r := openRepo(t, root)
	snaps(t, r, root, 2)
	_, _, err := r.Undo("", false)
	treetest.Must(t, err)
	_, _, err = r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	treetest.Write(t, root, "g", "new\n", 0o644)
	_, dropped, err := r.EndCheckpoint("")
	treetest.Must(t, err)
	if dropped {
		t.Fatal("a checkpoint that changed g left no step")
	}
	if _, _, err := r.Redo(false); err != snapshot.ErrNothingToRedo {
		t.Fatalf("redo after a new step: %v, want nothing to redo", err)
	}
}
