package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// sessionTree is a tree of files "a", "b", … each holding "0\n", and a
// way to read one back ("" when absent).
func sessionTree(t *testing.T, names ...string) (string, func(string) string) {
	t.Helper()
	root := t.TempDir()
	for _, n := range names {
		treetest.Write(t, root, n, "0\n", 0o644)
	}
	return root, func(n string) string {
		b, err := os.ReadFile(filepath.Join(root, n))
		if os.IsNotExist(err) {
			return ""
		}
		treetest.Must(t, err)
		return string(b)
	}
}

func begin(t *testing.T, r *snapshot.Repo, session string, w snapshot.Writes) {
	t.Helper()
	if _, _, err := r.BeginTurn(session, session+"'s turn", w); err != nil {
		t.Fatal(err)
	}
}

func end(t *testing.T, r *snapshot.Repo, session string) *record.Meta {
	t.Helper()
	m, dropped, err := r.EndCheckpoint(session)
	treetest.Must(t, err)
	if m == nil || dropped {
		t.Fatalf("end %s: %v dropped=%v", session, m, dropped)
	}
	got, err := r.ReadMeta(m.ID)
	treetest.Must(t, err)
	return got
}

// stepPaths lists the paths a step holds.
func stepPaths(t *testing.T, r *snapshot.Repo, m *record.Meta) []string {
	t.Helper()
	after, err := r.LoadManifest(m.After)
	treetest.Must(t, err)
	return after.Paths()
}

// Two sessions' turns overlap, with edit tools only: each step holds what
// its session's tools wrote, a change neither claimed during the overlap
// is shared by both, and a change made while one was alone is its own.
// Undone in either order, each session's files go back to what it found,
// the other's stay as it left them, the shared one is left and named;
// --include-shared takes it.
func TestSessionsEditTools(t *testing.T) {
	sessionsEditTools(t, func(t *testing.T, root string) *snapshot.Repo { return openRepo(t, root) }, false)
}

// sessionsEditTools is TestSessionsEditTools with the store open as open
// opens it; watched: its begins must be watched ones.
func sessionsEditTools(t *testing.T, open func(t *testing.T, root string) *snapshot.Repo, watched bool) {
	for _, order := range [][]string{{"A", "B"}, {"B", "A"}} {
		t.Run(order[0]+"first", func(t *testing.T) {
			root, read := sessionTree(t, "a", "b", "c", "x")
			r := open(t, root)
			begin(t, r, "A", snapshot.Writes{Paths: []string{"a"}})
			if watched && !r.LastWatched {
				t.Fatal("A's begin was not watched")
			}
			treetest.Write(t, root, "x", "A alone\n", 0o644) // before B began: A's
			begin(t, r, "B", snapshot.Writes{Paths: []string{"b", "new/b2"}})
			treetest.Write(t, root, "a", "A\n", 0o644)
			treetest.Write(t, root, "b", "B\n", 0o644)
			treetest.Write(t, root, "new/b2", "B\n", 0o644)
			treetest.Write(t, root, "c", "nobody's\n", 0o644)
			a, b := end(t, r, "A"), end(t, r, "B")
			if got := stepPaths(t, r, a); !slices.Equal(got, []string{"a", "c", "x"}) {
				t.Errorf("A's step holds %q", got)
			}
			if got := stepPaths(t, r, b); !slices.Equal(got, []string{"b", "c", "new", "new/b2"}) {
				t.Errorf("B's step holds %q", got)
			}
			if !slices.Equal(a.Shared, []string{"c"}) || !slices.Equal(b.Shared, []string{"c"}) {
				t.Errorf("shared: A %q, B %q", a.Shared, b.Shared)
			}
			if !slices.Equal(a.Overlaps, []string{b.ID}) || !slices.Equal(b.Overlaps, []string{a.ID}) {
				t.Errorf("overlaps: A %q, B %q", a.Overlaps, b.Overlaps)
			}
			steps := map[string]*record.Meta{"A": a, "B": b}
			want := map[string]map[string]string{
				"A": {"a": "0\n", "x": "0\n"},
				"B": {"b": "0\n", "new/b2": ""},
			}
			for i, s := range order {
				_, _, left, err := r.UndoWith(steps[s].ID, snapshot.UndoOptions{})
				treetest.Must(t, err)
				if !slices.Equal(left.Paths, []string{"c"}) {
					t.Errorf("undo %s left %q, not the shared c", s, left.Paths)
				}
				for p, v := range want[s] {
					if read(p) != v {
						t.Errorf("after undo of %s: %s is %q, want %q", s, p, read(p), v)
					}
				}
				if i == 0 { // the other's files as it left them
					o := order[1]
					for p := range want[o] {
						if read(p) != o+"\n" && !(o == "A" && p == "x" && read(p) == "A alone\n") {
							t.Errorf("undo of %s changed %s's %s: %q", s, o, p, read(p))
						}
					}
				}
				if read("c") != "nobody's\n" {
					t.Errorf("undo of %s reverted the shared c", s)
				}
			}
			// --include-shared takes it: redo the last, undo it with it.
			_, _, err := r.Redo(false)
			treetest.Must(t, err)
			last := steps[order[1]]
			_, _, left, err := r.UndoWith(last.ID, snapshot.UndoOptions{IncludeShared: true})
			treetest.Must(t, err)
			if len(left.Paths) != 0 || read("c") != "0\n" {
				t.Errorf("undo --include-shared: left %q, c %q", left.Paths, read("c"))
			}
		})
	}
}

// A shell command makes a session a writer of any path: during the
// overlap, what it ran beside another session's edit tool is shared, and
// what only it could have written is its own.
func TestSessionsShell(t *testing.T) {
	root, read := sessionTree(t, "a", "s")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Any: true})
	begin(t, r, "B", snapshot.Writes{Paths: []string{"a"}})
	treetest.Write(t, root, "s", "A's shell\n", 0o644)
	treetest.Write(t, root, "a", "B\n", 0o644)
	b := end(t, r, "B")
	treetest.Write(t, root, "s", "A's shell again\n", 0o644) // after B's end: A's alone
	a := end(t, r, "A")
	if got := stepPaths(t, r, a); !slices.Equal(got, []string{"a", "s"}) || !slices.Equal(a.Shared, []string{"a"}) {
		t.Errorf("A's step: %q, shared %q", got, a.Shared)
	}
	if got := stepPaths(t, r, b); !slices.Equal(got, []string{"a"}) || !slices.Equal(b.Shared, []string{"a"}) {
		t.Errorf("B's step: %q, shared %q", got, b.Shared)
	}
	_, _, left, err := r.UndoSession("A", snapshot.UndoOptions{})
	treetest.Must(t, err)
	if read("s") != "0\n" || read("a") != "B\n" || !slices.Equal(left.Paths, []string{"a"}) {
		t.Errorf("undo --session A: s %q, a %q, left %q", read("s"), read("a"), left.Paths)
	}
}

// A session whose checkpoint closed leaving no step wrote nothing that
// lasted; another's change in its span is the other's alone. Three
// sessions: what two of them claimed at once is shared, what one claimed
// is its own.
func TestSessionsThree(t *testing.T) {
	root, read := sessionTree(t, "a", "b", "c", "ab")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a", "ab"}})
	begin(t, r, "B", snapshot.Writes{Paths: []string{"b", "ab"}})
	begin(t, r, "C", snapshot.Writes{Paths: []string{"c"}})
	treetest.Write(t, root, "a", "A\n", 0o644)
	treetest.Write(t, root, "ab", "A or B\n", 0o644)
	if m, dropped, err := r.EndCheckpoint("C"); err != nil || m == nil || !dropped {
		t.Fatalf("C changed nothing of its own, yet: %v dropped=%v %v", m, dropped, err)
	}
	treetest.Write(t, root, "b", "B\n", 0o644)
	a, b := end(t, r, "A"), end(t, r, "B")
	if got := stepPaths(t, r, a); !slices.Equal(got, []string{"a", "ab"}) || !slices.Equal(a.Shared, []string{"ab"}) {
		t.Errorf("A's step: %q, shared %q", got, a.Shared)
	}
	if got := stepPaths(t, r, b); !slices.Equal(got, []string{"ab", "b"}) || !slices.Equal(b.Shared, []string{"ab"}) {
		t.Errorf("B's step: %q, shared %q", got, b.Shared)
	}
	_, _, _, err := r.UndoWith(a.ID, snapshot.UndoOptions{})
	treetest.Must(t, err)
	if read("a") != "0\n" || read("b") != "B\n" || read("ab") != "A or B\n" {
		t.Errorf("after undo of A: a %q b %q ab %q", read("a"), read("b"), read("ab"))
	}
}

// A session's first shell command beside another session's turn starts
// a span: what the other's edit tools wrote before it stays the other's;
// what changes after it, beside the other's edit tool, is shared.
func TestSessionsShellLater(t *testing.T) {
	root, read := sessionTree(t, "a", "b", "c")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a"}})
	begin(t, r, "B", snapshot.Writes{Paths: []string{"b", "c"}})
	treetest.Write(t, root, "a", "A\n", 0o644)
	treetest.Write(t, root, "b", "B\n", 0o644)
	begin(t, r, "A", snapshot.Writes{Any: true}) // A's shell
	treetest.Write(t, root, "c", "B\n", 0o644)
	a, b := end(t, r, "A"), end(t, r, "B")
	if got := stepPaths(t, r, a); !slices.Equal(got, []string{"a", "c"}) || !slices.Equal(a.Shared, []string{"c"}) {
		t.Errorf("A's step: %q, shared %q", got, a.Shared)
	}
	if got := stepPaths(t, r, b); !slices.Equal(got, []string{"b", "c"}) || !slices.Equal(b.Shared, []string{"c"}) {
		t.Errorf("B's step: %q, shared %q", got, b.Shared)
	}
	_, _, left, err := r.UndoWith(b.ID, snapshot.UndoOptions{})
	treetest.Must(t, err)
	if read("b") != "0\n" || read("a") != "A\n" || read("c") != "B\n" || !slices.Equal(left.Paths, []string{"c"}) {
		t.Errorf("undo of B: a %q b %q c %q, left %q", read("a"), read("b"), read("c"), left.Paths)
	}
}

// A mark whose tree cannot be read (its object missing) does not keep a
// checkpoint from closing: its span is judged with the one before it,
// which can only share more.
func TestSessionsMarkUnreadable(t *testing.T) {
	root, _ := sessionTree(t, "a", "b", "x")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a"}})
	treetest.Write(t, root, "a", "A\n", 0o644)
	treetest.Write(t, root, "x", "while A was alone\n", 0o644) // A's, unclaimed
	begin(t, r, "B", snapshot.Writes{Paths: []string{"b"}})
	treetest.Write(t, root, "b", "B\n", 0o644)
	open, err := r.OpenCheckpoints()
	treetest.Must(t, err)
	a := open[0]
	if a.Session != "A" || len(a.Marks) != 2 {
		t.Fatalf("A's marks: %+v", a)
	}
	a.Marks[1].Tree = strings.Repeat("0", 64) // no such object
	treetest.Must(t, r.WriteMeta(a))
	got := end(t, r, "A")
	if paths := stepPaths(t, r, got); !slices.Equal(paths, []string{"a", "x"}) || !slices.Equal(got.Shared, []string{"x"}) {
		t.Errorf("A's step: %q, shared %q (x, changed alone but judged with B's span, is shared)", paths, got.Shared)
	}
}

// A later turn of another session that changed a path of a step is, as a
// person's edit after it, a conflict: the undo refuses, naming the path
// and the turn, and reverts nothing.
func TestSessionsLaterChangeConflicts(t *testing.T) {
	root, read := sessionTree(t, "a", "b")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a", "b"}})
	treetest.Write(t, root, "a", "A\n", 0o644)
	treetest.Write(t, root, "b", "A\n", 0o644)
	a := end(t, r, "A")
	begin(t, r, "B", snapshot.Writes{Paths: []string{"a"}})
	treetest.Write(t, root, "a", "B\n", 0o644)
	b := end(t, r, "B")
	_, _, _, err := r.UndoWith(a.ID, snapshot.UndoOptions{IncludeShared: true})
	var conflict *snapshot.ConflictError
	if !errors.As(err, &conflict) || !slices.Equal(conflict.Paths, []string{"a"}) {
		t.Fatalf("undo of A's turn under B's later change: %v", err)
	}
	if want := b.ID + " (session B)"; !slices.Equal(conflict.Turns, []string{want}) || !strings.Contains(err.Error(), "by another session's turn "+want) {
		t.Errorf("the refusal does not name B's turn: %v (%q)", err, conflict.Turns)
	}
	if read("a") != "B\n" || read("b") != "A\n" {
		t.Errorf("a refused undo changed the tree: a %q b %q", read("a"), read("b"))
	}
}

// A claimed path the store cannot name is taken as any path, never an
// error that would leave the turn unrecorded.
func TestSessionsClaimUnnamable(t *testing.T) {
	root, _ := sessionTree(t, "a")
	r := openRepo(t, root)
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a"}})
	begin(t, r, "B", snapshot.Writes{Paths: []string{"../x"}})
	begin(t, r, "A", snapshot.Writes{Paths: []string{"a/./b"}})
	open, err := r.OpenCheckpoints()
	treetest.Must(t, err)
	for _, m := range open {
		got, err := r.ReadMeta(m.ID)
		treetest.Must(t, err)
		if !got.AnyPath || slices.Contains(got.Claimed, "../x") || slices.Contains(got.Claimed, "a/./b") {
			t.Errorf("%s: any %v, claimed %q", got.Session, got.AnyPath, got.Claimed)
		}
	}
}
