package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/snapshot/record"
)

// A change whose target puts a path in a directory that is neither in the
// tree nor in the target is refused before its journal is written: the
// apply makes no such directory, and a journal naming it could never be
// finished (a commit of PATHs in a directory the run made wrote one).
// A directory in the target, in the tree, or met through a symbolic link
// (refused too: the apply follows none) is checked as such.
func TestParentsThere(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(filepath.Join(root, config.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(root, Options{Access: ForChange, Create: true, Verb: "test", LockWait: time.Second, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	file := func(p string) record.Entry { return record.Entry{Path: p, Type: record.File, Mode: 0o644} }
	for _, c := range []struct {
		name   string
		target record.Manifest
		bad    string // what the error names; "" for none
	}{
		{"in the tree", record.Manifest{file("d/a"), file("top")}, ""},
		{"made by the change", record.Manifest{{Path: "n", Type: record.Dir, Mode: 0o755}, {Path: "n/m", Type: record.Dir, Mode: 0o755}, file("n/m/a")}, ""},
		{"a deletion below nothing", record.Manifest{{Path: "gone/a", Type: record.Absent}}, ""},
		{"missing", record.Manifest{file("n/a")}, "n/a: its directory is neither in the tree nor made by the change"},
		{"missing deeper", record.Manifest{{Path: "n", Type: record.Dir, Mode: 0o755}, file("n/m/a")}, "n/m/a: its directory is neither"},
		{"a file in the target", record.Manifest{file("f"), file("f/a")}, "f/a: its directory f is made a file"},
		{"through a symlink", record.Manifest{file("l/a")}, "l/a: its directory is neither"},
	} {
		err := r.parentsThere(c.target)
		if c.bad == "" && err != nil || c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.bad)
		}
	}
}
