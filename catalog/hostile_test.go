package catalog

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// within fails the test if f does not return within a few seconds: a
// FIFO opened for reading blocks until a writer comes, for ever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

// FIFOs, symlinks and directories named like archives are rejected by id
// and code without being opened or followed, and left in place; prune
// never touches them nor what they point to.
func TestNotRegularCandidates(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	// A valid archive outside the catalog, and a FIFO outside it.
	out := t.TempDir()
	outside := filepath.Join(out, FileName(s.ID))
	treetest.Must(t, os.Rename(c.Path(s.ID), outside))
	treetest.Must(t, unix.Mkfifo(filepath.Join(out, "fifo"), 0o600))
	const (
		fifo   = "000000000000000000000000000000f1"
		toFifo = "000000000000000000000000000000f2"
		dir    = "000000000000000000000000000000d1"
	)
	treetest.Must(t, unix.Mkfifo(c.Path(fifo), 0o600))
	treetest.Must(t, os.Symlink(filepath.Join(out, "fifo"), c.Path(toFifo)))
	treetest.Must(t, os.Symlink(outside, c.Path(s.ID)))
	treetest.Must(t, os.Mkdir(c.Path(dir), 0o700))

	for _, id := range []string{fifo, toFifo, s.ID, dir} {
		within(t, "verify "+id, func() {
			_, err := c.Verify(context.Background(), FileName(id), nil)
			code(t, err, CodeNotRegular)
		})
	}
	within(t, "restore of a FIFO", func() {
		_, err := c.Restore(context.Background(), FileName(fifo), filepath.Join(t.TempDir(), "into"), RestoreOptions{}, nil)
		code(t, err, CodeNotRegular)
	})
	within(t, "restore through a symlink", func() {
		into := filepath.Join(t.TempDir(), "into")
		_, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
		code(t, err, CodeNotRegular)
		if ents, _ := os.ReadDir(into); len(ents) > 0 {
			t.Errorf("a refused restore wrote %d entries", len(ents))
		}
	})
	var l *Listing
	within(t, "list", func() {
		var err error
		l, err = c.List(context.Background(), nil)
		treetest.Must(t, err)
	})
	if len(l.Archives) != 0 {
		t.Errorf("listed %v: a symlinked archive is not the catalog's", l.Archives)
	}
	got := map[string]string{}
	for _, r := range l.Rejected {
		got[r.ID] = r.Error
	}
	for _, id := range []string{fifo, toFifo, s.ID, dir} {
		if got[id] != CodeNotRegular {
			t.Errorf("%s: rejected with %q, want %s", id, got[id], CodeNotRegular)
		}
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	within(t, "prune", func() {
		plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
		treetest.Must(t, err)
		if len(plan.Delete) != 0 {
			t.Errorf("prune plans to delete %v", plan.Delete)
		}
	})
	for _, p := range []string{c.Path(fifo), c.Path(toFifo), c.Path(s.ID), c.Path(dir), outside} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s not left in place: %v", p, err)
		}
	}
}

// An archive others could have written is rejected by id and code
// (archive_insecure) and left in place.
func TestInsecureArchives(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	p := c.Path(s.ID)
	for _, mode := range []os.FileMode{0o644, 0o666, 0o400} {
		treetest.Must(t, os.Chmod(p, mode))
		_, err := c.Verify(context.Background(), FileName(s.ID), nil)
		code(t, err, CodeArchiveIns)
		l, err := c.List(context.Background(), nil)
		treetest.Must(t, err)
		if len(l.Archives) != 0 || len(l.Rejected) != 1 || l.Rejected[0].Error != CodeArchiveIns || l.Rejected[0].ID != s.ID {
			t.Errorf("mode %04o: listed %v, rejected %v", mode, l.Archives, l.Rejected)
		}
		_, err = c.Restore(context.Background(), FileName(s.ID), filepath.Join(t.TempDir(), "into"), RestoreOptions{}, nil)
		code(t, err, CodeArchiveIns)
	}
	treetest.Must(t, os.Chmod(p, 0o600))
	if _, err := c.Verify(context.Background(), FileName(s.ID), nil); err != nil {
		t.Fatal(err)
	}
	if treetest.Require(t, "root", os.Geteuid() == 0, "chown to another uid needs root") {
		treetest.Must(t, os.Chown(p, 4242, 4242))
		_, err := c.Verify(context.Background(), FileName(s.ID), nil)
		code(t, err, CodeArchiveIns)
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not left in place: %v", err)
		}
	}
}
