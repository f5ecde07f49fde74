//go:build linux

package fuse

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse/uring"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// TestMain doubles as a helper for what the serving process must not do
// itself: with FUSETEST_MMAP=path it maps the file and writes through the
// mapping (a page fault into our own mount could deadlock the server).
func TestMain(m *testing.M) {
	switch { // the test binary is snapback's own binary for Session
	case len(os.Args) > 1 && os.Args[1] == ExecVerb:
		os.Exit(Helper(os.Args[2:]))
	case len(os.Args) > 1 && os.Args[1] == ServeVerb:
		os.Exit(Serve(os.Args[2:]))
	case len(os.Args) > 1 && os.Args[1] == KeepVerb:
		os.Exit(Keep(os.Args[2:]))
	case len(os.Args) > 1 && os.Args[1] == overlay.InitVerb:
		os.Exit(overlay.Init(os.Args[2:]))
	}
	if p := os.Getenv("FUSETEST_MMAP"); p != "" {
		if err := mmapWrite(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func mmapWrite(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	copy(b, "MMAP")
	if err := unix.Msync(b, unix.MS_SYNC); err != nil {
		return err
	}
	return unix.Munmap(b)
}

// view mounts a merged view of a fresh lower tree (filled by fill) and
// returns the lower, upper and mount directories.
func view(t *testing.T, fill func(lower string)) (lower, upper, mnt string, unmount func()) {
	t.Helper()
	_, lower, upper, mnt, unmount = mountedView(t, fill)
	return lower, upper, mnt, unmount
}

// mountedView is view, with the mounted view itself (its server's nodes).
func mountedView(t *testing.T, fill func(lower string)) (m *Mounted, lower, upper, mnt string, unmount func()) {
	t.Helper()
	ok, why := Available()
	if !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	dir := t.TempDir()
	lower, upper, mnt = filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "mnt")
	work := filepath.Join(dir, "work")
	for _, d := range []string{lower, upper, mnt, work} {
		treetest.Must(t, os.Mkdir(d, 0o755))
	}
	fill(lower)
	srv, err := Mount(lower, upper, work, mnt)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	done := false
	unmount = func() {
		if !done {
			done = true
			if err := srv.Unmount(); err != nil {
				t.Errorf("unmount: %v", err)
			}
		}
	}
	t.Cleanup(unmount)
	return srv, lower, upper, mnt, unmount
}

func big(i int) byte { return byte(i * 7) }

func names(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	treetest.Must(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	treetest.Must(t, err)
	return string(b)
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// TestOverlay drives every kind of change through a mounted view, checks
// the view and the untouched lower tree, then checks that the changeset
// read from the upper layer is exactly those changes.
func TestOverlay(t *testing.T) {
	lower, upper, mnt, unmount := view(t, func(l string) {
		treetest.Write(t, l, "a.txt", "a\n", 0o644)
		treetest.Write(t, l, "keep.txt", "keep\n", 0o644)
		treetest.Write(t, l, "held.txt", "held\n", 0o644)
		treetest.Write(t, l, "del.txt", "del\n", 0o644)
		treetest.Write(t, l, "dir/b.txt", "b\n", 0o644)
		treetest.Write(t, l, "dir/sub/c.txt", "c\n", 0o644)
		treetest.Write(t, l, "deldir/x", "x\n", 0o644)
		treetest.Write(t, l, "redo/y", "y\n", 0o644)
		treetest.Write(t, l, "trunc.txt", "0123456789\n", 0o644)
		treetest.Write(t, l, "app.txt", "one\n", 0o644)
		treetest.Write(t, l, "mm.bin", strings.Repeat("m", 8192), 0o644)
		treetest.Write(t, l, "chmod.sh", "#!/bin/sh\n", 0o644)
		treetest.Write(t, l, "hard1", "hard\n", 0o644)
		treetest.Must(t, os.Link(filepath.Join(l, "hard1"), filepath.Join(l, "hard2")))
		treetest.Must(t, os.Symlink("a.txt", filepath.Join(l, "sym")))
		treetest.Write(t, l, ".snapback/secret", "s\n", 0o600)
		b := make([]byte, 3<<20)
		for i := range b {
			b[i] = big(i)
		}
		treetest.Must(t, os.WriteFile(filepath.Join(l, "big.bin"), b, 0o644))
	})
	m := func(rel string) string { return filepath.Join(mnt, rel) }
	before := treetest.Capture(t, lower)

	// Merged lookup and readdir; the store is invisible and unwritable.
	if got, want := names(t, mnt), "a.txt app.txt big.bin chmod.sh del.txt deldir dir hard1 hard2 held.txt keep.txt mm.bin redo sym trunc.txt"; got != want {
		t.Fatalf("root lists %q, want %q", got, want)
	}
	_, err := os.Stat(m(".snapback"))
	wantErrno(t, "stat .snapback", err, syscall.ENOENT)
	wantErrno(t, "mkdir .snapback", os.Mkdir(m(".snapback"), 0o755), syscall.EPERM)
	wantErrno(t, "create .snapback", os.WriteFile(m(".snapback"), nil, 0o644), syscall.EPERM)
	wantErrno(t, "rename to .snapback", os.Rename(m("keep.txt"), m(".snapback")), syscall.EPERM)

	// Copy-up on write; reads of big files in ranges.
	treetest.Must(t, os.WriteFile(m("a.txt"), []byte("A\n"), 0o644))
	if got := read(t, m("sym")); got != "A\n" {
		t.Errorf("symlink reads %q", got)
	}
	f, err := os.Open(m("big.bin"))
	treetest.Must(t, err)
	buf := make([]byte, 10)
	_, err = f.ReadAt(buf, 2<<20+5)
	treetest.Must(t, err)
	f.Close()
	if want := big(2<<20 + 5); buf[0] != want {
		t.Errorf("ranged read: got %d", buf[0])
	}

	// A file open read-only while another open copies it up: the writes
	// go to the upper copy (never, through a passthrough backing file
	// registered for the first open, to the lower file), and the first
	// handle reads the new content.
	hold, err := os.Open(m("held.txt"))
	treetest.Must(t, err)
	first := make([]byte, 4)
	_, err = hold.ReadAt(first, 0)
	treetest.Must(t, err)
	// (No Fatal while hold is open: the unmount would fail, and closing it
	// as the test binary exits would wait for this process's own server.)
	werr := os.WriteFile(m("held.txt"), []byte("NEW!\n"), 0o644)
	lowerNow := read(t, filepath.Join(lower, "held.txt"))
	ferr := unix.Fadvise(int(hold.Fd()), 0, 0, unix.FADV_DONTNEED)
	_, rerr := hold.ReadAt(first, 0)
	hold.Close()
	treetest.Must(t, werr)
	treetest.Must(t, ferr)
	treetest.Must(t, rerr)
	if lowerNow != "held\n" {
		t.Fatalf("a write reached the lower file: %q", lowerNow)
	}
	if string(first) != "NEW!" {
		t.Errorf("a read-only handle from before the copy-up reads %q", first)
	}

	// Deletions: whiteouts; an rmdir'ed then re-made directory is opaque.
	treetest.Must(t, os.Remove(m("del.txt")))
	_, err = os.Lstat(m("del.txt"))
	wantErrno(t, "stat deleted", err, syscall.ENOENT)
	treetest.Must(t, os.RemoveAll(m("deldir")))
	wantErrno(t, "rmdir non-empty", os.Remove(m("redo")), syscall.ENOTEMPTY)
	treetest.Must(t, os.RemoveAll(m("redo")))
	treetest.Must(t, os.Mkdir(m("redo"), 0o755))
	if got := names(t, m("redo")); got != "" {
		t.Errorf("re-made directory shows %q", got)
	}
	treetest.Write(t, mnt, "redo/z", "z\n", 0o644)

	// Renames: a file (copy-up + whiteout), a merged directory (EXDEV), a
	// directory of the run's own.
	treetest.Must(t, os.Rename(m("dir/b.txt"), m("dir/b2.txt")))
	if got := names(t, m("dir")); got != "b2.txt sub" {
		t.Errorf("dir lists %q after rename", got)
	}
	treetest.Must(t, os.Rename(m("dir/sub"), m("sub2"))) // a merged directory: a redirect
	if got := names(t, m("dir")) + "|" + names(t, m("sub2")) + "|" + read(t, m("sub2/c.txt")); got != "b2.txt|c.txt|c\n" {
		t.Errorf("after a directory rename: %q", got)
	}
	treetest.Write(t, mnt, "newdir/n.txt", "n\n", 0o644)
	treetest.Must(t, os.Rename(m("newdir"), m("newdir2")))
	if got := read(t, m("newdir2/n.txt")); got != "n\n" {
		t.Errorf("renamed new dir: %q", got)
	}
	treetest.Must(t, os.Rename(m("keep.txt"), m("dir/keep.txt")))
	treetest.Must(t, os.Rename(m("dir/keep.txt"), m("keep.txt"))) // back: a whiteout-then-create cycle

	// Hard links made in the view are one file; lower links split on write.
	treetest.Must(t, os.Link(m("a.txt"), m("a-link")))
	treetest.Must(t, os.WriteFile(m("a-link"), []byte("via link\n"), 0o644))
	if got := read(t, m("a.txt")); got != "via link\n" {
		t.Errorf("hard link: a.txt reads %q", got)
	}
	var s1, s2 syscall.Stat_t
	treetest.Must(t, syscall.Lstat(m("a.txt"), &s1))
	treetest.Must(t, syscall.Lstat(m("a-link"), &s2))
	if s1.Ino != s2.Ino || s1.Nlink != 2 {
		t.Errorf("hard link: inodes %d %d, nlink %d", s1.Ino, s2.Ino, s1.Nlink)
	}
	treetest.Must(t, os.WriteFile(m("hard1"), []byte("changed\n"), 0o644))
	if got := read(t, m("hard2")); got != "hard\n" {
		t.Errorf("lower hard link followed a copy-up: %q", got)
	}

	// Symlinks, fifos, xattrs, chmod, truncate, O_APPEND, mmap.
	treetest.Must(t, os.Symlink("dir/b2.txt", m("newsym")))
	treetest.Must(t, unix.Mkfifo(m("fifo"), 0o640))
	xattrs := treetest.XattrsSupported(upper)
	if xattrs {
		treetest.Must(t, unix.Setxattr(m("sub2/c.txt"), "user.note", []byte("hi"), 0))
		v := make([]byte, 16)
		n, err := unix.Getxattr(m("sub2/c.txt"), "user.note", v)
		treetest.Must(t, err)
		if string(v[:n]) != "hi" {
			t.Errorf("xattr reads %q", v[:n])
		}
		wantErrno(t, "set overlay xattr", unix.Setxattr(m("keep.txt"), "user.overlay.opaque", []byte("y"), 0), syscall.EPERM)
		lb := make([]byte, 256)
		n, err = unix.Listxattr(m("redo"), lb)
		treetest.Must(t, err)
		if strings.Contains(string(lb[:n]), "overlay") {
			t.Errorf("view lists overlay xattrs: %q", lb[:n])
		}
	}
	treetest.Must(t, os.Chmod(m("chmod.sh"), 0o755))
	treetest.Must(t, os.Truncate(m("trunc.txt"), 4))
	af, err := os.OpenFile(m("app.txt"), os.O_WRONLY|os.O_APPEND, 0)
	treetest.Must(t, err)
	_, err = af.WriteString("two\n")
	treetest.Must(t, err)
	treetest.Must(t, af.Sync())
	treetest.Must(t, af.Close())
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FUSETEST_MMAP="+m("mm.bin"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mmap write: %v\n%s", err, out)
	}
	if got := read(t, m("mm.bin")); got != "MMAP"+strings.Repeat("m", 8188) {
		t.Errorf("mmap write: starts %q", got[:8])
	}
	if got := read(t, m("trunc.txt")) + read(t, m("app.txt")); got != "0123one\ntwo\n" {
		t.Errorf("truncate/append: %q", got)
	}

	// The lower tree never changed.
	treetest.Equal(t, "lower tree after the run", before, treetest.Capture(t, lower))
	unmount()

	// The upper layer, read by the one changeset reader, is exactly the run's changes.
	repo, err := snapshot.Open(lower, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	defer repo.Close()
	ud, err := fsutil.OpenRoot(upper)
	treetest.Must(t, err)
	defer ud.Close()
	cs, err := repo.Changeset(ud)
	treetest.Must(t, err)
	var got []string
	for _, e := range cs {
		if e.Type == record.Dir && e.Path == "dir" {
			continue // parents whose entries changed: times only
		}
		got = append(got, fmt.Sprintf("%s %v", e.Path, e.Type))
	}
	want := []string{
		"a-link " + record.File.String(),
		"a.txt " + record.File.String(),
		"app.txt " + record.File.String(),
		"chmod.sh " + record.File.String(),
		"del.txt " + record.Absent.String(),
		"deldir " + record.Absent.String(),
		"deldir/x " + record.Absent.String(),
		"dir/b.txt " + record.Absent.String(),
		"dir/b2.txt " + record.File.String(),
		"dir/sub " + record.Absent.String(),
		"dir/sub/c.txt " + record.Absent.String(),
		"sub2 " + record.Dir.String(),
		"fifo " + record.Fifo.String(),
		"hard1 " + record.File.String(),
		"held.txt " + record.File.String(),
		"mm.bin " + record.File.String(),
		"newdir2 " + record.Dir.String(),
		"newdir2/n.txt " + record.File.String(),
		"newsym " + record.Symlink.String(),
		"redo " + record.Dir.String(),
		"redo/y " + record.Absent.String(),
		"redo/z " + record.File.String(),
		"trunc.txt " + record.File.String(),
	}
	want = append(want, "sub2/c.txt "+record.File.String())
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changeset:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range cs {
		if e.Path == "chmod.sh" && e.Mode != 0o755 {
			t.Errorf("chmod.sh mode %o", e.Mode)
		}
		if e.Path == "a-link" && e.Link != "a.txt" && e.Link != "" {
			t.Errorf("a-link links to %q", e.Link)
		}
	}
}

// TestXWhiteout: the changeset reader accepts the xattr whiteout form.
func TestXWhiteout(t *testing.T) {
	dir := t.TempDir()
	root, upper := filepath.Join(dir, "root"), filepath.Join(dir, "upper")
	treetest.Write(t, root, "gone", "g\n", 0o644)
	treetest.Write(t, root, "empty", "", 0o644)
	treetest.Must(t, os.Mkdir(upper, 0o755))
	if !treetest.Require(t, "xattr", treetest.XattrsSupported(upper), "no user xattrs on "+upper) {
		t.Skip("SNAPBACK_REQUIRE does not name xattr: no user xattrs")
	}
	root0, err := newRoot(root, upper, upper)
	treetest.Must(t, err)
	ov := root0.ov
	gone, err := ov.up("gone")
	treetest.Must(t, err)
	treetest.Must(t, ov.makeWhiteout(gone))
	treetest.Must(t, os.WriteFile(filepath.Join(upper, "empty"), nil, 0o600)) // an empty file, not a whiteout
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	defer repo.Close()
	ud, err := fsutil.OpenRoot(upper)
	treetest.Must(t, err)
	defer ud.Close()
	cs, err := repo.Changeset(ud)
	treetest.Must(t, err)
	var got []string
	for _, e := range cs {
		got = append(got, fmt.Sprintf("%s %v", e.Path, e.Type))
	}
	if want := "empty " + record.File.String() + ",gone " + record.Absent.String(); strings.Join(got, ",") != want {
		t.Errorf("changeset %q, want %q", got, want)
	}
}

// session runs script in a view of a fresh tree through the real process
// architecture (helper, detached server, private namespace); during runs
// it calls during with the tree's root.
func session(t *testing.T, script string, during func(root string)) (root, upper string, waitErr, finishErr error) {
	t.Helper()
	ok, why := Available()
	if !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	// A fresh view's server, which these tests are of (the kept view's
	// are keep_test.go's and cmd/snapback's).
	t.Setenv(KeepEnv, "0")
	dir := t.TempDir()
	root, upper = filepath.Join(dir, "root"), filepath.Join(dir, "upper")
	work := filepath.Join(dir, "work")
	treetest.Write(t, root, "a", "a\n", 0o644)
	treetest.Must(t, os.Mkdir(upper, 0o755))
	treetest.Must(t, os.Mkdir(work, 0o700))
	s := NewSession(overlay.Spec{Root: root, Upper: upper, Work: work, Dir: root})
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = root
	treetest.Must(t, s.Prepare(cmd))
	treetest.Must(t, cmd.Start())
	if during != nil {
		during(root)
	}
	waitErr = cmd.Wait()
	finishErr = s.Finish()
	if mounted(t, root) {
		t.Errorf("%s is still mounted in the caller's namespace", root)
	}
	if server(root) != 0 {
		t.Errorf("the server still runs")
	}
	return root, upper, waitErr, finishErr
}

func mounted(t *testing.T, p string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	treetest.Must(t, err)
	return strings.Contains(string(b), " "+p+" ")
}

// server finds the pid of the server this test started for root.
func server(root string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && args[1] == ServeVerb && args[2] == "serve" && strings.Contains(args[3], `"root":"`+root+`"`) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			return pid
		}
	}
	return 0
}

// TestSession: the command sees the view at the root's own path; a
// background job it waits for does not wait for the server; afterwards
// nothing is mounted or running and the upper layer has the changes.
func TestSession(t *testing.T) {
	root, upper, werr, ferr := session(t, `echo b > b && sleep 0.1 & wait; grep -q snapback /proc/self/mountinfo && cat a > c && test ! -e .snapback`, nil)
	treetest.Must(t, werr)
	treetest.Must(t, ferr)
	if _, err := os.Stat(filepath.Join(root, "b")); !os.IsNotExist(err) {
		t.Errorf("b reached the tree: %v", err)
	}
	if got := read(t, filepath.Join(upper, "b")) + read(t, filepath.Join(upper, "c")); got != "b\na\n" {
		t.Errorf("upper layer holds %q", got)
	}
}

// TestKilledServer: a server killed mid-run leaves nothing mounted in the
// caller's namespace, the tree usable, the command failing with ENOTCONN,
// and Finish reports it.
func TestKilledServer(t *testing.T) {
	root, upper, werr, ferr := session(t, `echo b > b; sleep 3; cat a`, func(root string) {
		for i := 0; i < 100 && server(root) == 0; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		pid := server(root)
		if pid == 0 {
			t.Fatal("no server found")
		}
		// Once the command's b is in the upper layer (upper is root's
		// sibling), the command sleeps: kill the server under it.
		upperB := filepath.Join(filepath.Dir(root), "upper", "b")
		for i := 0; i < 500; i++ {
			if b, err := os.ReadFile(upperB); err == nil && string(b) == "b\n" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		treetest.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	})
	if werr == nil {
		t.Errorf("the command succeeded without its view")
	}
	if !errors.Is(ferr, ErrServerDied) {
		t.Errorf("Finish: %v, want ErrServerDied", ferr)
	}
	if got := read(t, filepath.Join(root, "a")); got != "a\n" {
		t.Errorf("the tree reads %q", got)
	}
	if got := read(t, filepath.Join(upper, "b")); got != "b\n" {
		t.Errorf("upper layer: %q", got)
	}
}

// TestListings checks directory listings without directory handles (the
// kernel is told OPENDIR is not implemented, so the server keeps one
// listing per directory): long listings that take many READDIRPLUS
// replies, readers at once, a reader that stops early, and listings
// after changes.
func TestListings(t *testing.T) {
	const n = 3000
	long := strings.Repeat("x", 200) // a few names fill a READDIRPLUS reply
	_, _, mnt, _ := view(t, func(l string) {
		treetest.Must(t, os.Mkdir(filepath.Join(l, "d"), 0o755))
		for i := 0; i < n; i++ {
			treetest.Write(t, l, fmt.Sprintf("d/%s%05d", long, i), "", 0o644)
		}
	})
	d := filepath.Join(mnt, "d")
	count := func() int {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Error(err)
		}
		return len(ents)
	}
	// A reader that stops after a few entries, then full readers at once.
	f, err := os.Open(d)
	treetest.Must(t, err)
	if few, err := f.Readdirnames(5); err != nil || len(few) != 5 {
		t.Fatalf("first 5 names: %v, %v", few, err)
	}
	got := make(chan int, 4)
	for i := 0; i < 4; i++ {
		go func() { got <- count() }()
	}
	for i := 0; i < 4; i++ {
		if c := <-got; c != n {
			t.Errorf("a concurrent listing has %d entries, want %d", c, n)
		}
	}
	rest, err := f.Readdirnames(-1)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
	if len(rest) != n-5 {
		t.Errorf("the stopped reader's rest: %d entries, want %d", len(rest), n-5)
	}
	// Changes show in the next listing (the kernel's cached one is dropped).
	treetest.Must(t, os.WriteFile(filepath.Join(d, "new"), nil, 0o644))
	treetest.Must(t, os.Remove(filepath.Join(d, fmt.Sprintf("%s%05d", long, 7))))
	treetest.Must(t, os.Rename(filepath.Join(d, fmt.Sprintf("%s%05d", long, 8)), filepath.Join(mnt, "moved")))
	if c := count(); c != n-1 {
		t.Errorf("after create, unlink and rename out: %d entries, want %d", c, n-1)
	}
	if got := names(t, mnt); got != "d moved" {
		t.Errorf("root: %q", got)
	}
	// fsync of a directory without a handle of the kernel's.
	g, err := os.Open(d)
	treetest.Must(t, err)
	defer g.Close() // read-only
	treetest.Must(t, g.Sync())
}

// TestOrphans checks files that lose their name while open, which the
// server serves without the kernel's handles (zero-message opens): from
// a descriptor it holds from the unlink (or the rename over the file)
// until the kernel forgets the node. A lower file gets a private copy
// when it is written; the lower tree never changes.
func TestOrphans(t *testing.T) {
	lower, _, mnt, _ := view(t, func(l string) {
		treetest.Write(t, l, "l.txt", "lower\n", 0o640)
	})
	m := func(p string) string { return filepath.Join(mnt, p) }
	check := func(f *os.File, what, want string, size int64) {
		t.Helper()
		var st syscall.Stat_t
		treetest.Must(t, syscall.Fstat(int(f.Fd()), &st))
		if st.Nlink != 0 || st.Size != size {
			t.Errorf("%s: fstat nlink %d size %d, want 0 and %d", what, st.Nlink, st.Size, size)
		}
		b := make([]byte, 64)
		n, _ := f.ReadAt(b, 0)
		if string(b[:n]) != want {
			t.Errorf("%s: read %q, want %q", what, b[:n], want)
		}
	}

	// A lower file, unlinked while open for writing, then written and
	// truncated through the descriptor.
	l, err := os.OpenFile(m("l.txt"), os.O_RDWR, 0)
	treetest.Must(t, err)
	defer l.Close()
	treetest.Must(t, os.Remove(m("l.txt")))
	check(l, "unlinked lower file", "lower\n", 6)
	_, err = l.WriteAt([]byte("LOW"), 0)
	treetest.Must(t, err)
	treetest.Must(t, l.Truncate(4))
	check(l, "unlinked lower file, written", "LOWe", 4)
	var st syscall.Stat_t
	treetest.Must(t, syscall.Fstat(int(l.Fd()), &st))
	if st.Mode&0o7777 != 0o640 {
		t.Errorf("unlinked lower file's private copy: mode %o, want 640", st.Mode&0o7777)
	}

	// An upper file renamed over while a reader has it open.
	treetest.Must(t, os.WriteFile(m("u.txt"), []byte("upper\n"), 0o644))
	treetest.Must(t, os.WriteFile(m("v.txt"), []byte("other\n"), 0o644))
	u, err := os.Open(m("u.txt"))
	treetest.Must(t, err)
	defer u.Close()
	treetest.Must(t, os.Rename(m("v.txt"), m("u.txt")))
	check(u, "upper file renamed over", "upper\n", 6)
	if got := read(t, m("u.txt")); got != "other\n" {
		t.Errorf("u.txt after the rename: %q", got)
	}

	if got := read(t, filepath.Join(lower, "l.txt")); got != "lower\n" {
		t.Errorf("the lower file changed: %q", got)
	}
	if got := names(t, mnt); got != "u.txt" {
		t.Errorf("view: %q", got)
	}
}

// TestUpperSkipped: while the upper layer is empty and nothing has
// written, lookups and listings skip it (overlayFS.upperEmpty); an upper
// layer with content at the start, and anything written through the
// view, is seen as before.
func TestUpperSkipped(t *testing.T) {
	fill := func(lower string) {
		treetest.Write(t, lower, "d/a", "a\n", 0o644)
		treetest.Write(t, lower, "d/b", "b\n", 0o644)
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		treetest.Must(t, err)
		return string(b)
	}
	names := func(dir string) string {
		t.Helper()
		ents, err := os.ReadDir(dir)
		treetest.Must(t, err)
		var s []string
		for _, e := range ents {
			s = append(s, e.Name())
		}
		return strings.Join(s, " ")
	}

	t.Run("written through the view", func(t *testing.T) {
		_, _, mnt, unmount := view(t, fill)
		defer unmount()
		if got := read(filepath.Join(mnt, "d/a")); got != "a\n" {
			t.Fatalf("d/a = %q", got)
		}
		// Nothing of d listed or looked up yet but a: both must come
		// from the upper layer once written.
		treetest.Must(t, os.WriteFile(filepath.Join(mnt, "d/new"), []byte("n\n"), 0o644))
		treetest.Must(t, os.Remove(filepath.Join(mnt, "d/b")))
		if got, want := names(filepath.Join(mnt, "d")), "a new"; got != want {
			t.Errorf("d lists %q, want %q", got, want)
		}
		if _, err := os.Lstat(filepath.Join(mnt, "d/b")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("d/b after rm: %v", err)
		}
	})

	t.Run("upper with content at the start", func(t *testing.T) {
		if ok, why := Available(); !treetest.Require(t, "fuse", ok, why) {
			t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
		}
		dir := t.TempDir()
		lower, upper, work, mnt := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "mnt")
		for _, d := range []string{lower, upper, work, mnt} {
			treetest.Must(t, os.Mkdir(d, 0o755))
		}
		fill(lower)
		treetest.Write(t, upper, "d/c", "c\n", 0o644) // a run's pending change
		treetest.Write(t, upper, "d/a", "A\n", 0o644)
		srv, err := Mount(lower, upper, work, mnt)
		if err != nil {
			t.Fatalf("mount: %v", err)
		}
		defer func() { treetest.Must(t, srv.Unmount()) }()
		if got := read(filepath.Join(mnt, "d/a")); got != "A\n" {
			t.Errorf("d/a = %q, want the upper copy", got)
		}
		if got, want := names(filepath.Join(mnt, "d")), "a b c"; got != want {
			t.Errorf("d lists %q, want %q", got, want)
		}
	})
}

// TestViewRing: where the kernel offers FUSE over io_uring, the view is
// served through it (every other test then runs over the ring too).
func TestViewRing(t *testing.T) {
	ok, why := Available()
	if !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	if ok, why := uring.Enabled(); !treetest.Require(t, "fuse-uring", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse-uring: " + why)
	}
	dir := t.TempDir()
	lower, upper, work, mnt := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "mnt")
	for _, d := range []string{lower, upper, work, mnt} {
		treetest.Must(t, os.Mkdir(d, 0o755))
	}
	treetest.Write(t, lower, "d/f", "lower\n", 0o644)
	m, err := Mount(lower, upper, work, mnt)
	treetest.Must(t, err)
	defer func() { treetest.Must(t, m.Unmount()) }()
	if !m.Ring() {
		t.Fatal("FUSE over io_uring is on, but the view serves through /dev/fuse reads")
	}
	treetest.Must(t, os.WriteFile(filepath.Join(mnt, "d/f"), []byte("upper\n"), 0o644))
	if got := read(t, filepath.Join(upper, "d/f")); got != "upper\n" {
		t.Fatalf("upper d/f = %q after a write through the ring", got)
	}
	if got := read(t, filepath.Join(lower, "d/f")); got != "lower\n" {
		t.Fatalf("lower d/f = %q: a write through the ring reached the lower tree", got)
	}
	if got := transport(m.Ring()); !strings.Contains(got, "io_uring") {
		t.Fatalf("the transport is said as %q", got)
	}
}
