//go:build linux

package catalog

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// TestMain doubles as the restore the kill tests kill: with
// SNAPBACK_TEST_RESTORE=catalog|name|into|merge set, the test binary
// restores and exits.
func TestMain(m *testing.M) {
	fsutil.EnableTestSeams() // the crash points the kill tests set
	if job := os.Getenv("SNAPBACK_TEST_RESTORE"); job != "" {
		f := strings.Split(job, "|")
		c := &Catalog{Dir: f[0], Limits: DefaultLimits}
		if _, err := c.Restore(context.Background(), f[1], f[2], RestoreOptions{Merge: f[3] == "merge"}, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if job := os.Getenv("SNAPBACK_TEST_PRUNE"); job != "" {
		f := strings.Split(job, "|")
		c := &Catalog{Dir: f[0], Limits: DefaultLimits}
		if _, err := c.PruneApply(context.Background(), f[1], f[2], nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPruneKilled kills `archive prune --apply` before each of its
// state-changing system calls in turn: the next open of the catalog (any
// verb's) finishes it or rolls it back, so that every archive is either
// in the catalog, verifying, or deleted as planned, and no staging
// directory stays: a killed apply left its archives staged for ever.
func TestPruneKilled(t *testing.T) {
	ctx := context.Background()
	base, ids := threeArchives(t)
	sawBefore, sawAfter := 0, 0
	for k := 1; ; k++ {
		dir := filepath.Join(t.TempDir(), "cat")
		treetest.Must(t, exec.Command("cp", "-a", base.Dir, dir).Run())
		c := &Catalog{Dir: dir, Limits: DefaultLimits}
		tokens := t.TempDir()
		plan, err := c.PrunePreview(ctx, PruneOptions{Keep: 1}, tokens, nil)
		treetest.Must(t, err)
		if len(plan.Delete) != 2 || plan.Kept[0].ID != ids[2] {
			t.Fatalf("plan keeps %v, deletes %v", plan.Kept, plan.Delete)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SNAPBACK_TEST_PRUNE="+strings.Join([]string{dir, plan.Token, tokens}, "|"), fmt.Sprintf("SNAPBACK_KILL_AT=%d", k))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
		if err != nil && !killed {
			t.Fatalf("kill point %d: prune: %v\n%s", k, err, out)
		}
		if _, err := Open(dir, false); err != nil {
			t.Fatalf("kill point %d: open after the kill: %v", k, err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, pruneStagePrefix+"*")); len(left) > 0 {
			t.Fatalf("kill point %d: staging left behind: %v", k, left)
		}
		var there []string
		for _, id := range ids {
			if _, err := os.Lstat(c.Path(id)); err == nil {
				there = append(there, id)
				if _, err := c.Verify(ctx, FileName(id), nil); err != nil {
					t.Fatalf("kill point %d: archive %s: %v", k, id, err)
				}
			}
		}
		switch {
		case len(there) == 3:
			sawBefore++
		case len(there) == 1 && there[0] == ids[2]:
			sawAfter++
		default:
			t.Fatalf("kill point %d: the catalog holds %v: neither before nor after the prune", k, there)
		}
		if !killed {
			if len(there) != 1 {
				t.Fatalf("the prune completed but left %v", there)
			}
			t.Logf("%d kill points, each recovered (%d to the state before, %d after)", k-1, sawBefore, sawAfter-1)
			return
		}
	}
}

// restoreChild runs a restore in a child process, killed at the crash
// point at (or, when at is "", after the delay) ; it reports whether the
// child died of SIGKILL.
func restoreChild(t *testing.T, c *Catalog, name, into string, merge bool, at string, after time.Duration) bool {
	t.Helper()
	mode := ""
	if merge {
		mode = "merge"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SNAPBACK_TEST_RESTORE="+strings.Join([]string{c.Dir, name, into, mode}, "|"), "SNAPBACK_CRASH_AT="+at)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	treetest.Must(t, cmd.Start())
	if at == "" {
		time.AfterFunc(after, func() { cmd.Process.Kill() })
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
		t.Fatalf("restore child: %v\n%s", err, out.String())
	}
	treetest.Must(t, err)
	return false
}

// bigArchive archives a project of 2,000 files in 40 directories.
func bigArchive(t *testing.T) (*Catalog, string, treetest.State) {
	t.Helper()
	root := t.TempDir()
	for d := 0; d < 40; d++ {
		for f := 0; f < 50; f++ {
			treetest.Write(t, root, fmt.Sprintf("d%02d/f%02d.txt", d, f), fmt.Sprintf("%d/%d %s\n", d, f, strings.Repeat("z", f*7)), 0o644)
		}
	}
	treetest.Must(t, os.Symlink("/etc/passwd", filepath.Join(root, "d00/abs-link")))
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	m, err := repo.Snap(record.KindSnap, "big")
	treetest.Must(t, err)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	want := treetest.Capture(t, root, snapshot.StoreDir)
	delete(want, "")
	return c, FileName(s.ID), want
}

// settled checks that a retried restore left the tree whole and no
// staging directory anywhere.
func settled(t *testing.T, what, into string, want treetest.State, extra ...string) {
	t.Helper()
	got := treetest.Capture(t, into)
	delete(got, "")
	for _, e := range extra {
		delete(got, e)
	}
	treetest.Equal(t, what, want, got)
	for _, d := range []string{into, filepath.Dir(into)} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.Contains(e.Name(), restoreTag) {
				t.Fatalf("%s: staging %s left in %s", what, e.Name(), d)
			}
		}
	}
}

// A restore killed at any step, into a new directory, into an empty
// mount point, or merging, is followed by a retry that works and leaves
// the exact tree.
func TestRestoreKilled(t *testing.T) {
	c, name, want := bigArchive(t)
	// How long a whole restore takes, for the random kills.
	start := time.Now()
	restoreChild(t, c, name, filepath.Join(t.TempDir(), "timing"), false, "", time.Hour)
	full := time.Since(start)

	type scenario struct {
		what  string
		into  func() string // a fresh directory to restore into
		merge bool
		steps []string
	}
	fresh := func() string { return filepath.Join(t.TempDir(), "into") }
	empty := func() string { d := fresh(); treetest.Must(t, os.Mkdir(d, 0o750)); return d }
	scenarios := []scenario{
		{"new directory", fresh, false, []string{"archive-restore-staged", "archive-restore-built", "archive-restore-renamed"}},
		{"empty directory", empty, false, []string{"archive-restore-built", "archive-restore-renamed"}},
		{"merge", func() string { d := empty(); treetest.Write(t, d, "mine.txt", "mine\n", 0o600); return d }, true,
			[]string{"archive-restore-staged", "archive-restore-built", "archive-restore-move:1", "archive-restore-move:20", "archive-restore-moved"}},
	}
	if treetest.Require(t, "root", os.Geteuid() == 0, "mounting a tmpfs needs root") {
		scenarios = append(scenarios, scenario{"empty mount point", func() string {
			d := empty()
			treetest.Must(t, unix.Mount("tmpfs", d, "tmpfs", 0, "mode=0750"))
			t.Cleanup(func() { unix.Unmount(d, unix.MNT_DETACH) })
			return d
		}, false, []string{"archive-restore-staged", "archive-restore-built", "archive-restore-move:1", "archive-restore-move:17", "archive-restore-move:40", "archive-restore-moved"}})
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for _, sc := range scenarios {
		steps := sc.steps
		for i := 0; i < 4; i++ {
			steps = append(steps, "") // random moments
		}
		for _, at := range steps {
			into := sc.into()
			after := time.Duration(rng.Int63n(int64(full)))
			killed := restoreChild(t, c, name, into, sc.merge, at, after)
			if at != "" && !killed {
				t.Fatalf("%s: the restore passed %s without dying", sc.what, at)
			}
			what := fmt.Sprintf("%s, killed at %s", sc.what, at)
			if at == "" {
				what = fmt.Sprintf("%s, killed after %v (killed: %v)", sc.what, after, killed)
			}
			// The retry works; or, when the kill came after the rename
			// (the restore was whole already), it finds the directory
			// full: a restore is all or nothing.
			if _, err := c.Restore(context.Background(), name, into, RestoreOptions{Merge: sc.merge}, nil); err != nil && (CodeOf(err) != CodeNotEmpty || sc.merge) {
				t.Fatalf("%s: the retry: %v", what, err)
			}
			extra := []string{}
			if sc.merge {
				extra = append(extra, "mine.txt")
			}
			settled(t, what, into, want, extra...)
		}
	}
}
