package catalog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
)

// A catalog path is taken as written: ".." and relative paths are
// refused (the kernel would resolve "/x/lnk/../cat" through lnk), and no
// catalog at all has its own code.
func TestCatalogPathRules(t *testing.T) {
	base := t.TempDir()
	treetest.Must(t, os.MkdirAll(filepath.Join(base, "real", "sub"), 0o700))
	treetest.Must(t, os.Mkdir(filepath.Join(base, "cat"), 0o700))
	treetest.Must(t, os.Symlink(filepath.Join(base, "real", "sub"), filepath.Join(base, "lnk")))
	_, err := Open(filepath.Join(base, "lnk")+"/../cat", false)
	code(t, err, CodeBadPath)
	_, err = Open("cat", false)
	code(t, err, CodeBadPath)
	_, err = Open("", false)
	code(t, err, CodeNoCatalog)
	if _, err := Open(filepath.Join(base, "cat")+"/", false); err != nil {
		t.Errorf("a plain path with a trailing slash: %v", err)
	}
}

// Cancelling a create (Ctrl-C) removes its partial temp file; a temp
// file older than an hour (a killed create's) is swept by the next one,
// a fresh one (a live create's) is not.
func TestCreateInterruptedAndSweep(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	old := filepath.Join(c.Dir, ".tmp-0123456789abcdef.zip")
	fresh := filepath.Join(c.Dir, ".tmp-fedcba9876543210.zip")
	treetest.Write(t, c.Dir, filepath.Base(old), "partial", 0o600)
	treetest.Write(t, c.Dir, filepath.Base(fresh), "partial", 0o600)
	treetest.Must(t, os.Chtimes(old, time.Now().Add(-2*time.Hour), time.Now().Add(-2*time.Hour)))
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var seen int64
	_, _, err = c.Create(ctx, repo, p, projectOf(t, repo), func(n int64) {
		if seen += n; seen > 1<<20 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("an interrupted create succeeded")
	}
	ents, _ := os.ReadDir(c.Dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != filepath.Base(fresh) {
		t.Errorf("after an interrupted create the catalog holds %v, want only the live temp %s", names, filepath.Base(fresh))
	}
}

// A pull stops at the limit while streaming, and at once when what comes
// is not an archive; the message says which.
func TestPullBounded(t *testing.T) {
	r := localRepo(t)
	c := newCatalog(t)
	c.Limits.MaxArchive = 1 << 20
	id := "0000000000000000000000000000beef"
	for _, tc := range []struct {
		content []byte
		code    string
		says    string
	}{
		{append([]byte("PK\x03\x04"), make([]byte, 8<<20)...), CodeTooLarge, "more than 1048576 bytes"},
		{make([]byte, 8<<20), CodeBadZip, "does not start as an archive"},
	} {
		resticRun(t, r, tc.content, "backup", "--stdin", "--stdin-filename", FileName(id), "--tag", resticTag, "--tag", resticIDTag+id)
		_, err := r.Pull(context.Background(), c, id, nil)
		code(t, err, tc.code)
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("error %q does not say %q", err, tc.says)
		}
		resticRun(t, r, nil, "forget", "--tag", resticIDTag+id)
		noStaging(t, c)
		if _, err := os.Lstat(c.Path(id)); err == nil {
			t.Fatal("a refused pull linked the archive in")
		}
	}
}
