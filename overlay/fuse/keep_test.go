//go:build linux

package fuse

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
)

// startKeptServer starts the kept view server of root as a run does
// (under the project's lock; this test binary is the server, see
// TestMain) and returns its files and pid; it is killed when the test
// ends.
func startKeptServer(t *testing.T, root string) (keepFiles, int) {
	t.Helper()
	files, err := keepPaths(root)
	treetest.Must(t, err)
	lk, err := lockFile(files.lock)
	treetest.Must(t, err)
	err = startKept(root, files)
	lk.Close() // unlocks
	treetest.Must(t, err)
	pid, ok := KeptServer(root)
	if !ok {
		t.Fatalf("the kept server of %s does not answer", root)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return files, pid
}

// keepDirNames lists the directory of the kept servers' files.
func keepDirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	treetest.Must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestKeepSweepsKilledServer: the files a kept view server killed with
// SIGKILL leaves (its socket, lock and log) are removed when the next
// server starts (here another project's, which never uses their
// names); those of a server that runs, of one that gave up its socket
// but still serves its last run, a project's whose lock a runner holds,
// and names that are not a server's (or are symlinks) stay.
func TestKeepSweepsKilledServer(t *testing.T) {
	if !treetest.Require(t, "root", os.Geteuid() == 0, "the test's servers run as root") {
		t.Skip("SNAPBACK_REQUIRE does not name root: the test's servers run as root")
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv(KeepIdleEnv, "2m") // a server the test leaves behind does not stay
	project := func() string {
		root := filepath.Join(t.TempDir(), "project")
		treetest.Must(t, os.Mkdir(root, 0o755))
		return root
	}
	killed, live, gaveUp, busy, next := project(), project(), project(), project(), project()

	killedFiles, killedPid := startKeptServer(t, killed)
	liveFiles, _ := startKeptServer(t, live)
	// A server that gave up (its run's snapback died) has removed its
	// socket, and serves on; it holds its log.
	gaveUpFiles, _ := startKeptServer(t, gaveUp)
	treetest.Must(t, os.Remove(gaveUpFiles.sock))
	// A runner of the busy project holds its lock (its server is dead).
	busyFiles, busyPid := startKeptServer(t, busy)
	treetest.Must(t, syscall.Kill(busyPid, syscall.SIGKILL))
	lk, err := lockFile(busyFiles.lock)
	treetest.Must(t, err)
	defer lk.Close()

	dir := filepath.Dir(killedFiles.lock)
	// Names like a server's, that are not: a symlink (with the other
	// files of its name), another extension, a key too short.
	outside := filepath.Join(t.TempDir(), "outside")
	treetest.Write(t, filepath.Dir(outside), "outside", "not snapback's\n", 0o644)
	link := filepath.Join(dir, "view-0123456789abcdef0123.log")
	treetest.Must(t, os.Symlink(outside, link))
	treetest.Write(t, dir, "view-0123456789abcdef0123.lock", "", 0o600)
	treetest.Write(t, dir, "view-0123456789abcdef0123.txt", "", 0o600)
	treetest.Write(t, dir, "view-0123.lock", "", 0o600)
	treetest.Write(t, dir, "other.sock", "", 0o600)

	treetest.Must(t, syscall.Kill(killedPid, syscall.SIGKILL))
	for i := 0; i < 500 && syscall.Kill(killedPid, 0) == nil; i++ { // reaped by startKept's Wait
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range []string{killedFiles.sock, killedFiles.lock, killedFiles.log} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("the killed server left no %s to sweep: %v", filepath.Base(p), err)
		}
	}
	before := keepDirNames(t, dir)

	nextFiles, _ := startKeptServer(t, next)

	after := keepDirNames(t, dir)
	for _, p := range []string{killedFiles.sock, killedFiles.lock, killedFiles.log} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the killed server's %s is still there after the next start (%v)", filepath.Base(p), err)
		}
	}
	for _, p := range []string{
		liveFiles.sock, liveFiles.lock, liveFiles.log,
		gaveUpFiles.lock, gaveUpFiles.log,
		busyFiles.sock, busyFiles.lock, busyFiles.log,
		nextFiles.sock, nextFiles.lock, nextFiles.log,
		link, link[:len(link)-len(".log")] + ".lock",
		filepath.Join(dir, "view-0123456789abcdef0123.txt"), filepath.Join(dir, "view-0123.lock"), filepath.Join(dir, "other.sock"),
	} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was swept: %v\nbefore: %s\nafter:  %s", filepath.Base(p), err,
				strings.Join(before, " "), strings.Join(after, " "))
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "not snapback's\n" {
		t.Errorf("the symlink's target: %q, %v", b, err)
	}
	if _, ok := KeptServer(live); !ok {
		t.Error("the live server no longer answers")
	}
}
