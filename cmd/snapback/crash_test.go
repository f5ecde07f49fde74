//go:build linux

package main

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/snapshot"
	_ "modernc.org/sqlite"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// snapbackBinary builds the real binary once: the crash tests kill a real
// process, not a goroutine.
func snapbackBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "snapback-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "snapback")
		build := exec.Command("go", "build", "-tags", "snapback_testseams", "-o", binPath, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as released: the docker-volume helper needs it
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func sb(t *testing.T, bin, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-C", root}, args...)...)
	cmd.Env = testEnv(t) // the stores the test's hooks made
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("snapback %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// bigChange builds a tree, snapshots it, and changes it widely: the undo
// of that change touches thousands of paths.
func bigChange(t *testing.T, bin, root string) (before, after treetest.State) {
	t.Helper()
	treetest.Tricky(t, root, 0)
	for d := 0; d < 30; d++ {
		for f := 0; f < 20; f++ {
			treetest.Write(t, root, fmt.Sprintf("tree/d%02d/f%03d.txt", d, f), fmt.Sprintf("%d-%d %s\n", d, f, bytes.Repeat([]byte("x"), 1000+f*20)), 0o644)
		}
	}
	sb(t, bin, root, "snap", "-m", "before")
	before = treetest.Capture(t, root, snapshot.StoreDir)
	for d := 0; d < 30; d++ {
		for f := 0; f < 20; f++ {
			p := fmt.Sprintf("tree/d%02d/f%03d.txt", d, f)
			switch {
			case f%5 == 0:
				treetest.Must(t, os.Remove(filepath.Join(root, p)))
			case f%5 == 1:
				treetest.Must(t, os.Chmod(filepath.Join(root, p), 0o600))
			default:
				treetest.Write(t, root, p, fmt.Sprintf("changed %d-%d\n", d, f), 0o644)
			}
		}
		treetest.Write(t, root, fmt.Sprintf("tree/new%02d/g.txt", d), "new", 0o644)
	}
	treetest.Must(t, os.RemoveAll(filepath.Join(root, "deep")))
	treetest.Must(t, os.Remove(filepath.Join(root, "plain.txt")))
	treetest.Must(t, os.Mkdir(filepath.Join(root, "plain.txt"), 0o755))
	after = treetest.Capture(t, root, snapshot.StoreDir)
	return before, after
}

func same(a, b treetest.State) bool { return len(treetest.Diff(a, b)) == 0 }

// TestCrashDuringUndo kills `snapback undo` of a large change at named
// steps and at random moments, then checks that `snapback recover` leaves
// the tree exactly before or exactly after the undo, never a mix, and that
// undo and redo still work from there.
func TestCrashDuringUndo(t *testing.T) {
	bin := snapbackBinary(t)
	// Measure an uninterrupted undo to aim the random kills.
	root := t.TempDir()
	bigChange(t, bin, root)
	start := time.Now()
	sb(t, bin, root, "undo")
	full := time.Since(start)
	t.Logf("uninterrupted undo: %v", full)

	type tc struct {
		name  string
		env   string        // SNAPBACK_CRASH_AT
		delay time.Duration // kill after this long (when env is empty)
		want  string        // "before", "after" or "" (either)
	}
	cases := []tc{
		{name: "before-journal", env: "before-journal", want: "after"}, // tree untouched: still the changed state
		{name: "journal-written", env: "journal-written", want: "before"},
		{name: "apply-first", env: "apply:1", want: "before"},
		{name: "apply-early", env: "apply:100", want: "before"},
		{name: "apply-middle", env: "apply:300", want: "before"},
		{name: "apply-late", env: "apply:600", want: "before"},
		{name: "applied", env: "applied", want: "before"},
		{name: "recorded", env: "recorded", want: "before"},
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; i < 8; i++ {
		d := time.Duration(rng.Int63n(int64(full) + 1))
		cases = append(cases, tc{name: fmt.Sprintf("random-%d-%v", i, d.Round(time.Millisecond)), delay: d})
	}
	mid := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			before, after := bigChange(t, bin, root)
			cmd := exec.Command(bin, "-C", root, "undo")
			if c.env != "" {
				cmd.Env = append(os.Environ(), "SNAPBACK_CRASH_AT="+c.env)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			treetest.Must(t, cmd.Start())
			if c.env == "" {
				time.Sleep(c.delay)
				_ = cmd.Process.Signal(syscall.SIGKILL) // it may have finished already
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
			if c.env != "" && !killed {
				t.Fatalf("crash point %s was never reached: %v\n%s", c.env, err, out.String())
			}
			interrupted := treetest.Capture(t, root, snapshot.StoreDir)
			if killed && !same(interrupted, before) && !same(interrupted, after) {
				mid++
			}
			sb(t, bin, root, "recover")
			got := treetest.Capture(t, root, snapshot.StoreDir)
			switch {
			case same(got, before):
				if c.want == "after" {
					t.Fatal("recover finished an undo that never wrote its journal")
				}
				// The undo counts as done: redo brings the change back, undo reverts it.
				sb(t, bin, root, "redo")
				treetest.Equal(t, "redo after recover", after, treetest.Capture(t, root, snapshot.StoreDir))
				sb(t, bin, root, "undo")
				treetest.Equal(t, "undo after redo", before, treetest.Capture(t, root, snapshot.StoreDir))
			case same(got, after):
				if c.want == "before" {
					treetest.Equal(t, "recover should have finished the undo", before, got)
				}
				sb(t, bin, root, "undo")
				treetest.Equal(t, "undo after recover", before, treetest.Capture(t, root, snapshot.StoreDir))
			default:
				treetest.Equal(t, "after recover the tree is neither before nor after the undo", before, got)
			}
		})
	}
	if mid == 0 {
		t.Errorf("no kill landed in the middle of the undo: the test did not exercise recovery")
	}
	t.Logf("%d kills left a half-changed tree that recover completed", mid)
}

// TestCrashDuringSnap kills a first snapshot at random moments: the tree
// must be untouched, and the store usable, with no half snapshot listed.
func TestCrashDuringSnap(t *testing.T) {
	bin := snapbackBinary(t)
	for i, delay := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond} {
		root := t.TempDir()
		for f := 0; f < 2000; f++ {
			treetest.Write(t, root, fmt.Sprintf("d%02d/f%04d", f%40, f), fmt.Sprintf("%d %s", f, bytes.Repeat([]byte("y"), 4000)), 0o644)
		}
		before := treetest.Capture(t, root, snapshot.StoreDir)
		cmd := exec.Command(bin, "-C", root, "snap")
		treetest.Must(t, cmd.Start())
		time.Sleep(delay)
		_ = cmd.Process.Signal(syscall.SIGKILL) // may have finished
		_ = cmd.Wait()
		treetest.Equal(t, fmt.Sprintf("kill %d: tree after a killed snap", i), before, treetest.Capture(t, root, snapshot.StoreDir))
		if _, err := os.Stat(filepath.Join(root, snapshot.StoreDir)); err == nil {
			sb(t, bin, root, "recover")
			if tmp, _ := os.ReadDir(filepath.Join(root, snapshot.StoreDir, "tmp")); len(tmp) != 0 {
				t.Fatalf("recover left %d temp files", len(tmp))
			}
		}
		sb(t, bin, root, "snap")
		treetest.Write(t, root, "d00/f0000", "changed", 0o644)
		sb(t, bin, root, "undo")
		treetest.Equal(t, "undo after a killed snap", before, treetest.Capture(t, root, snapshot.StoreDir))
	}
}

// TestCrashDuringRun kills snapback while its command runs; the command
// goes on, and writes more once snapback is dead. In the copy and btrfs
// modes the next snapback call finishes the run as interrupted and undo
// reverts what the command had changed. In the view modes (overlayfs,
// fuse: the fuse server must outlive snapback, and zfs: its clone) the
// command keeps its view to its end, every later write landing in the
// run's layer (the zfs mode's once the next snapback call has settled the
// run, destroying its clones); the run shows as running meanwhile, then
// pending, with everything the command wrote; recover leaves it so, and
// committing then undoing it works.
func TestCrashDuringRun(t *testing.T) {
	bin := snapbackBinary(t)
	for _, mode := range []string{"copy", "overlayfs", "fuse", "btrfs", "zfs", "fuse-kept", "fuse-kept-user"} {
		t.Run(mode, func(t *testing.T) {
			// fuse-kept: the fuse mode with the project's view kept
			// across runs (SNAPBACK_FUSE_KEEP): its server gives the
			// view up, serves the orphaned run to its end, and the next
			// run starts a new server. fuse-kept-user: the same as an
			// ordinary user.
			runMode, kept := mode, strings.HasPrefix(mode, "fuse-kept")
			if kept {
				runMode = "fuse"
			}
			view := mode == "overlayfs" || runMode == "fuse" || mode == "zfs"
			if view && os.Geteuid() != 0 {
				treetest.Require(t, mode, false, "not root: this test makes its overlay runs as root only")
				t.Skip("SNAPBACK_REQUIRE does not name " + mode + ": not root")
			}
			if runMode == "fuse" {
				ok, why := fuse.Available()
				if !treetest.Require(t, "fuse", ok, why) {
					t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
				}
			}
			root, ds := t.TempDir(), ""
			var keptEnv []string
			if mode == "fuse" {
				keptEnv = append(os.Environ(), fuse.KeepEnv+"=0") // a fresh view
			}
			if kept {
				keptEnv = append(os.Environ(), fuse.KeepEnv+"=1")
				t.Cleanup(func() {
					if pid := keptServerPid(root); pid != 0 {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				})
			}
			// p runs snapback as the user (root's runs: p.user is nil).
			p := &keptProj{bin: bin, root: root, base: testEnv(t)}
			if mode == "fuse-kept-user" {
				p = keptProject(t, true)
				root, keptEnv = p.root, p.env
			}
			sb := func(t *testing.T, bin, root string, args ...string) string {
				t.Helper()
				return p.sb(t, args...)
			}
			if mode == "zfs" {
				ds = treetest.ZFS(t)
				root = filepath.Join(treetest.ZFSMount(t, ds), "proj")
				treetest.Must(t, os.Mkdir(root, 0o755))
			}
			if mode == "btrfs" {
				root = filepath.Join(treetest.Btrfs(t, 256), "proj")
				if out, err := exec.Command("btrfs", "subvolume", "create", root).CombinedOutput(); err != nil {
					t.Fatalf("btrfs subvolume create: %v\n%s", err, out)
				}
			}
			p.root = root
			treetest.Write(t, root, "a", "before\n", 0o644)
			treetest.Write(t, root, "b", "untouched\n", 0o644)
			p.own(t, root)
			sb(t, bin, root, "snap", "-m", "base")
			before := treetest.Capture(t, root, snapshot.StoreDir)
			// snapback is killed mid-run (from outside: an overlay run's
			// command cannot see it); the command waits for go, then
			// writes d and reads it back.
			sig := p.tempDir(t)
			ready, goOn, finished := filepath.Join(sig, "ready"), filepath.Join(sig, "go"), filepath.Join(sig, "finished")
			script := `echo during > a; echo new > c; touch ` + ready + `; while [ ! -e ` + goOn + ` ]; do sleep 0.02; done; ` +
				// finished appears whole (waitFor sees a name).
				`if echo late > d && grep -q late d && ls >/dev/null; then echo ok; else echo "$?"; fi > ` + finished + `.part; mv ` + finished + `.part ` + finished
			cmd := p.command(keptEnv, "run", "--mode", runMode, "--", "sh", "-c", script)
			server := 0
			// A file, not a pipe: Wait would wait for the orphaned command
			// to close a pipe.
			outf, err := os.Create(filepath.Join(sig, "out"))
			treetest.Must(t, err)
			defer outf.Close()
			cmd.Stdout, cmd.Stderr = outf, outf
			output := func() string { b, _ := os.ReadFile(outf.Name()); return string(b) }
			treetest.Must(t, cmd.Start())
			waitFor(t, ready)
			if kept {
				if server = keptServerPid(root); server == 0 {
					t.Fatal("no kept view server")
				}
			}
			treetest.Must(t, cmd.Process.Kill())
			err = cmd.Wait()
			out := output()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("snapback was not killed: %v\n%s", err, out)
			}
			if view {
				// Its processes hold the run: nothing may commit it yet.
				if st := sb(t, bin, root, "status"); !strings.Contains(st, "running") {
					t.Fatalf("the run is not running while its command is:\n%s", st)
				}
			}
			treetest.Must(t, os.WriteFile(goOn, nil, 0o644))
			waitFor(t, finished)
			if b, _ := os.ReadFile(finished); string(b) != "ok\n" {
				t.Fatalf("the command's writes after snapback's death failed (status %q):\n%s", b, output())
			}
			if view {
				st := ""
				for i := 0; i < 500; i++ { // the run's processes end just after the command
					if st = sb(t, bin, root, "status"); !strings.Contains(st, "running") {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				treetest.Equal(t, "tree while the run is pending", before, treetest.Capture(t, root, snapshot.StoreDir))
				if !strings.Contains(st, "pending") {
					t.Fatalf("the run is not pending:\n%s", st)
				}
				ups, _ := filepath.Glob(filepath.Join(root, snapshot.StoreDir, "runs", "*", "upper", "d"))
				if len(ups) != 1 {
					t.Fatalf("the write after snapback's death is not in the run's layer: %v", ups)
				}
				sb(t, bin, root, "recover")
				if st := sb(t, bin, root, "status"); !strings.Contains(st, "pending") {
					t.Fatalf("recover did not leave the run pending:\n%s", st)
				}
				sb(t, bin, root, "commit")
				for f, want := range map[string]string{"a": "during\n", "c": "new\n", "d": "late\n"} {
					if b, _ := os.ReadFile(filepath.Join(root, f)); string(b) != want {
						t.Fatalf("after commit %s = %q, want %q", f, b, want)
					}
				}
				if kept {
					for i := 0; i < 500 && running(server); i++ {
						time.Sleep(10 * time.Millisecond)
					}
					if running(server) {
						t.Errorf("the kept view's server (pid %d) outlived its orphaned run", server)
					}
					want := treetest.Capture(t, root, snapshot.StoreDir)
					got := p.run(t, append(p.base, fuse.KeepEnv+"=1"), 2, "discard")
					treetest.Equal(t, "the next kept run's view vs the tree", want, got)
					if p := keptServerPid(root); p == 0 || p == server {
						t.Errorf("the next run's server: pid %d (the orphaned run's: %d)", p, server)
					}
				}
			} else if list := sb(t, bin, root, "list"); !bytes.Contains([]byte(list), []byte("$ sh -c")) {
				t.Fatalf("the interrupted run is not listed:\n%s", list)
			}
			sb(t, bin, root, "undo")
			treetest.Equal(t, "undo of an interrupted run", before, treetest.Capture(t, root, snapshot.StoreDir))
			if mode == "btrfs" {
				if out, _ := exec.Command("btrfs", "subvolume", "list", "-o", root).CombinedOutput(); len(bytes.TrimSpace(out)) > 0 {
					t.Fatalf("the run's snapshot was left behind:\n%s", out)
				}
			}
			if mode == "zfs" {
				noZFSLeft(t, "after the run's commit and undo", ds)
			}
		})
	}
}

// TestRunFuseServerKilled is the opposite of a killed snapback: the fuse
// server killed mid-run. The command loses its view (ENOTCONN), snapback
// says the server died and exits 125, and the run stays pending with
// what the command wrote before, the tree untouched; discard drops it.
// A fresh view's server (SNAPBACK_FUSE_KEEP=0): TestKeptViewKilled kills
// a kept one.
func TestRunFuseServerKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		treetest.Require(t, "fuse", false, "not root: this test makes its fuse runs as root only")
		t.Skip("SNAPBACK_REQUIRE does not name fuse: not root")
	}
	if ok, why := fuse.Available(); !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	bin := snapbackBinary(t)
	root := t.TempDir()
	treetest.Write(t, root, "a", "before\n", 0o644)
	sb(t, bin, root, "snap", "-m", "base")
	before := treetest.Capture(t, root, snapshot.StoreDir)
	sig := t.TempDir()
	ready, goOn := filepath.Join(sig, "ready"), filepath.Join(sig, "go")
	cmd := exec.Command(bin, "-C", root, "run", "--mode", "fuse", "--", "sh", "-c",
		`echo during > a; touch `+ready+`; while [ ! -e `+goOn+` ]; do sleep 0.02; done; echo late > d`)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), fuse.KeepEnv+"=0")
	outf, err := os.Create(filepath.Join(sig, "out"))
	treetest.Must(t, err)
	defer outf.Close()
	cmd.Stdout, cmd.Stderr = outf, outf
	treetest.Must(t, cmd.Start())
	waitFor(t, ready)
	pid := fuseServer(root)
	if pid == 0 {
		t.Fatal("no fuse server found")
	}
	treetest.Must(t, syscall.Kill(pid, syscall.SIGKILL))
	treetest.Must(t, os.WriteFile(goOn, nil, 0o644))
	err = cmd.Wait()
	out, _ := os.ReadFile(outf.Name())
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(string(out), "the server died during the run") || !strings.Contains(string(out), "Transport endpoint is not connected") {
		t.Fatalf("snapback with its server killed: %v (exit %d)\n%s", err, code, out)
	}
	treetest.Equal(t, "tree after the server died", before, treetest.Capture(t, root, snapshot.StoreDir))
	if st := sb(t, bin, root, "status"); !strings.Contains(st, "pending") {
		t.Fatalf("the run is not pending:\n%s", st)
	}
	if ups, _ := filepath.Glob(filepath.Join(root, snapshot.StoreDir, "runs", "*", "upper", "a")); len(ups) != 1 {
		t.Fatalf("what the command wrote before is not in the run's layer: %v", ups)
	}
	sb(t, bin, root, "discard")
	treetest.Equal(t, "tree after discard", before, treetest.Capture(t, root, snapshot.StoreDir))
}

// fuseServer finds the pid of the fuse server of a run at root (0: none).
func fuseServer(root string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && args[1] == fuse.ServeVerb && args[2] == "serve" && strings.Contains(args[3], `"root":"`+root+`"`) {
			pid, _ := strconv.Atoi(e.Name())
			return pid
		}
	}
	return 0
}

// waitFor waits up to 10 s for the file p to exist.
func waitFor(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
}

// describe lists every path below the project (but the store) with type,
// mode, mtime, link target and content hash, as find(1) and sha256sum see
// it: run inside a run's view and in the tree, the two are comparable.
// A directory's mtime is left out: a commit moves entries into it, so it
// tells the time of the commit, not of the run.
const describe = `find . -path ./.snapback -prune -o -type d -printf '%p d %m\n' -o -printf '%p %y %m %T@ %l\n' | LC_ALL=C sort; find . -path ./.snapback -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum`

// TestCrashDuringCommit kills `snapback commit` of a large pending run at
// each step: after recover the tree is exactly as before the commit (the
// run still pending) or exactly as the run's view showed it (the run
// gone), and undo then restores the state before the run.
func TestCrashDuringCommit(t *testing.T) {
	bin := snapbackBinary(t)
	if os.Geteuid() != 0 {
		treetest.Require(t, "overlayfs", false, "not root: this test makes its overlay runs as root only")
		t.Skip("SNAPBACK_REQUIRE does not name overlayfs: not root")
	}
	change := `for d in $(seq 0 19); do for f in $(seq 0 19); do case $((f % 4)) in 0) rm tree/d$d/f$f;; 1) chmod 600 tree/d$d/f$f;; *) echo changed > tree/d$d/f$f;; esac; done; mkdir -p tree/new$d; echo new > tree/new$d/g; done; rm -rf deep; rm plain.txt; mkdir plain.txt`
	for _, point := range []string{"before-journal", "journal-written", "apply:1", "apply:150", "apply:400", "applied", "recorded"} {
		t.Run(point, func(t *testing.T) {
			root := t.TempDir()
			treetest.Tricky(t, root, 0)
			for d := 0; d < 20; d++ {
				for f := 0; f < 20; f++ {
					treetest.Write(t, root, fmt.Sprintf("tree/d%d/f%d", d, f), fmt.Sprintf("%d/%d\n", d, f), 0o644)
				}
			}
			before := treetest.Capture(t, root, snapshot.StoreDir)
			sb(t, bin, root, "run", "--mode", "overlayfs", "--then", "review", "--", "sh", "-c", "cd "+root+" && "+change)
			id := regexp.MustCompile(`"id": "([^"]+)"`).FindStringSubmatch(sb(t, bin, root, "--json", "status"))[1]
			inView := sb(t, bin, root, "run", "--continue", id, "--then", "review", "--", "sh", "-c", "cd "+root+" && "+describe)
			inView = regexp.MustCompile(`(?m)^snapback: .*\n`).ReplaceAllString(inView, "") // run's own note on stderr
			cmd := exec.Command(bin, "-C", root, "commit")
			cmd.Env = append(os.Environ(), "SNAPBACK_CRASH_AT="+point)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("crash point %s was never reached: %v\n%s", point, err, out)
			}
			sb(t, bin, root, "recover")
			status := sb(t, bin, root, "status")
			got := treetest.Capture(t, root, snapshot.StoreDir)
			switch {
			case same(got, before):
				if point != "before-journal" {
					t.Fatalf("recover rolled back a commit whose journal was written")
				}
				if !strings.Contains(status, id) {
					t.Fatalf("the run is no longer pending:\n%s", status)
				}
				sb(t, bin, root, "commit")
			default:
				if point == "before-journal" {
					t.Fatalf("recover finished a commit that never wrote its journal")
				}
				if strings.Contains(status, id) {
					t.Fatalf("the committed run is still pending:\n%s", status)
				}
			}
			if now := shOut(t, root, describe); now != inView {
				t.Fatalf("after the commit the tree differs from the run's view:\n%s", lineDiff(inView, now))
			}
			sb(t, bin, root, "undo")
			treetest.Equal(t, "undo of the committed run", before, treetest.Capture(t, root, snapshot.StoreDir))
		})
	}
}

func shOut(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return string(out)
}

func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	in := map[string]bool{}
	for _, l := range bl {
		in[l] = true
	}
	var sb strings.Builder
	n := 0
	for _, l := range al {
		if !in[l] && n < 20 {
			fmt.Fprintf(&sb, "view only: %s\n", l)
			n++
		}
	}
	in = map[string]bool{}
	for _, l := range al {
		in[l] = true
	}
	for _, l := range bl {
		if !in[l] && n < 40 {
			fmt.Fprintf(&sb, "tree only: %s\n", l)
			n++
		}
	}
	return sb.String()
}

// TestCrashDuringTargetUndo kills an undo that restores two SQLite
// targets (one in the tree, one outside it) along with the tree: at every
// named step, between the two targets, and at random moments. After
// `recover` the tree and both databases are all as before the undo or all
// as after it, and redo and undo still work.
func TestCrashDuringTargetUndo(t *testing.T) {
	bin := snapbackBinary(t)
	type state struct {
		tree     treetest.State
		in, outd string
	}
	setup := func(t *testing.T) (root string, before, after state) {
		base := t.TempDir()
		root = filepath.Join(base, "p")
		treetest.Must(t, os.Mkdir(root, 0o755))
		treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"in\"\nbackend = \"sqlite\"\npath = \"app.db\"\n\n[[target]]\nname = \"out\"\nbackend = \"sqlite\"\npath = \"../out.db\"\n", 0o644)
		for _, p := range []string{filepath.Join(root, "app.db"), filepath.Join(base, "out.db")} {
			sqlExec(t, p, `CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)`)
			sqlExec(t, p, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 3000) INSERT INTO t(v) SELECT randomblob(4000) FROM n`)
		}
		treetest.Write(t, root, "code.txt", "v1\n", 0o644)
		sb(t, bin, root, "snap", "-m", "before")
		get := func() state {
			return state{treetest.Capture(t, root, snapshot.StoreDir, "app.db"), sqlSum(t, filepath.Join(root, "app.db")), sqlSum(t, filepath.Join(base, "out.db"))}
		}
		before = get()
		for _, p := range []string{filepath.Join(root, "app.db"), filepath.Join(base, "out.db")} {
			sqlExec(t, p, `DELETE FROM t WHERE id % 3 = 0; UPDATE t SET v = randomblob(100) WHERE id % 3 = 1; CREATE TABLE later(x)`)
		}
		treetest.Write(t, root, "code.txt", "v2\n", 0o644)
		return root, before, get()
	}
	eq := func(a, b state) bool { return same(a.tree, b.tree) && a.in == b.in && a.outd == b.outd }

	root, _, _ := setup(t)
	start := time.Now()
	sb(t, bin, root, "undo")
	full := time.Since(start)
	t.Logf("uninterrupted undo with two 12 MB databases: %v", full)

	cases := []struct{ name, env, want string }{
		{"before-journal", "before-journal", "after"},
		{"journal-written", "journal-written", "before"},
		{"applied", "applied", "before"},
		{"first-target", "target-restore:1", "before"},
		{"between-targets", "target-restore:2", "before"},
		{"targets-restored", "targets-restored", "before"},
		{"recorded", "recorded", "before"},
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; i < 6; i++ {
		cases = append(cases, struct{ name, env, want string }{fmt.Sprintf("random-%d", i), "", ""})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, before, after := setup(t)
			cmd := exec.Command(bin, "-C", root, "undo")
			if c.env != "" {
				cmd.Env = append(os.Environ(), "SNAPBACK_CRASH_AT="+c.env)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			treetest.Must(t, cmd.Start())
			if c.env == "" {
				time.Sleep(time.Duration(rng.Int63n(int64(full) + 1)))
				_ = cmd.Process.Signal(syscall.SIGKILL) // it may have finished already
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
			if c.env != "" && !killed {
				t.Fatalf("crash point %s was never reached: %v\n%s", c.env, err, out.String())
			}
			sb(t, bin, root, "recover")
			got := state{treetest.Capture(t, root, snapshot.StoreDir, "app.db"), sqlSum(t, filepath.Join(root, "app.db")), sqlSum(t, filepath.Join(filepath.Dir(root), "out.db"))}
			switch {
			case eq(got, before):
				if c.want == "after" {
					t.Fatal("recover finished an undo that never wrote its journal")
				}
				sb(t, bin, root, "redo")
				if now := (state{treetest.Capture(t, root, snapshot.StoreDir, "app.db"), sqlSum(t, filepath.Join(root, "app.db")), sqlSum(t, filepath.Join(filepath.Dir(root), "out.db"))}); !eq(now, after) {
					t.Fatalf("redo after recover: databases %q %q, want %q %q", now.in, now.outd, after.in, after.outd)
				}
			case eq(got, after):
				if c.want == "before" {
					t.Fatal("recover should have finished the undo")
				}
				sb(t, bin, root, "undo")
			default:
				t.Fatalf("after recover: tree same as before %v, as after %v; databases %q %q; before %q %q; after %q %q",
					same(got.tree, before.tree), same(got.tree, after.tree), got.in, got.outd, before.in, before.outd, after.in, after.outd)
			}
		})
	}
}

func sqlExec(t *testing.T, p, q string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)")
	treetest.Must(t, err)
	defer db.Close()
	_, err = db.Exec(q)
	treetest.Must(t, err)
}

// sqlSum fingerprints a database's content: its tables and rows.
func sqlSum(t *testing.T, p string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro&_pragma=busy_timeout(10000)")
	treetest.Must(t, err)
	defer db.Close()
	var tables, rows int
	var sum string
	treetest.Must(t, db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table'`).Scan(&tables))
	treetest.Must(t, db.QueryRow(`SELECT count(*), coalesce(sum(length(v) * id), 0) FROM t`).Scan(&rows, &sum))
	return fmt.Sprintf("tables=%d rows=%d sum=%s", tables, rows, sum)
}
