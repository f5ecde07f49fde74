//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// testUser is the ordinary user scripts/test.sh creates for these tests.
const testUser = "snapback-test"

// asUser runs the snapback binary as testUser in dir.
func asUser(t *testing.T, bin, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("runuser", append([]string{"-u", testUser, "--", bin, "-C", dir}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ordinaryUser skips the test (or fails it, when SNAPBACK_REQUIRE names
// userns) where it cannot run things as testUser: not root, or no such
// user. It returns the user's credential and the snapback binary, made
// reachable by that user.
func ordinaryUser(t *testing.T) (*syscall.Credential, string) {
	t.Helper()
	u, err := user.Lookup(testUser)
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "switching to " + testUser + " needs root"
	case err != nil:
		why = "no user " + testUser + " (scripts/test.sh creates it)"
	}
	if !treetest.Require(t, "userns", why == "", why) {
		t.Skip("SNAPBACK_REQUIRE does not name userns: " + why)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	bin := snapbackBinary(t)
	treetest.Must(t, os.Chmod(filepath.Dir(bin), 0o755))
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, bin
}

// userTempDir is a new directory that testUser may reach (t.TempDir's
// parent is root's own, mode 0700), removed after the test.
func userTempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	treetest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	treetest.Must(t, os.Chmod(dir, 0o755))
	return dir
}

// TestOverlayAsOrdinaryUser: an ordinary user's overlay run (overlayfs or
// fuse) mounts in a user namespace that maps only the user's own ids. The
// command runs as that user (not a fake root) with no capabilities,
// cannot see the store, and its changes commit and undo like root's.
func TestOverlayAsOrdinaryUser(t *testing.T) {
	for _, mode := range []string{"overlayfs", "fuse"} {
		t.Run(mode, func(t *testing.T) { testAsOrdinaryUser(t, mode) })
	}
}

func testAsOrdinaryUser(t *testing.T, mode string) {
	cred, bin := ordinaryUser(t)
	// The user must own the project.
	root := filepath.Join(userTempDir(t, "snapback-userns-"), "p")
	treetest.Write(t, root, "a", "original\n", 0o644)
	treetest.Write(t, root, "keep/k", "k\n", 0o644)
	uid, gid := int(cred.Uid), int(cred.Gid)
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, gid) })

	out, err := asUser(t, bin, root, "doctor", "--json")
	if err != nil || !strings.Contains(out, `"name": "`+mode+`",
      "available": true`) {
		// (For fuse, /dev/fuse must be open to users: scripts/test.sh makes
		// it 0666, as distributions do.)
		why := fmt.Sprintf("doctor as %s does not offer %s: %v\n%s", testUser, mode, err, out)
		if !treetest.Require(t, mode, false, why) {
			t.Skip("SNAPBACK_REQUIRE does not name " + mode + ": " + why)
		}
	}
	out, err = asUser(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "sh", "-c",
		`id -u; id -g; grep ^CapEff /proc/self/status; ls -A .snapback 2>/dev/null | wc -l; echo changed > a; rm -r keep; echo new > b`)
	if err != nil {
		t.Fatalf("run as %s: %v\n%s", testUser, err, out)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || lines[0] != strconv.Itoa(uid) || lines[1] != strconv.Itoa(gid) {
		t.Fatalf("the command did not run as %s (%d:%d):\n%s", testUser, uid, gid, out)
	}
	if !strings.HasSuffix(lines[2], "0000000000000000") {
		t.Fatalf("the command kept capabilities: %s", lines[2])
	}
	if lines[3] != "0" {
		t.Fatalf("the store is visible inside the run: %s entries", lines[3])
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "original\n" {
		t.Fatalf("a pending run changed the tree: a = %q", b)
	}
	if out, err := asUser(t, bin, root, "commit"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "changed\n" {
		t.Fatalf("after commit a = %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "keep")); !os.IsNotExist(err) {
		t.Fatalf("keep/ survived the commit of its removal: %v", err)
	}
	fi, err := os.Stat(filepath.Join(root, "b"))
	treetest.Must(t, err)
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("b belongs to %d:%d, want the user's %d:%d", st.Uid, st.Gid, uid, gid)
	}
	if out, err := asUser(t, bin, root, "undo"); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "keep/k")); string(b) != "k\n" {
		t.Fatalf("undo did not bring keep/k back: %q", b)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, ".snapback", "runs")); len(entries) != 0 {
		t.Fatalf("the committed run's directory is left: %v", entries)
	}
}
