package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

func openRepo(t *testing.T, root string) *snapshot.Repo {
	t.Helper()
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true, Verb: "test", LockWait: time.Second})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	return repo
}

// TestRunOnTree: a copy-mode run changes the tree, is recorded as a done
// run of the paths it changed, and undo reverts it; with --then discard it
// is undone at once. The store stays locked for the caller.
func TestRunOnTree(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "before\n", 0o644)
	repo := openRepo(t, root)
	res, err := Run(context.Background(), repo, Options{Args: []string{"sh", "-c", "echo after > " + filepath.Join(root, "a.txt") + "; exit 3"},
		Mode: "copy", Then: ThenCommit, LockWait: time.Second})
	if err != nil || res.Status != 3 || res.StartErr != nil || res.Pending != nil {
		t.Fatalf("run: %+v, %v; want status 3", res, err)
	}
	h, err := repo.History()
	treetest.Must(t, err)
	last := h.All[len(h.All)-1]
	if last.Kind != record.KindRun || last.State != record.StateDone || last.Mode != "copy" || *last.ExitStatus != 3 || last.Files != 1 {
		t.Fatalf("recorded %+v; want a done copy run of 1 file, exit 3", last)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "after\n" {
		t.Fatalf("a.txt is %q after the run", b)
	}
	res, err = Run(context.Background(), repo, Options{Args: []string{"sh", "-c", "echo discarded > " + filepath.Join(root, "a.txt")},
		Mode: "copy", Then: ThenDiscard, LockWait: time.Second})
	if err != nil || res.Status != 0 {
		t.Fatalf("run --then discard: %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "after\n" {
		t.Fatalf("a.txt is %q after a discarded run, want the state before it", b)
	}
	// A command that cannot start is still a recorded run, with 127.
	res, err = Run(context.Background(), repo, Options{Args: []string{"snapback-no-such-command-xyz"}, Mode: "copy", LockWait: time.Second})
	if err != nil || res.Status != StatusNotFound || res.StartErr == nil {
		t.Fatalf("missing command: %+v, %v; want 127 and why", res, err)
	}
}

// TestRunRefused: bad input is refused before anything runs or changes.
func TestRunRefused(t *testing.T) {
	root := t.TempDir()
	repo := openRepo(t, root)
	marker := filepath.Join(root, "ran")
	for _, o := range []Options{
		{Mode: "warp"},
		{Mode: "zfs"},
		{Mode: "copy", Then: ThenReview},
	} {
		o.Args, o.LockWait = []string{"touch", marker}, time.Second
		before := treetest.Capture(t, root)
		_, err := Run(context.Background(), repo, o)
		var bad *BadInputError
		if !errors.As(err, &bad) {
			t.Fatalf("%+v: %v, want a BadInputError", o, err)
		}
		treetest.Equal(t, "tree and store after a refused run", before, treetest.Capture(t, root))
	}
	if _, err := Run(context.Background(), repo, Options{Args: []string{"true"}, Continue: "20990101"}); !errors.Is(err, snapshot.ErrNoPending) {
		t.Fatalf("--continue of no run: %v, want ErrNoPending", err)
	}
}
