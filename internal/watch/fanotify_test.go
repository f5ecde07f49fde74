//go:build linux

package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// fanWatcher starts a watcher of a fresh tree and waits until it vouches
// and tells writers; the test fails or skips (SNAPBACK_REQUIRE names
// fanotify) where it cannot.
func fanWatcher(t *testing.T) (root, store string, tok Token) {
	t.Helper()
	t.Setenv("SNAPBACK_WATCH_IDLE", "1m")
	base := t.TempDir()
	root, store = filepath.Join(base, "project"), filepath.Join(base, "store")
	treetest.Must(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
	treetest.Must(t, os.MkdirAll(store, 0o700))
	treetest.Must(t, Start(root, store))
	t.Cleanup(func() { Stop(store) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		tok, err = Mark(store)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher does not vouch: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	on, why, err := WriterStatus(store)
	treetest.Must(t, err)
	if !treetest.Require(t, "fanotify", on, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fanotify: " + why)
	}
	return root, store, tok
}

// agentProc starts script in sh as an agent would run it, and returns
// it with its Proc; it is killed at the test's end.
func agentProc(t *testing.T, dir, script string) (*exec.Cmd, Proc) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	treetest.Must(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // with what it started
		cmd.Wait()
	})
	p, _, err := procStat(cmd.Process.Pid)
	treetest.Must(t, err)
	return cmd, p
}

// waitFile waits until p exists (a script's last write).
func waitFile(t *testing.T, p string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came", p)
		}
	}
}

// The watcher tells which agent's process tree wrote each path: the
// agent itself or its descendants; a write by another process, or by
// both, says so; a directory that came is not told below it.
func TestWrittenBy(t *testing.T) {
	root, store, tok := fanWatcher(t)
	// A writes through a child (a shell command's process), B itself;
	// both write both.txt; A makes a directory and a file in it.
	_, a := agentProc(t, root, `sh -c 'echo a > a.txt; echo a >> both.txt; mkdir new; echo x > new/f; echo >> d/a2; : > a.done; exec sleep 60' & wait`)
	waitFile(t, filepath.Join(root, "a.done"))
	_, b := agentProc(t, root, `echo b > b.txt; echo b >> both.txt; : > b.done; exec sleep 60`)
	waitFile(t, filepath.Join(root, "b.done"))
	treetest.Write(t, root, "other.txt", "o", 0o644) // this process's: neither's
	got, err := WrittenBy(store, tok, PidNS(), []Proc{a, b})
	treetest.Must(t, err)
	want := map[string][]int{
		"a.txt": {0}, "d/a2": {0}, "a.done": {0}, "b.txt": {1}, "b.done": {1},
		"both.txt": {0, 1}, "other.txt": {-1}, "new": {-1},
		"d": {0}, "": {-1, 0, 1},
	}
	for p, w := range want {
		g := slices.Clone(got[p])
		slices.Sort(g)
		if !slices.Equal(g, w) {
			t.Errorf("%q: writers %v, want %v", p, got[p], w)
		}
	}
	// A token of before: the same; of now: nothing changed.
	now, err := Mark(store)
	treetest.Must(t, err)
	if got, err := WrittenBy(store, now, PidNS(), []Proc{a, b}); err != nil || len(got) != 0 {
		t.Errorf("writers since now: %v, %v", got, err)
	}
}

// A writer gone before the watcher read its event is not known: the
// watcher is stopped (SIGSTOP) while an agent's child writes and exits.
func TestWrittenByGone(t *testing.T) {
	root, store, tok := fanWatcher(t)
	_, a := agentProc(t, root, `exec sleep 60`)
	w := Pid(store)
	treetest.Stop(t, w)
	cont := func() { syscall.Kill(w, syscall.SIGCONT) }
	defer cont()
	// Gone and reaped before the watcher reads its events: its pid
	// names nothing (or another process) by then.
	cmd := exec.Command("sh", "-c", "echo x > gone.txt")
	cmd.Dir = root
	treetest.Must(t, cmd.Run())
	cont()
	got, err := WrittenBy(store, tok, PidNS(), []Proc{a})
	treetest.Must(t, err)
	if !slices.Equal(got["gone.txt"], []int{-1}) {
		t.Errorf("gone.txt: writers %v, want unknown", got["gone.txt"])
	}
	// Another pid namespace's agents are not told.
	var nv *NotVouchedError
	if _, err := WrittenBy(store, tok, PidNS()+1, []Proc{a}); !errors.As(err, &nv) {
		t.Errorf("another namespace: %v", err)
	}
}

// A gone writer is told from its exit only when one exit of its id is
// known after the time asked: two (an id taken again) or exits lost are
// not known; an exit is forgotten once the fanotify queue was empty
// after it.
func TestExitsTakenAgain(t *testing.T) {
	x := &exits{byPid: map[int][]exitRec{100: {{at: 10, parent: 7}}}}
	if e, n := x.exitOf(100, 0); n != 1 || e.parent != 7 {
		t.Errorf("one exit: %v %v", e, n)
	}
	x.byPid[100] = append(x.byPid[100], exitRec{at: 20, parent: 8})
	if e, n := x.exitOf(100, 0); n != 2 {
		t.Errorf("two exits of one id: %v, %d, want 2 (not known)", e, n)
	}
	if e, n := x.exitOf(100, 15); n != 1 || e.parent != 8 {
		t.Errorf("the exit after 15: %v %v", e, n)
	}
	x.evict(15)
	if e, n := x.exitOf(100, 0); n != 1 || e.parent != 8 {
		t.Errorf("after the queue was empty at 15: %v %v", e, n)
	}
	x.lost, x.lostAt = true, 30
	if _, n := x.exitOf(100, 0); n != 0 {
		t.Error("exits lost: told")
	}
	x.evict(25)
	if _, n := x.exitOf(100, 0); n != 0 {
		t.Error("exits lost, the queue not empty since: told")
	}
	x.evict(31)
	if _, n := x.exitOf(100, 0); n != 0 {
		t.Error("an exit forgotten: told")
	}
	if x.lost {
		t.Error("still lost after the queue was empty since")
	}
}

// connectorExit is the process connector's message of pid's exit, its
// parent then ppid, at the monotonic time at.
func connectorExit(pid, ppid int, at uint64) []byte {
	m := make([]byte, unix.SizeofNlMsghdr+cnMsgLen+16+24)
	binary.LittleEndian.PutUint32(m[0:], uint32(len(m)))
	c := m[unix.SizeofNlMsghdr:]
	binary.LittleEndian.PutUint32(c[0:], cnIdxProc)
	binary.LittleEndian.PutUint32(c[4:], cnValProc)
	binary.LittleEndian.PutUint16(c[16:], 16+24)
	ev := c[cnMsgLen:]
	binary.LittleEndian.PutUint32(ev[0:], procEventExit)
	binary.LittleEndian.PutUint64(ev[8:], at)
	d := ev[16:]
	binary.LittleEndian.PutUint32(d[0:], uint32(pid))
	binary.LittleEndian.PutUint32(d[4:], uint32(pid))
	binary.LittleEndian.PutUint32(d[16:], uint32(ppid))
	binary.LittleEndian.PutUint32(d[20:], uint32(ppid))
	return m
}

// A process tells its exit after its parent was told (which may have
// reaped it): a writer gone whose exit is not told yet is waited for, and
// told from it; one whose exit never comes is not known, after exitWait.
func TestGoneExitToldLate(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	treetest.Must(t, err)
	defer unix.Close(fds[1])
	x := &exits{fd: fds[0], byPid: map[int][]exitRec{}}
	defer x.close()
	rv := &resolver{byIno: map[uint64]*lineage{}, exits: x}
	const pid = 1 << 30 // no process's
	go func() {
		time.Sleep(50 * time.Millisecond)
		unix.Write(fds[1], connectorExit(pid, os.Getpid(), monoNow()))
	}()
	l := rv.gone(pid)
	self, _, err := procStat(os.Getpid())
	treetest.Must(t, err)
	if l == nil || len(*l) < 2 || (*l)[0] != (Proc{Pid: pid}) || (*l)[1] != self {
		t.Fatalf("a writer whose exit is told late: %v, want it, then this process", l)
	}
	rv.waitUntil = 0 // the next batch
	start := time.Now()
	if l := rv.gone(pid + 1); l != nil {
		t.Errorf("a writer whose exit is never told: %v, want not known", *l)
	}
	if d := time.Since(start); d < exitWait*time.Nanosecond || d > exitWait*time.Nanosecond+time.Second {
		t.Errorf("waited %v for an exit never told, want %v", d, exitWait*time.Nanosecond)
	}
	// Within one batch the wait is spent once.
	start = time.Now()
	if l := rv.gone(pid + 2); l != nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a second exit never told in the batch: %v after %v, want not known at once", l, time.Since(start))
	}
}

// An ancestor that started after its child is a later process that took
// its id: the lineage is not known.
func TestAncestryTakenAgain(t *testing.T) {
	self, ppid, err := procStat(os.Getpid())
	treetest.Must(t, err)
	if l := ancestry(self, ppid); len(l) < 2 || l[0] != self || l[1].Pid != ppid {
		t.Errorf("this process's lineage: %v", l)
	}
	if l := ancestry(Proc{self.Pid, 1}, ppid); l != nil {
		t.Errorf("a parent started after its child: %v, want not known", l)
	}
}

// A hook's agent is its nearest ancestor that is not a shell; none where
// that is a terminal multiplexer's (a login's whole tree).
func TestAgent(t *testing.T) {
	self, err := os.Executable()
	treetest.Must(t, err)
	sh, err := exec.LookPath("sh")
	treetest.Must(t, err)
	b, err := os.ReadFile(sh)
	treetest.Must(t, err)
	for name, agent := range map[string]bool{"claude": true, "tmux": false} {
		exe := filepath.Join(t.TempDir(), name)
		treetest.Must(t, os.WriteFile(exe, b, 0o755))
		// The agent runs the hook through sh, which stays (a second
		// command after it).
		cmd := exec.Command(exe, "-c", `echo $$; sh -c "$0; true"`, self)
		cmd.Env = append(os.Environ(), "WATCH_TEST_AGENT=1")
		out, err := cmd.Output()
		treetest.Must(t, err)
		var pid int
		var p Proc
		var ok bool
		if _, err := fmt.Sscanf(string(out), "%d\n%d:%d %t", &pid, &p.Pid, &p.Start, &ok); err != nil {
			t.Fatalf("%s: %q: %v", name, out, err)
		}
		if ok != agent || agent && p.Pid != pid {
			t.Errorf("agent under %s (pid %d): %v %v, want %v", name, pid, p, ok, agent)
		}
	}
}
