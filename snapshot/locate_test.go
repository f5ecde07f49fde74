package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// TestLocate: the configured store wins; else .snapback when it exists;
// else the state directory's store when it exists; else where a new one
// goes (outside for the hooks). Two projects never get the same state
// store, and a path through a symlink gets its target's.
func TestLocate(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	top := t.TempDir()
	a, b := filepath.Join(top, "x", "p"), filepath.Join(top, "y", "p")
	treetest.Must(t, os.MkdirAll(a, 0o755))
	treetest.Must(t, os.MkdirAll(b, 0o755))
	sa, err := snapshot.StateStore(a)
	treetest.Must(t, err)
	sb, err := snapshot.StateStore(b)
	treetest.Must(t, err)
	if sa == sb || !strings.HasPrefix(sa, filepath.Join(state, "snapback", "projects", "p-")) {
		t.Fatalf("state stores %s and %s", sa, sb)
	}
	treetest.Must(t, os.Symlink(a, filepath.Join(top, "link")))
	if sl, _ := snapshot.StateStore(filepath.Join(top, "link")); sl != sa {
		t.Fatalf("through a symlink: %s, want %s", sl, sa)
	}

	check := func(what string, root, configured string, outside bool, want string, exists bool) {
		t.Helper()
		loc, err := snapshot.Locate(root, configured, outside)
		if err != nil || loc.Dir != want || loc.Exists != exists || loc.InTree != (want == filepath.Join(root, snapshot.StoreDir)) {
			t.Fatalf("%s: %+v %v, want %s (exists %v)", what, loc, err, want, exists)
		}
	}
	check("nothing yet", a, "", false, filepath.Join(a, snapshot.StoreDir), false)
	check("nothing yet, for the hooks", a, "", true, sa, false)
	s, err := snapshot.Open(a, snapshot.Options{Access: snapshot.ForChange, Create: true, Outside: true})
	treetest.Must(t, err)
	s.Close()
	if s.InTree() || !snapshot.Marked(a) || snapshot.Marked(b) {
		t.Fatalf("after the hooks' store: in tree %v, marked %v %v", s.InTree(), snapshot.Marked(a), snapshot.Marked(b))
	}
	check("the state store", a, "", false, sa, true)
	elsewhere := filepath.Join(top, "stores", "a")
	check("configured", a, elsewhere, false, elsewhere, false)
	cfg := &config.Config{}
	cfg.Snapshot.Store = sa
	_, err = snapshot.Open(b, snapshot.Options{Access: snapshot.ForChange, Config: cfg})
	if !errors.Is(err, snapshot.ErrUntrusted) {
		t.Fatalf("another project's store opened: %v", err)
	}
	treetest.Must(t, os.Mkdir(filepath.Join(a, snapshot.StoreDir), 0o700))
	check("in the tree", a, "", true, filepath.Join(a, snapshot.StoreDir), true)
	for _, bad := range []string{filepath.Join(a, "hist"), filepath.Join(top, "link", "hist"), top} {
		if _, err := snapshot.Locate(a, bad, false); err == nil || !strings.Contains(err.Error(), "[snapshot] store") {
			t.Errorf("store %s: %v, want a refusal", bad, err)
		}
	}
	// A state directory inside the project: the store stays in the tree.
	t.Setenv("XDG_STATE_HOME", filepath.Join(b, ".state"))
	check("a state directory in the project", b, "", true, filepath.Join(b, snapshot.StoreDir), false)
}
