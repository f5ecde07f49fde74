// Package treetest captures a directory tree exactly (types, contents,
// modes, owners, times, xattrs, hard-link groups, sparseness) so tests can
// assert that an undo, redo or recovery left it in precisely a known
// state, and builds trees full of the odd cases restores must get right.
package treetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// State maps each relative path to a one-line description of everything a
// restore must reproduce.
type State map[string]string

// Capture describes every path below root except the names in skip
// (relative paths whose subtrees are left out, such as ".snapback").
func Capture(t testing.TB, root string, skip ...string) State {
	t.Helper()
	s, err := CaptureErr(root, skip...)
	if err != nil {
		t.Fatalf("capture %s: %v", root, err)
	}
	return s
}

// CaptureErr is Capture for callers without a testing.TB. It works from
// directory descriptors (fsutil.Dir.Walk), so a path of the tree may be
// as long as the tree's own relative calls allow (PATH_MAX), whatever the
// length of root.
func CaptureErr(root string, skip ...string) (State, error) {
	st := State{}
	inodes := map[uint64][]string{}
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	top, err := fsutil.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer top.Close()
	err = top.Walk(func(d *fsutil.Dir, name, rel string, s *unix.Stat_t) (bool, error) {
		if skipped[rel] {
			return false, nil
		}
		p := "/proc/self/fd/" + strconv.Itoa(d.Fd()) + "/" + name // for the calls with no *at form
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d", s.Mode&0o7777, s.Uid, s.Gid)
		switch s.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			sum, err := hashFile(d, name)
			if err != nil {
				return false, err
			}
			desc = fmt.Sprintf("file %s size=%d sha=%s mtime=%d", desc, s.Size, sum, s.Mtim.Nano())
			if s.Nlink > 1 {
				inodes[s.Ino] = append(inodes[s.Ino], rel)
			}
		case unix.S_IFDIR:
			desc = fmt.Sprintf("dir %s mtime=%d", desc, s.Mtim.Nano())
		case unix.S_IFLNK:
			target, err := d.Readlink(name)
			if err != nil {
				return false, err
			}
			desc = fmt.Sprintf("symlink ->%q uid=%d gid=%d mtime=%d", target, s.Uid, s.Gid, s.Mtim.Nano())
		case unix.S_IFIFO:
			desc = fmt.Sprintf("fifo %s mtime=%d", desc, s.Mtim.Nano())
		default:
			desc = fmt.Sprintf("other %o", s.Mode&unix.S_IFMT)
		}
		if s.Mode&unix.S_IFMT != unix.S_IFLNK {
			desc += xattrs(p)
		}
		st[rel] = desc
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for _, paths := range inodes {
		sort.Strings(paths)
		for _, p := range paths {
			st[p] += " links=" + strings.Join(paths, ",")
		}
	}
	return st, nil
}

func hashFile(d *fsutil.Dir, name string) (string, error) {
	f, err := d.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum, _, err := fsutil.HashFile(f) // skips reading holes: a sparse GiB costs little
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sum[:8]), nil
}

func xattrs(p string) string {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		return ""
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return ""
	}
	var names []string
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, n := range names {
		v := make([]byte, 4096)
		vs, err := unix.Lgetxattr(p, n, v)
		if err != nil {
			continue
		}
		fmt.Fprintf(&sb, " xattr:%s=%q", n, v[:vs])
	}
	return sb.String()
}

// Diff lists the differences between two states, one line each.
func Diff(want, got State) []string {
	var out []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("missing %q: want %s", p, w))
		case g != w:
			out = append(out, fmt.Sprintf("differs %q:\n  want %s\n  got  %s", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("extra %q: %s", p, g))
		}
	}
	sort.Strings(out)
	return out
}

// Equal fails the test with the differences when the states differ.
func Equal(t testing.TB, what string, want, got State) {
	t.Helper()
	if d := Diff(want, got); len(d) > 0 {
		if len(d) > 20 {
			d = append(d[:20], fmt.Sprintf("... and %d more", len(d)-20))
		}
		t.Fatalf("%s: tree differs:\n%s", what, strings.Join(d, "\n"))
	}
}

// Write creates a file with content and mode, making parents.
func Write(t testing.TB, root, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// XattrsSupported reports whether user xattrs can be set below dir.
func XattrsSupported(dir string) bool {
	p := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return false
	}
	defer os.Remove(p)
	return unix.Setxattr(p, "user.probe", []byte("1"), 0) == nil
}

// Tricky fills root with the cases restores get wrong: names with spaces,
// newlines and invalid UTF-8; symlinks pointing out of the tree, dangling
// and relative; a fifo; hard links; an empty directory; odd modes; a
// sticky directory; xattrs (when the filesystem has them); and a sparse
// file of sparseSize bytes (0: none).
func Tricky(t testing.TB, root string, sparseSize int64) {
	t.Helper()
	Write(t, root, "plain.txt", "hello\n", 0o644)
	Write(t, root, "with space/and more.txt", "spaces\n", 0o600)
	Write(t, root, "new\nline", "newline in name\n", 0o644)
	Write(t, root, "bad-\xff\xfe-utf8", "invalid utf-8 name\n", 0o644)
	Write(t, root, "exec.sh", "#!/bin/sh\necho hi\n", 0o755)
	Write(t, root, "locked", "no permissions\n", 0o000)
	Write(t, root, "deep/a/b/c/d.txt", "deep\n", 0o644)
	Write(t, root, "hard/one", "linked content\n", 0o640)
	Must(t, os.Link(filepath.Join(root, "hard/one"), filepath.Join(root, "hard/two")))
	Must(t, os.Link(filepath.Join(root, "hard/one"), filepath.Join(root, "three")))
	Must(t, os.Symlink("/etc/passwd", filepath.Join(root, "abs-out")))
	Must(t, os.Symlink("../../../../outside", filepath.Join(root, "rel-out")))
	Must(t, os.Symlink("plain.txt", filepath.Join(root, "rel-in")))
	Must(t, os.Symlink("does/not/exist", filepath.Join(root, "dangling")))
	Must(t, os.Symlink("/", filepath.Join(root, "deep/to-root")))
	Must(t, unix.Mkfifo(filepath.Join(root, "pipe"), 0o640))
	Must(t, os.MkdirAll(filepath.Join(root, "empty/dir"), 0o755))
	Must(t, os.Mkdir(filepath.Join(root, "sticky"), 0o755))
	Must(t, os.Chmod(filepath.Join(root, "sticky"), 0o1777))
	Write(t, root, "setgid-dir/f", "x", 0o644)
	Must(t, os.Chmod(filepath.Join(root, "setgid-dir"), 0o2775))
	if Require(t, "xattr", XattrsSupported(root), "user xattrs are not supported on "+root) {
		Must(t, unix.Setxattr(filepath.Join(root, "plain.txt"), "user.note", []byte("xattr value"), 0))
		Must(t, unix.Setxattr(filepath.Join(root, "deep"), "user.dir", []byte{0, 1, 2}, 0))
	}
	if sparseSize > 0 {
		f, err := os.Create(filepath.Join(root, "sparse.img"))
		Must(t, err)
		_, err = f.WriteAt([]byte("head"), 0)
		Must(t, err)
		_, err = f.WriteAt([]byte("middle"), sparseSize/2)
		Must(t, err)
		Must(t, f.Truncate(sparseSize))
		Must(t, f.Close())
	}
}

// Allocated returns the bytes a file occupies on disk.
func Allocated(t testing.TB, p string) int64 {
	t.Helper()
	var s unix.Stat_t
	Must(t, unix.Lstat(p, &s))
	return s.Blocks * 512
}

// Require reports whether a capability the test wants is here. When it is
// not, the test fails if SNAPBACK_REQUIRE (a comma-separated list, set by
// scripts/test.sh) names the capability, and otherwise goes on without it
// after logging why: the caller decides what to leave out.
func Require(t testing.TB, capability string, ok bool, why string) bool {
	t.Helper()
	if ok {
		return true
	}
	for _, c := range strings.Split(os.Getenv("SNAPBACK_REQUIRE"), ",") {
		if strings.TrimSpace(c) == capability {
			t.Fatalf("SNAPBACK_REQUIRE names %s, but %s", capability, why)
		}
	}
	t.Logf("without %s: %s", capability, why)
	return false
}

// Btrfs mounts a fresh btrfs filesystem of sizeMB on a loop device and
// returns its mount point; it is unmounted when the test ends. It fails
// or skips (per SNAPBACK_REQUIRE) where mkfs.btrfs, loop devices or root
// are missing.
func Btrfs(t testing.TB, sizeMB int) string {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "mounting a loop btrfs needs root"
	} else if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		why = "mkfs.btrfs is not installed (Debian: btrfs-progs)"
	} else if _, err := os.Stat("/dev/loop-control"); err != nil {
		why = "no loop devices (/dev/loop-control)"
	}
	if !Require(t, "btrfs", why == "", why) {
		t.Skipf("SNAPBACK_REQUIRE does not name btrfs: %s", why)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "btrfs.img")
	mnt := filepath.Join(dir, "mnt")
	Must(t, os.Mkdir(mnt, 0o755))
	f, err := os.Create(img)
	Must(t, err)
	Must(t, f.Truncate(int64(sizeMB)<<20))
	Must(t, f.Close())
	if out, err := exec.Command("mkfs.btrfs", "-q", "-f", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount btrfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}

// zfsSeq numbers the datasets ZFS makes in this process.
var zfsSeq atomic.Int64

// ZFS makes a fresh, mounted filesystem dataset, <pool>/sbtest-<pid>-<n>/data,
// in the pool SNAPBACK_TEST_ZFS names (scripts/test.sh makes one on a
// file, with OpenZFS or zfs-fuse alike), and returns its name. Its parent
// holds whatever a restore makes beside it and is destroyed, with all of
// it, when the test ends. It fails or skips (per SNAPBACK_REQUIRE) where
// no pool is named or zfs does not answer.
func ZFS(t testing.TB) string {
	t.Helper()
	pool := os.Getenv("SNAPBACK_TEST_ZFS")
	why := ""
	if pool == "" {
		why = "SNAPBACK_TEST_ZFS names no pool"
	} else if out, err := exec.Command("zfs", "list", "-H", "-o", "name", pool).CombinedOutput(); err != nil {
		why = fmt.Sprintf("zfs list %s: %v: %s", pool, err, strings.TrimSpace(string(out)))
	}
	if !Require(t, "zfs", why == "", why) {
		t.Skipf("SNAPBACK_REQUIRE does not name zfs: %s", why)
	}
	holdZFSTests(t)
	parent := fmt.Sprintf("%s/sbtest-%d-%d", pool, os.Getpid(), zfsSeq.Add(1))
	// Under the zfs mount lock, as snapback's own mounts (fsutil.ZFS):
	// zfs-fuse loses every mount when two are made at once.
	if _, err := fsutil.ZFS(context.Background(), "create", "-p", parent+"/data"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// zfs-fuse can answer "dataset is busy" for a moment after an
		// unmount (seconds on a busy machine): retried for 30 s.
		var out []byte
		var err error
		for i := 0; i < 120; i++ {
			if out, err = exec.Command("zfs", "destroy", "-r", "-R", parent).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("zfs destroy -r -R %s: %v\n%s", parent, err, out)
	})
	return parent + "/data"
}

// zfsTests is this process's hold of the zfs tests' lock: the tests of
// one package process may use zfs-fuse side by side, those of two may not.
// zfs-fuse 0.7 does not stand many clients at once: beside the mount race
// snapback's own lock avoids (fsutil.ZFSMountLock), under the kill test's
// hundreds of killed zfs runs with another package's zfs tests alongside
// it has been seen to abort, and to leave a request on a clone unanswered
// for a minute while its other mounts answered. Each test that makes a
// dataset holds the lock until its dataset is destroyed.
var zfsTests struct {
	sync.Mutex
	n int
	f *os.File
}

// zfsTestsLock is the file the zfs tests of every process lock.
var zfsTestsLock = filepath.Join(os.TempDir(), "snapback-zfs-tests.lock")

// holdZFSTests takes the zfs tests' lock for t (waiting while another
// process holds it) and lets it go when t and this process's other
// holders are done.
func holdZFSTests(t testing.TB) {
	t.Helper()
	zfsTests.Lock()
	defer zfsTests.Unlock()
	if zfsTests.n == 0 {
		f, err := os.OpenFile(zfsTestsLock, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			t.Fatalf("zfs tests' lock: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			t.Fatalf("zfs tests' lock %s: %v", zfsTestsLock, err)
		}
		zfsTests.f = f
	}
	zfsTests.n++
	t.Cleanup(func() { // (registered first: runs after the dataset's destroy)
		zfsTests.Lock()
		defer zfsTests.Unlock()
		if zfsTests.n--; zfsTests.n == 0 {
			zfsTests.f.Close()
		}
	})
}

// ZFSMount is where the dataset ds is mounted.
func ZFSMount(t testing.TB, ds string) string {
	t.Helper()
	out, err := exec.Command("zfs", "get", "-H", "-o", "value", "mountpoint", ds).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs get mountpoint %s: %v\n%s", ds, err, out)
	}
	return strings.TrimSpace(string(out))
}

// SmallFS mounts a tmpfs of sizeKB at a new directory, for tests of a full
// disk; it is unmounted when the test ends. It needs root (CAP_SYS_ADMIN):
// SNAPBACK_REQUIRE=root makes its absence a failure.
func SmallFS(t testing.TB, sizeKB int) string {
	t.Helper()
	if !Require(t, "root", os.Geteuid() == 0, "mounting a tmpfs needs root") {
		t.Skip("SNAPBACK_REQUIRE does not name root: not running as root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", sizeKB), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}

// Stop stops the process pid (SIGSTOP) and returns once every one of its
// threads is stopped. kill returns before they are: a thread that was in
// a system call, or waiting for a CPU, goes on until it returns to user
// space, and a reader in the kernel may drain its whole event queue by
// then. Resume it with SIGCONT.
func Stop(t testing.TB, pid int) {
	t.Helper()
	Must(t, unix.Kill(pid, unix.SIGSTOP))
	dir := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		Must(t, err)
		running := 0
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue // a thread gone
			}
			// The state follows the command's closing parenthesis.
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't' {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: %d threads not stopped 10 s after SIGSTOP", pid, running)
		}
	}
}
