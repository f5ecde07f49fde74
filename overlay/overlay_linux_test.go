package overlay

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// The package's own tests: the mount, the PID-1 init and what reaches the
// command, through the real helper (the test binary stands in for
// snapback's: TestMain runs the helper's verb) on a real overlayfs.

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperVerb {
		os.Exit(Helper(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// view is a project with its run's layer beside it.
type view struct {
	root, upper, work string
}

func newView(t *testing.T) view {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "mounting overlayfs outside a user namespace needs root"
	} else if ok, reason := Available(); !ok {
		why = reason
	}
	if !treetest.Require(t, "overlayfs", why == "", why) {
		t.Skipf("SNAPBACK_REQUIRE does not name overlayfs: %s", why)
	}
	dir := t.TempDir()
	v := view{filepath.Join(dir, "root"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")}
	for _, d := range []string{v.root, v.upper, v.work} {
		treetest.Must(t, os.Mkdir(d, 0o755))
	}
	treetest.Write(t, v.root, "a", "old\n", 0o644)
	treetest.Write(t, v.root, "d/x", "x\n", 0o644)
	treetest.Write(t, v.root, layout.StoreDir+"/secret", "history\n", 0o600)
	return v
}

func (v view) spec() Spec {
	return Spec{Root: v.root, Upper: v.upper, Work: v.work, Dir: v.root, Grace: 300 * time.Millisecond}
}

// run runs script under sh in the view and returns its stdout, stderr and
// status; ready, when set, is called with the session once the script's
// first line of output arrived.
func (v view) run(t *testing.T, spec Spec, script string, ready func(*Session)) (string, string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	s := NewSession(spec)
	treetest.Must(t, s.Prepare(cmd))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	treetest.Must(t, err)
	treetest.Must(t, cmd.Start())
	var outb strings.Builder
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	outb.WriteString(first)
	if ready != nil {
		ready(s)
	}
	rest, _ := bufio.NewReader(r).ReadString(0)
	outb.WriteString(rest)
	_ = cmd.Wait() // the status is in ProcessState
	treetest.Must(t, s.Finish())
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	st := ws.ExitStatus()
	if ws.Signaled() {
		st = 128 + int(ws.Signal())
	}
	return outb.String(), errb.String(), st
}

// TestHelperMountsTheView: the command sees the tree at the root's own
// path, its changes land in the upper layer only, and the store is not
// there for it to see or erase.
func TestHelperMountsTheView(t *testing.T) {
	v := newView(t)
	before := treetest.Capture(t, v.root)
	out, errs, st := v.run(t, v.spec(), `echo start; cat a; echo more >> a; echo new > b; rm d/x
ls -A; test -e .snapback && echo STORE-SEEN; rm -rf .snapback; exit 3`, nil)
	if st != 3 {
		t.Fatalf("status %d, want 3 (the command's); stderr %q", st, errs)
	}
	if want := "start\nold\na\nb\nd\n"; out != want {
		t.Errorf("the command saw %q, want %q", out, want)
	}
	treetest.Equal(t, "the real tree after a run in its view", before, treetest.Capture(t, v.root))
	if b, err := os.ReadFile(filepath.Join(v.upper, "a")); err != nil || string(b) != "old\nmore\n" {
		t.Errorf("upper a: %q %v, want the edit", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(v.upper, "b")); err != nil || string(b) != "new\n" {
		t.Errorf("upper b: %q %v", b, err)
	}
	var st2 unix.Stat_t
	if err := unix.Lstat(filepath.Join(v.upper, "d", "x"), &st2); err != nil || st2.Mode&unix.S_IFMT != unix.S_IFCHR || st2.Rdev != 0 {
		t.Errorf("upper d/x: %v mode %o rdev %d, want the whiteout of the delete", err, st2.Mode, st2.Rdev)
	}
	if _, err := os.Stat(filepath.Join(v.root, layout.StoreDir, "secret")); err != nil {
		t.Errorf("the store after rm -rf in the view: %v", err)
	}
}

// TestHelperIsInit: the command is the first child of an init that is PID
// 1 of a namespace holding only the run's processes.
func TestHelperIsInit(t *testing.T) {
	v := newView(t)
	out, errs, st := v.run(t, v.spec(), `echo pid=$$ ppid=$PPID
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n
tr '\0' ' ' < /proc/1/cmdline; echo`, nil)
	if st != 0 {
		t.Fatalf("status %d; stderr %q", st, errs)
	}
	lines := strings.SplitN(out, "\n", 3)
	if len(lines) != 3 {
		t.Fatalf("output %q", out)
	}
	// PIDs count the init's threads too: the command's is not 2.
	if !strings.HasSuffix(lines[0], " ppid=1") {
		t.Errorf("the command is %q, want the child of PID 1", lines[0])
	}
	if lines[1] != "procs=2" {
		t.Errorf("%s: the namespace shows processes besides the init and the shell", lines[1])
	}
	if !strings.HasPrefix(lines[2], "snapback "+HelperVerb+" ") {
		t.Errorf("PID 1 is %q, want the helper", lines[2])
	}
}

// TestHelperDescriptors: a descriptor the caller passes on (a shell's
// `3>log`) reaches the command; one that leads around the view (any
// directory, anything in the store) does not.
func TestHelperDescriptors(t *testing.T) {
	v := newView(t)
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	treetest.Must(t, err)
	defer log.Close()
	dir, err := os.Open(v.root)
	treetest.Must(t, err)
	defer dir.Close()
	secret, err := os.Open(filepath.Join(v.root, layout.StoreDir, "secret"))
	treetest.Must(t, err)
	defer secret.Close()
	fds := map[string]int{}
	for name, f := range map[string]*os.File{"log": log, "dir": dir, "store": secret} {
		fd, err := Pass(f)
		treetest.Must(t, err)
		fds[name] = fd
		defer unix.CloseOnExec(fd)
	}
	out, errs, st := v.run(t, v.spec(), `echo fds; ls /proc/$$/fd`, nil)
	if st != 0 {
		t.Fatalf("status %d; stderr %q", st, errs)
	}
	open := map[int]bool{}
	for _, f := range strings.Fields(strings.TrimPrefix(out, "fds\n")) {
		n, err := strconv.Atoi(f)
		treetest.Must(t, err)
		open[n] = true
	}
	if !open[fds["log"]] {
		t.Errorf("descriptor %d (a log file passed on) did not reach the command: %v", fds["log"], open)
	}
	for _, name := range []string{"dir", "store"} {
		if open[fds[name]] {
			t.Errorf("descriptor %d (%s) reached the command: it leads around the view", fds[name], name)
		}
	}
}

// TestHelperSignalsAndStatus: a forwarded signal reaches the command, the
// status is the command's (128+N when a signal killed it; 127 for a
// command not found), and what it left running is ended after the grace.
func TestHelperSignalsAndStatus(t *testing.T) {
	v := newView(t)
	_, errs, st := v.run(t, v.spec(), `trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done`,
		func(s *Session) { treetest.Must(t, s.Signal(syscall.SIGTERM)) })
	if st != 7 {
		t.Errorf("after a forwarded SIGTERM: status %d, want the trap's 7; stderr %q", st, errs)
	}
	if _, _, st := v.run(t, v.spec(), `echo x; kill -KILL $$`, nil); st != 128+9 {
		t.Errorf("a command killed by SIGKILL: status %d, want 137", st)
	}
	start := time.Now()
	_, errs, st = v.run(t, v.spec(), `sleep 30 & echo left`, nil)
	// (The name may be sh's still: the child may not have exec'd sleep yet.)
	if st != 0 || !regexp.MustCompile(`left 1 process \(\w+\) running(.|\n)*ended 1 process`).MatchString(errs) {
		t.Errorf("a command leaving a process: status %d, stderr %q", st, errs)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the init took %v to end what was left (grace 300ms)", d)
	}
	cmd := exec.Command(filepath.Join(v.root, "no-such-command"))
	s := NewSession(v.spec())
	treetest.Must(t, s.Prepare(cmd))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	_ = cmd.Run() // the status is in ProcessState
	treetest.Must(t, s.Finish())
	if st := cmd.ProcessState.ExitCode(); st != 127 || !strings.Contains(errb.String(), "no such file") {
		t.Errorf("a command not found: status %d, stderr %q; want 127", st, errb.String())
	}
}
