//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
)

// TestOutsideStoreHidden: a store outside the tree ([snapshot] store) is
// out of an overlay run's reach by its path too: the view's init covers
// it with an empty read-only directory, for root and for an ordinary
// user, in both overlay modes. The run still commits into the tree and
// records into the store.
func TestOutsideStoreHidden(t *testing.T) {
	for _, mode := range []string{"overlayfs", "fuse"} {
		for _, ordinary := range []bool{false, true} {
			name := mode + "/root"
			if ordinary {
				name = mode + "/user"
			}
			t.Run(name, func(t *testing.T) { testOutsideStoreHidden(t, mode, ordinary) })
		}
	}
}

func testOutsideStoreHidden(t *testing.T, mode string, ordinary bool) {
	var bin string
	top := userTempDir(t, "snapback-outside-")
	root, store := filepath.Join(top, "p"), filepath.Join(top, "state", "store")
	treetest.Write(t, root, "a", "original\n", 0o644)
	treetest.Write(t, root, "snapback.toml", fmt.Sprintf("[snapshot]\nstore = %q\n", store), 0o644)
	sbx := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"-C", root}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if ordinary {
		cred, b := ordinaryUser(t)
		bin = b
		treetest.Must(t, os.Mkdir(filepath.Join(top, "state"), 0o700))
		for _, p := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "snapback.toml"), filepath.Join(top, "state")} {
			treetest.Must(t, os.Lchown(p, int(cred.Uid), int(cred.Gid)))
		}
		sbx = func(args ...string) (string, error) { return asUser(t, bin, root, args...) }
	} else {
		bin = snapbackBinary(t)
	}
	if out, err := sbx("snap", "-m", "base"); err != nil {
		t.Fatalf("snap: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(root, snapshot.StoreDir)); err == nil {
		t.Fatal("a store in the tree, though snapback.toml names one outside")
	}
	out, err := sbx("doctor", "--json")
	if err != nil || !strings.Contains(out, `"name": "`+mode+`",
      "available": true`) {
		why := fmt.Sprintf("doctor does not offer %s: %v\n%s", mode, err, out)
		if !treetest.Require(t, mode, false, why) {
			t.Skip("SNAPBACK_REQUIRE does not name " + mode + ": " + why)
		}
	}
	out, err = sbx("run", "--mode", mode, "--then", "review", "--", "sh", "-c",
		`{ ls -A "$0" | wc -l; ls "$0/snapshots" | wc -l; echo x > "$0/evil"; rm -rf "$0/objects"; } 2>/dev/null; echo changed > a`, store)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if lines := strings.Fields(out); len(lines) < 2 || lines[0] != "0" || lines[1] != "0" {
		t.Fatalf("the store is reachable by its path inside the run:\n%s", out)
	}
	if _, err := os.Lstat(filepath.Join(store, "evil")); err == nil {
		t.Fatal("the command wrote into the store")
	}
	if _, err := os.Lstat(filepath.Join(store, "objects")); err != nil {
		t.Fatalf("the command removed the store's objects: %v", err)
	}
	if out, err := sbx("commit"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "changed\n" {
		t.Fatalf("after commit a = %q", b)
	}
	if out, err := sbx("undo"); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "original\n" {
		t.Fatalf("after undo a = %q", b)
	}
}
