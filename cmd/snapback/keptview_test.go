//go:build linux

package main

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/snapshot"
	"golang.org/x/sys/unix"
)

// keptEnv makes the test binary, run as the command of a view, the
// kept view test's command: it captures the view into the file the
// variable names, then changes the view (keptViewChange).
const keptEnv = "SNAPBACK_TEST_KEPT_CAPTURE"

func init() {
	out := os.Getenv(keptEnv)
	if out == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	// A lookup that fails, so that the kernel caches the missing name
	// (the changes then make it).
	os.Lstat("missing")
	os.Lstat("r1/missing")
	st, err := treetest.CaptureErr(".")
	if err != nil {
		fail(err)
	}
	var top unix.Stat_t // the root itself, which Capture leaves out
	if err := unix.Lstat(".", &top); err != nil {
		fail(err)
	}
	st["."] = fmt.Sprintf("mode=%o uid=%d gid=%d", top.Mode&0o7777, top.Uid, top.Gid)
	var b bytes.Buffer // gob, not JSON: names need not be UTF-8
	if err := gob.NewEncoder(&b).Encode(st); err != nil {
		fail(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		fail(err)
	}
	if run := os.Getenv("SNAPBACK_TEST_KEPT_RUN"); run == "none" {
		// only the capture
	} else if err := keptViewChange(run); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// keptViewChange is what each run changes in its view after capturing
// it: a new file and directory, an append, a removal, a rename of a
// directory of the lower tree (an overlay redirect) back and forth.
func keptViewChange(run string) error {
	if err := os.WriteFile("made-"+run, []byte(run+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll("dir-"+run+"/sub", 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile("w.txt", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "run %s\n", run)
	if err := f.Close(); err != nil {
		return err
	}
	if ents, _ := filepath.Glob("made-*"); len(ents) > 1 {
		if err := os.Remove(ents[0]); err != nil {
			return err
		}
	}
	if _, err := os.Stat("vdir"); err == nil {
		return os.Rename("vdir", "vdir-moved")
	}
	if _, err := os.Stat("vdir-moved"); err == nil {
		return os.Rename("vdir-moved", "vdir")
	}
	return nil
}

// keptSeed makes the entries the changes of round r act on.
func keptSeed(t *testing.T, root string, r int) {
	w := func(rel, content string, mode os.FileMode) {
		treetest.Write(t, root, fmt.Sprintf("r%d/%s", r, rel), content, mode)
	}
	w("same.txt", "1111\n", 0o644)
	w("edit/e.txt", "eeee\n", 0o644)
	w("a.txt", "alpha\n", 0o644)
	w("gone.txt", "gone\n", 0o644)
	w("mod.sh", "echo\n", 0o755)
	w("d/x", "x\n", 0o644)
	w("d/sub/y", "y\n", 0o644)
	w("e/f", "f\n", 0o644)
	w("g/h", "h\n", 0o644)
	// A hard link whose directory sees no other change (its cached
	// listing is not read again, which would refresh the entry).
	w("solo/h1", "one\n", 0o644)
	w("other/keep", "k\n", 0o644)
	p := func(rel string) string { return filepath.Join(root, fmt.Sprintf("r%d/%s", r, rel)) }
	treetest.Must(t, os.Link(p("solo/h1"), p("other/h2")))
}

// keptChanges changes round r's entries in the real tree, in every way
// the kept view must hear of.
func keptChanges(t *testing.T, root string, r int) {
	p := func(rel string) string { return filepath.Join(root, fmt.Sprintf("r%d/%s", r, rel)) }
	// An edit in place that keeps the size and the times.
	var st unix.Stat_t
	treetest.Must(t, unix.Stat(p("same.txt"), &st))
	f, err := os.OpenFile(p("same.txt"), os.O_WRONLY, 0)
	treetest.Must(t, err)
	_, err = f.WriteAt([]byte("2222\n"), 0)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
	treetest.Must(t, unix.UtimesNano(p("same.txt"), []unix.Timespec{st.Atim, st.Mtim}))
	// An edit in place that keeps the size (the write alone is heard:
	// no change of attributes is).
	f, err = os.OpenFile(p("edit/e.txt"), os.O_WRONLY, 0)
	treetest.Must(t, err)
	_, err = f.WriteAt([]byte("EEEE\n"), 0)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
	// The same through a hard link's other name, in another directory.
	treetest.Must(t, unix.Stat(p("other/h2"), &st))
	f, err = os.OpenFile(p("other/h2"), os.O_WRONLY, 0)
	treetest.Must(t, err)
	_, err = f.WriteAt([]byte("two\n"), 0)
	treetest.Must(t, err)
	treetest.Must(t, f.Close())
	treetest.Must(t, unix.UtimesNano(p("other/h2"), []unix.Timespec{st.Atim, st.Mtim}))
	treetest.Must(t, os.Rename(p("a.txt"), p("b.txt"))) // rename a file
	treetest.Must(t, os.Remove(p("gone.txt")))          // delete a file
	treetest.Must(t, os.Chmod(p("mod.sh"), 0o600))      // chmod a file
	treetest.Must(t, os.Chmod(p("d/sub"), 0o700))       // chmod a directory
	treetest.Must(t, os.Rename(p("d"), p("d2")))        // rename a directory
	treetest.Must(t, os.RemoveAll(p("e")))              // replace a directory by a file
	treetest.Write(t, root, fmt.Sprintf("r%d/e", r), "now a file\n", 0o644)
	treetest.Must(t, os.RemoveAll(p("g")))                                  // delete a directory
	treetest.Write(t, root, fmt.Sprintf("r%d/missing", r), "here\n", 0o644) // where a lookup failed
	treetest.Write(t, root, "missing", "here too\n", 0o644)
	treetest.Write(t, root, "w.txt", "rewritten outside\n", 0o644)
}

// keptServerPid is the pid of a kept view server of root, 0 if none.
func keptServerPid(root string) int {
	if pids := keptServerPids(root); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// keptServerPids are the pids of the kept view servers of root (one per
// snapback binary that ran there).
func keptServerPids(root string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == fuse.KeepVerb && strings.Contains(args[2], `"root":"`+root+`"`) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// keptProj is a project for kept view runs, and who runs them.
type keptProj struct {
	bin, root string
	base      []string   // snapback's environment, kept views as by default
	env       []string   // base, with kept views on
	user      *posixUser // nil: root runs them
}

// keptUsers runs f on a project of root's, then on one of an ordinary
// user's (whose server and runs live in user namespaces of their own).
func keptUsers(t *testing.T, f func(t *testing.T, p *keptProj)) {
	for _, as := range []string{"root", "user"} {
		t.Run(as, func(t *testing.T) { f(t, keptProject(t, as == "user")) })
	}
}

// keptProject makes a project for kept view runs (the ordinary user
// testUser's if user), and ends its server when the test ends.
func keptProject(t *testing.T, user bool) *keptProj {
	t.Helper()
	ok, why := fuse.Available()
	if !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	p := &keptProj{}
	if !user {
		if !treetest.Require(t, "root", os.Geteuid() == 0, "these tests check the server's processes as root") {
			t.Skip("SNAPBACK_REQUIRE does not name root")
		}
		p.bin = snapbackBinary(t)
		p.root = filepath.Join(t.TempDir(), "project")
		treetest.Must(t, os.Mkdir(p.root, 0o755))
		p.base = testEnv(t)
	} else {
		cred, bin := ordinaryUser(t)
		p.bin, p.user = bin, &posixUser{cred: cred, test: userTestBinary(t, bin)}
		base := p.tempDir(t)
		p.root = filepath.Join(base, "project")
		state, run := filepath.Join(base, "state"), filepath.Join(base, "run")
		for _, d := range []string{p.root, state, run} {
			treetest.Must(t, os.Mkdir(d, 0o700))
		}
		p.own(t, base)
		for _, kv := range gitEnv() {
			if !strings.HasPrefix(kv, "XDG_STATE_HOME=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
				p.base = append(p.base, kv)
			}
		}
		p.base = append(p.base, "XDG_STATE_HOME="+state, "XDG_RUNTIME_DIR="+run)
	}
	p.env = append(p.base[:len(p.base):len(p.base)], fuse.KeepEnv+"=1", fuse.KeepIdleEnv+"=2m")
	t.Cleanup(func() {
		if pid := keptServerPid(p.root); pid != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return p
}

// userTestBinary is a copy of the test binary that testUser may run, next
// to bin (ordinaryUser's).
func userTestBinary(t *testing.T, bin string) string {
	t.Helper()
	self, err := os.Executable()
	treetest.Must(t, err)
	test := filepath.Join(filepath.Dir(bin), "posix.test")
	if _, err := os.Stat(test); err != nil {
		copyFile(t, self, test)
	}
	return test
}

// tempDir is a new directory the runs' user may write in.
func (p *keptProj) tempDir(t *testing.T) string {
	t.Helper()
	if p.user == nil {
		return t.TempDir()
	}
	d := userTempDir(t, "snapback-kept-")
	p.own(t, d)
	return d
}

// own gives what the test made under dir to the runs' user (root's
// needs nothing); the store is left as snapback made it.
func (p *keptProj) own(t *testing.T, dir string) {
	t.Helper()
	if p.user == nil {
		return
	}
	treetest.Must(t, filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() && fi.Name() == snapshot.StoreDir {
			return filepath.SkipDir
		}
		return os.Lchown(path, int(p.user.cred.Uid), int(p.user.cred.Gid))
	}))
}

// self is the test binary, as the runs' user may run it.
func (p *keptProj) self(t *testing.T) string {
	t.Helper()
	if p.user != nil {
		return p.user.test
	}
	self, err := os.Executable()
	treetest.Must(t, err)
	return self
}

// command is snapback args... on the project, as the runs' user, with env.
func (p *keptProj) command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(p.bin, append([]string{"-C", p.root}, args...)...)
	cmd.Dir = p.root
	cmd.Env = env
	if p.user != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.user.cred}
	}
	return cmd
}

// sb runs snapback args... on the project as the runs' user, and returns
// what it printed.
func (p *keptProj) sb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.command(p.base, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("snapback %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// keptRun runs the capturing command in a fuse view of the project
// (committed or discarded), with env, and returns what it saw.
func (p *keptProj) run(t *testing.T, env []string, run int, then string) treetest.State {
	t.Helper()
	out := filepath.Join(p.tempDir(t), "seen")
	cmd := p.command(append(env, keptEnv+"="+out, fmt.Sprintf("SNAPBACK_TEST_KEPT_RUN=%d", run)),
		"run", "--mode", "fuse", "--then", then, "--", p.self(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run %d: %v\n%s", run, err, b)
	} else if strings.Contains(string(b), "no kept view") {
		t.Fatalf("run %d had no kept view:\n%s", run, b)
	}
	b, err := os.ReadFile(out)
	treetest.Must(t, err)
	var st treetest.State
	treetest.Must(t, gob.NewDecoder(bytes.NewReader(b)).Decode(&st))
	var top unix.Stat_t
	treetest.Must(t, unix.Lstat(p.root, &top))
	if want := fmt.Sprintf("mode=%o uid=%d gid=%d", top.Mode&0o7777, top.Uid, top.Gid); st["."] != want {
		t.Errorf("run %d: the view's root: %q, the tree's: %q", run, st["."], want)
	}
	delete(st, ".")
	return st
}

// keptRun runs the capturing command in a kept fuse view of root, as
// root (committed or discarded), and returns what it saw.
func keptRun(t *testing.T, bin, root string, env []string, run int, then string) treetest.State {
	t.Helper()
	return (&keptProj{bin: bin, root: root}).run(t, env, run, then)
}

// TestKeptView: a view kept across runs (SNAPBACK_FUSE_KEEP=1) shows
// exactly the real tree on its second and tenth run after the tree was
// changed between runs in every way (an edit in place keeping size and
// times, the same through another name of a hard link, renames of a
// file and of a directory, deletes, chmod of a file and a directory, a
// directory replaced by a file, a name made where a lookup had failed),
// and on every run between after the runs' own commits and discards
// (new files and directories, appends, removals, a renamed lower
// directory); and one server served all ten runs. As root, and as an
// ordinary user.
func TestKeptView(t *testing.T) {
	keptUsers(t, func(t *testing.T, p *keptProj) {
		keptSeed(t, p.root, 0)
		keptSeed(t, p.root, 1)
		treetest.Write(t, p.root, "w.txt", "w\n", 0o644)
		treetest.Write(t, p.root, "vdir/in/deep", "deep\n", 0o644)
		p.own(t, p.root)
		pid := 0
		for run := 1; run <= 10; run++ {
			switch run {
			case 2:
				keptChanges(t, p.root, 0)
				p.own(t, p.root)
			case 10:
				keptChanges(t, p.root, 1)
				p.own(t, p.root)
				treetest.Must(t, os.Chmod(p.root, 0o700)) // the root's own attributes
			}
			want := treetest.Capture(t, p.root, snapshot.StoreDir)
			then := "commit"
			if run%2 == 1 {
				then = "discard"
			}
			got := p.run(t, p.env, run, then)
			treetest.Equal(t, fmt.Sprintf("run %d's view vs the tree", run), want, got)
			s := keptServerPid(p.root)
			if s == 0 {
				t.Fatalf("run %d: no kept view server runs", run)
			}
			if pid != 0 && s != pid {
				t.Fatalf("run %d: the server changed (%d, then %d)", run, pid, s)
			}
			pid = s
		}
	})
}

// TestKeptViewKilled: a kept view's server killed mid-run fails that
// run as a fresh view's would (the command loses its view; what it
// wrote stays pending, and discard or commit finishes it), leaves the
// tree as it was, and the next run starts a new server whose view is
// exact.
func TestKeptViewKilled(t *testing.T) {
	keptUsers(t, func(t *testing.T, p *keptProj) {
		treetest.Write(t, p.root, "a.txt", "a\n", 0o644)
		p.own(t, p.root)
		p.run(t, p.env, 1, "commit")
		pid := keptServerPid(p.root)
		if pid == 0 {
			t.Fatal("no kept view server after the first run")
		}
		marker := filepath.Join(p.tempDir(t), "started")
		cmd := p.command(p.env, "run", "--mode", "fuse", "--", "sh", "-c",
			// Each new name needs the server (a cached file would still read
			// from the kernel's cache after its death).
			`echo b > b && touch "$1" && i=0 && while [ $i -lt 1000 ] && echo > n$i; do i=$((i+1)); sleep 0.05; done; exit 7`, "sh", marker)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		treetest.Must(t, cmd.Start())
		for i := 0; i < 1000; i++ {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		treetest.Must(t, syscall.Kill(pid, syscall.SIGKILL))
		if err := cmd.Wait(); err == nil {
			t.Fatalf("the run succeeded without its view:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "the server died") {
			t.Errorf("the run's error does not say the server died:\n%s", out.String())
		}
		if _, err := os.Lstat(filepath.Join(p.root, "b")); !os.IsNotExist(err) {
			t.Errorf("the killed run's b reached the tree: %v", err)
		}
		p.sb(t, "recover")
		if st := p.sb(t, "status"); !strings.Contains(st, "pending") {
			t.Errorf("the killed run is not pending:\n%s", st)
		}
		p.sb(t, "discard")
		treetest.Write(t, p.root, "a.txt", "changed while no server ran\n", 0o644)
		want := treetest.Capture(t, p.root, snapshot.StoreDir)
		got := p.run(t, p.env, 3, "discard")
		treetest.Equal(t, "the next run's view vs the tree", want, got)
		if s := keptServerPid(p.root); s == 0 || s == pid {
			t.Errorf("the next run's server: pid %d (the killed one was %d)", s, pid)
		}
	})
}

// TestKeptViewRootReplaced: a project root removed and made again
// between runs is not shown as the old one: its server ends on hearing
// of it (or, if the run comes first, gives the run a fresh view, saying
// why), and the next run has a new server.
func TestKeptViewRootReplaced(t *testing.T) {
	keptUsers(t, func(t *testing.T, p *keptProj) {
		treetest.Write(t, p.root, "a.txt", "old\n", 0o644)
		p.own(t, p.root)
		p.run(t, p.env, 1, "commit")
		pid := keptServerPid(p.root)
		treetest.Must(t, os.Rename(p.root, p.root+".old"))
		treetest.Write(t, p.root, "a.txt", "new\n", 0o644)
		p.own(t, p.root)
		want := treetest.Capture(t, p.root, snapshot.StoreDir)
		out, err := p.command(p.env, "run", "--mode", "fuse", "--then", "discard", "--", "cat", "a.txt").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "new\n") {
			t.Fatalf("the run after the root was replaced: %v\n%s", err, out)
		}
		got := p.run(t, p.env, 3, "discard")
		treetest.Equal(t, "the next run's view vs the tree", want, got)
		if s := keptServerPid(p.root); s == 0 || s == pid {
			t.Errorf("the next run's server: pid %d (the old root's was %d)", s, pid)
		}
	})
}

// TestKeptViewSession: the next step of a session (run --continue) in a
// kept view shows the session's changes, though a run between looked
// up the same paths in the tree: what a fresh view of the step shows.
func TestKeptViewSession(t *testing.T) {
	keptUsers(t, func(t *testing.T, p *keptProj) {
		treetest.Write(t, p.root, "a.txt", "a\n", 0o644)
		treetest.Write(t, p.root, "d/x", "x\n", 0o644)
		p.own(t, p.root)
		run := func(env []string, args ...string) string {
			t.Helper()
			out, err := p.command(env, args...).CombinedOutput()
			if err != nil || strings.Contains(string(out), "no kept view") {
				t.Fatalf("snapback %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		run(p.env, "run", "--mode", "fuse", "--then", "review", "--", "sh", "-c", "echo one > a.txt; rm d/x; echo n > new; mkdir d/e")
		var st struct {
			Runs []struct {
				ID string `json:"id"`
			} `json:"runs"`
		}
		treetest.Must(t, json.Unmarshal([]byte(run(p.env, "--json", "status")), &st))
		if len(st.Runs) != 1 {
			t.Fatalf("pending runs: %+v", st.Runs)
		}
		p.run(t, p.env, 2, "discard") // looks up a.txt, d/x, new in the tree
		seen := func(env []string) treetest.State {
			out := filepath.Join(p.tempDir(t), "seen")
			run(append(env, keptEnv+"="+out, "SNAPBACK_TEST_KEPT_RUN=none"), "run", "--mode", "fuse", "--continue", st.Runs[0].ID, "--", p.self(t))
			b, err := os.ReadFile(out)
			treetest.Must(t, err)
			var s treetest.State
			treetest.Must(t, gob.NewDecoder(bytes.NewReader(b)).Decode(&s))
			return s
		}
		got := seen(p.env)
		want := seen(append(p.base, fuse.KeepEnv+"=0")) // a fresh view
		treetest.Equal(t, "the session's step in the kept view vs in a fresh view", want, got)
		if !strings.Contains(want["a.txt"], "size=4") {
			t.Errorf("the fresh view does not show the session's a.txt: %q", want["a.txt"])
		}
	})
}

// TestKeptViewConcurrent: a second run while the kept view is in use
// gets a fresh view of its own (two servers starting at once are kept
// apart by the lock), and both runs' views are exact.
func TestKeptViewConcurrent(t *testing.T) {
	keptUsers(t, func(t *testing.T, p *keptProj) {
		treetest.Write(t, p.root, "a.txt", "a\n", 0o644)
		p.own(t, p.root)
		sig := p.tempDir(t)
		started, goOn := filepath.Join(sig, "started"), filepath.Join(sig, "go")
		first := p.command(p.env, "run", "--mode", "fuse", "--", "sh", "-c",
			`echo first > first && touch "$1" && while [ ! -e "$2" ]; do sleep 0.02; done; cat a.txt`, "sh", started, goOn)
		var out1 strings.Builder
		first.Stdout, first.Stderr = &out1, &out1
		treetest.Must(t, first.Start())
		waitFor(t, started)
		want := treetest.Capture(t, p.root, snapshot.StoreDir)
		got := p.run(t, p.env, 2, "commit") // while the first holds the view
		treetest.Equal(t, "the second run's view vs the tree", want, got)
		treetest.Must(t, os.WriteFile(goOn, nil, 0o644))
		if err := first.Wait(); err != nil || !strings.Contains(out1.String(), "a\n") {
			t.Fatalf("the first run: %v\n%s", err, out1.String())
		}
		for f, w := range map[string]string{"first": "first\n", "made-2": "2\n"} {
			if b, _ := os.ReadFile(filepath.Join(p.root, f)); string(b) != w {
				t.Errorf("after both commits %s = %q, want %q", f, b, w)
			}
		}
		want = treetest.Capture(t, p.root, snapshot.StoreDir)
		got = p.run(t, p.env, 3, "discard")
		treetest.Equal(t, "the kept view after both runs vs the tree", want, got)
	})
}

// TestKeptViewEndsWithTree: a kept view's server ends within seconds,
// not its idle time, once its project's store is removed (the tree
// staying), or the whole tree is (as a test's temporary directory is),
// with the server's private directory too (a test's TMPDIR; here long,
// as it may be), and the view's mount goes with it.
func TestKeptViewEndsWithTree(t *testing.T) {
	for _, what := range []string{"store", "tree", "tree and runtime dir"} {
		t.Run(what, func(t *testing.T) {
			p := keptProject(t, false)
			treetest.Write(t, p.root, "a.txt", "a\n", 0o644)
			run := ""
			if what == "tree and runtime dir" {
				// Long: the socket's path is longer than a socket address
				// takes (107 bytes).
				run = filepath.Join(filepath.Dir(p.root), strings.Repeat("r", 80))
				treetest.Must(t, os.Mkdir(run, 0o700))
				p.env = append(p.env, "XDG_RUNTIME_DIR="+run)
			}
			p.run(t, p.env, 1, "commit")
			pid := keptServerPid(p.root)
			if pid == 0 {
				t.Fatal("no kept view server after the first run")
			}
			gone := filepath.Join(p.root, snapshot.StoreDir)
			if what != "store" {
				gone = p.root
			}
			if run != "" {
				treetest.Must(t, os.RemoveAll(run)) // first: the server then finds no lock to take
			}
			treetest.Must(t, os.RemoveAll(gone))
			deadline := time.Now().Add(10 * time.Second)
			for running(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if running(pid) {
				t.Fatalf("the kept view's server (pid %d) still runs 10 s after its %s was removed", pid, what)
			}
		})
	}
}

// running reports whether the process pid runs: it exists and is not a
// zombie (a server whose runner has exited is reaped by init, which
// may take a while).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}

// TestKeptViewOtherBinary: a run of another snapback binary (the user
// upgraded it while a server idles) is not served by the older binary's
// server: it starts one of its own, which its doctor names, and the
// older one serves its own binary's runs still.
func TestKeptViewOtherBinary(t *testing.T) {
	p := keptProject(t, false)
	treetest.Write(t, p.root, "a.txt", "a\n", 0o644)
	p.run(t, p.env, 1, "discard")
	old := keptServerPid(p.root)
	if old == 0 {
		t.Fatal("no kept view server after the first run")
	}
	other := filepath.Join(t.TempDir(), "snapback")
	copyFile(t, p.bin, other)
	treetest.Must(t, os.Chmod(other, 0o755))
	q := &keptProj{bin: other, root: p.root, base: p.base, env: p.env}
	q.run(t, q.env, 2, "discard")
	servers := keptServerPids(p.root)
	for _, pid := range servers {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	}
	if len(servers) != 2 || !slices.Contains(servers, old) {
		t.Fatalf("kept view servers of the project: %v, want the first binary's (%d) and the other's", servers, old)
	}
	other0 := servers[0]
	if other0 == old {
		other0 = servers[1]
	}
	if out := q.sb(t, "doctor"); !strings.Contains(out, fmt.Sprintf("(pid %d)", other0)) {
		t.Errorf("the other binary's doctor does not name its server (%d; the first binary's is %d):\n%s", other0, old, out)
	}
	p.run(t, p.env, 3, "discard")
	if keptServerPid(p.root) == 0 || !running(old) {
		t.Errorf("the first binary's server (%d) no longer runs", old)
	}
}
