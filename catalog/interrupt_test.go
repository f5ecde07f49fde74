package catalog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// stopAt is a context that is cancelled, as Ctrl-C would cancel it, the
// n-th time an operation asks whether it should stop: a signal at an
// exact instant cannot be sent for real, so this stands in for it, to
// stop an operation at every point it looks.
type stopAt struct {
	context.Context
	cancel context.CancelFunc
	n, at  int64
	asked  atomic.Int64
}

func newStopAt(at int64) *stopAt {
	ctx, cancel := context.WithCancel(context.Background())
	return &stopAt{Context: ctx, cancel: cancel, at: at}
}

func (s *stopAt) Err() error {
	if s.asked.Add(1) >= s.at {
		s.cancel()
	}
	return s.Context.Err()
}

// wantInterrupted fails the test unless err is an interruption: code
// interrupted, wrapping context.Canceled, one line.
func wantInterrupted(t *testing.T, err error) {
	t.Helper()
	code(t, err, CodeInterrupted)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not wrap context.Canceled", err)
	}
}

// leftovers lists what a create, restore or prune may leave in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{".tmp-*", "*" + restoreTag + "*", ".snapback-prune-*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		out = append(out, m...)
	}
	return out
}

// An interrupted create removes its partial file and says interrupted
// (it said io_error).
func TestCreateInterrupted(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err = c.Create(ctx, repo, p, projectOf(t, repo), func(int64) { cancel() })
	wantInterrupted(t, err)
	if ents, _ := os.ReadDir(c.Dir); len(ents) != 0 {
		t.Fatalf("an interrupted create left %v", ents)
	}
}

// An interrupted list or verify stops with interrupted: not a listing
// with the unfinished archive among the rejected.
func TestListVerifyInterrupted(t *testing.T) {
	c, ids := threeArchives(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.List(ctx, func(int64) { cancel() })
	wantInterrupted(t, err)
	ctx, cancel = context.WithCancel(context.Background())
	_, err = c.Verify(ctx, FileName(ids[0]), func(int64) { cancel() })
	wantInterrupted(t, err)
	_, err = VerifyFile(ctx, c.Path(ids[0]), DefaultLimits, nil)
	wantInterrupted(t, err)
}

// A restore stopped at every point it looks leaves DIR as it was (gone,
// or with its own files only) and nothing of its own behind, or, once
// the tree is moving in, finishes.
func TestRestoreInterrupted(t *testing.T) {
	c := newCatalog(t)
	files := map[string]string{"a.txt": "alpha", "d/b.txt": "bravo", "d/e/c.txt": "charlie", "f.txt": strings.Repeat("x", 3<<20)}
	s := snapTree(t, c, files)
	for _, merge := range []bool{false, true} {
		stopped := 0
		for at := int64(1); ; at++ {
			parent := t.TempDir()
			into := filepath.Join(parent, "into")
			if merge {
				treetest.Write(t, into, "mine.txt", "the user's", 0o644)
			}
			before, _ := treetest.CaptureErr(into)
			ctx := newStopAt(at)
			_, err := c.Restore(ctx, FileName(s.ID), into, RestoreOptions{Merge: merge}, nil)
			if err == nil {
				if ctx.asked.Load() < at {
					if stopped == 0 {
						t.Fatal("no stop ever interrupted the restore")
					}
					t.Logf("merge %v: stopped at %d points", merge, stopped)
					break // never stopped: every point was tried
				}
				continue // stopped after the point of no return: finished
			}
			wantInterrupted(t, err)
			stopped++
			after, _ := treetest.CaptureErr(into)
			treetest.Equal(t, "into after an interrupted restore", before, after)
			if l := append(leftovers(t, parent), leftovers(t, into)...); len(l) > 0 {
				t.Fatalf("stop %d: an interrupted restore left %v", at, l)
			}
			if at > 10000 {
				t.Fatal("the restore never ends")
			}
		}
	}
}

// A prune apply stopped at every point it looks puts every archive back.
func TestPruneInterrupted(t *testing.T) {
	c, ids := threeArchives(t)
	tokens := t.TempDir()
	for at := int64(1); ; at++ {
		plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
		treetest.Must(t, err)
		ctx := newStopAt(at)
		_, err = c.PruneApply(ctx, plan.Token, tokens, nil)
		if err == nil {
			if ctx.asked.Load() >= at {
				t.Fatalf("stop %d: the prune went on after its stop", at)
			}
			break
		}
		wantInterrupted(t, err)
		allThere(t, c, ids, "")
		if at > 10000 {
			t.Fatal("the prune never ends")
		}
	}
	for i, id := range ids {
		if _, err := os.Lstat(c.Path(id)); (i < 2) != os.IsNotExist(err) {
			t.Errorf("archive %d after the prune: %v", i, err)
		}
	}
	// A preview stopped stores no token.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tokens2 := t.TempDir()
	_, err := c.PrunePreview(ctx, PruneOptions{Keep: 1}, tokens2, nil)
	wantInterrupted(t, err)
	if ents, _ := os.ReadDir(tokens2); len(ents) != 0 {
		t.Errorf("an interrupted preview stored %v", ents)
	}
}
