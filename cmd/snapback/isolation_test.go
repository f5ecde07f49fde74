//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"golang.org/x/sys/unix"
)

// isoRun is a project with one snapshot, and the real binary to run
// there as root or as the ordinary user testUser.
type isoRun struct {
	bin, root, mode string
	out             string // a directory outside the project the command may write
	cred            *syscall.Credential
	flags           []string // more flags of run
}

// eachIsolation runs f for each overlay mode, as root and as testUser.
func eachIsolation(t *testing.T, f func(t *testing.T, r isoRun)) {
	for _, mode := range []string{"overlayfs", "fuse"} {
		for _, who := range []string{"root", testUser} {
			t.Run(mode+"/"+who, func(t *testing.T) {
				r := isolationSetup(t, mode, who)
				f(t, r)
			})
		}
	}
}

func isolationSetup(t *testing.T, mode, who string) isoRun {
	t.Helper()
	if os.Geteuid() != 0 {
		// Both overlay modes need root in the tests (as root, and to switch
		// to the ordinary user).
		if !treetest.Require(t, mode, false, "the tests do not run as root") {
			t.Skip("SNAPBACK_REQUIRE does not name " + mode + ": not root")
		}
	}
	switch mode {
	case "overlayfs":
		ok, why := overlay.Available()
		if !treetest.Require(t, mode, ok, why) {
			t.Skip("SNAPBACK_REQUIRE does not name overlayfs: " + why)
		}
	case "fuse":
		ok, why := fuse.Available()
		if !treetest.Require(t, mode, ok, why) {
			t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
		}
	}
	r := isoRun{bin: snapbackBinary(t), mode: mode}
	treetest.Must(t, os.Chmod(filepath.Dir(r.bin), 0o755))
	base := userTempDir(t, "snapback-iso-")
	r.root, r.out = filepath.Join(base, "p"), filepath.Join(base, "out")
	treetest.Write(t, r.root, "a", "a\n", 0o644)
	treetest.Must(t, os.Mkdir(r.out, 0o777))
	treetest.Must(t, os.Chmod(r.out, 0o777))
	if who != "root" {
		r.cred, _ = ordinaryUser(t)
		filepath.Walk(r.root, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, int(r.cred.Uid), int(r.cred.Gid)) })
		// A user's doctor tries the real thing: no offer, no test.
		out, err := r.command("doctor", "--json").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"name": "`+mode+`",
      "available": true`) {
			why := fmt.Sprintf("doctor as %s does not offer %s: %v\n%s", testUser, mode, err, out)
			if !treetest.Require(t, "userns", false, why) {
				t.Skip("SNAPBACK_REQUIRE does not name userns: " + why)
			}
		}
	}
	if out, err := r.command("snap", "-m", "base").CombinedOutput(); err != nil {
		t.Fatalf("snap: %v\n%s", err, out)
	}
	return r
}

// command is snapback with args, in the project, as the case's user.
func (r isoRun) command(args ...string) *exec.Cmd {
	cmd := exec.Command(r.bin, append([]string{"-C", r.root}, args...)...)
	cmd.Dir = r.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	return cmd
}

// run runs script in the mode and returns its output and exit status.
func (r isoRun) run(t *testing.T, script string, extra ...*os.File) (string, int) {
	t.Helper()
	args := append([]string{"run", "--mode", r.mode, "--then", "discard"}, r.flags...)
	cmd := r.command(append(args, "--", "sh", "-c", script)...)
	// A file, not a pipe: a process the run left behind must not keep
	// the test waiting for the pipe's end.
	out, err := os.CreateTemp(t.TempDir(), "out")
	treetest.Must(t, err)
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = extra
	cmd.Env = append(os.Environ(), "ROOT="+r.root, "OUT="+r.out)
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out.Name())
	treetest.Must(t, err)
	return string(b), cmd.ProcessState.ExitCode()
}

func (r isoRun) snapshots(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(r.root, ".snapback", "snapshots"))
	treetest.Must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestRunCannotReachStore: a command that goes looking for the real tree
// through /proc (the parent's working directory, every process's cwd,
// root and descriptors) or through a directory descriptor its caller
// passed finds neither the tree nor the store, and the undo history
// survives its rm -rf.
func TestRunCannotReachStore(t *testing.T) {
	eachIsolation(t, func(t *testing.T, r isoRun) {
		before := r.snapshots(t)
		dirTree, err := os.Open(r.root)
		treetest.Must(t, err)
		defer dirTree.Close()
		dirSlash, err := os.Open("/")
		treetest.Must(t, err)
		defer dirSlash.Close()
		// Descriptors 3 and 4 (a shell's `exec 3< . 4< /`).
		out, st := r.run(t, `
rm -f /proc/$PPID/cwd/.snapback/snapshots/*
for x in /proc/$PPID/cwd /proc/self/fd/3 /proc/self/fd/4$ROOT /proc/[0-9]*/cwd /proc/[0-9]*/root$ROOT /proc/[0-9]*/fd/*; do
	for y in "$x" "$x$ROOT"; do
		if [ -d "$y/.snapback/snapshots" ]; then echo "REACH""ED $y"; rm -rf "$y/.snapback/snapshots"; fi
		if [ -e "$y/.snapback/lock" ]; then echo "REACH""ED $y"; fi
	done
done
[ -d /proc/self/fd/3 ] && echo "descriptor 3 PASS""ED"
echo "pids: $(ls /proc | grep '^[0-9]' | tr '\n' ' ')"
echo "pid1: $(tr '\0' ' ' < /proc/1/cmdline)"
`, dirTree, dirSlash)
		if st != 0 {
			t.Fatalf("run: status %d\n%s", st, out)
		}
		if strings.Contains(out, "REACHED") || strings.Contains(out, "PASSED") {
			t.Errorf("the command reached the real tree:\n%s", out)
		}
		if after := r.snapshots(t); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("snapshots %v, after the run %v", before, after)
		}
		// Only the run's own processes: its init (PID 1) and the command's.
		pids := strings.Fields(between(out, "pids: ", "\n"))
		if len(pids) == 0 || len(pids) > 8 {
			t.Errorf("the command sees processes %v, want only the run's few", pids)
		}
		if pid1 := between(out, "pid1: ", "\n"); !strings.Contains(pid1, "__overlay-") {
			t.Errorf("PID 1 in the run is %q, want snapback's init", pid1)
		}
		if out, err := r.command("list").CombinedOutput(); err != nil || !strings.Contains(string(out), "base") {
			t.Errorf("list after the run: %v\n%s", err, out)
		}
	})
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		s = s[:j]
	}
	return s
}

// TestRunEndsBackgroundProcesses: what the command leaves running is
// ended when it exits.
func TestRunEndsBackgroundProcesses(t *testing.T) {
	n := 0
	eachIsolation(t, func(t *testing.T, r isoRun) {
		n++
		// A duration no other process uses, to find it by.
		marker := fmt.Sprintf("%d.%d", 4000+n, os.Getpid()%1000)
		t.Cleanup(func() {
			for _, pid := range sleepers(marker) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		r.flags = []string{"--grace", "200ms"} // they outlive it: ended, not waited for
		out, st := r.run(t, `sleep `+marker+` & (sleep `+marker+` &) ; echo started`)
		if st != 0 || !strings.Contains(out, "started") {
			t.Fatalf("run: status %d\n%s", st, out)
		}
		if !strings.Contains(out, "snapback: ended 2 processes (sleep, sleep), still running 200ms after the command exited") {
			t.Errorf("run did not say which processes it ended:\n%s", out)
		}
		if pids := sleepers(marker); len(pids) != 0 {
			t.Errorf("background processes left running after the run: %v", pids)
		}
	})
}

// sleepers are the processes running `sleep marker`.
func sleepers(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			pid, _ := strconv.Atoi(e.Name())
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunSignalsAndStatus: the command's status is snapback's (128+N for
// a signal); a signal sent to snapback reaches the command once it is
// forwarded, and one sent to snapback's whole process group (as a
// terminal sends ^C) neither ends the run's init nor its helper early.
func TestRunSignalsAndStatus(t *testing.T) {
	eachIsolation(t, func(t *testing.T, r isoRun) {
		for _, c := range []struct {
			script string
			want   int
		}{
			{"exit 3", 3},
			{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
			{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
			// The init ignores what the command sends it.
			{"kill -TERM 1; kill -INT 1; kill -KILL 1; exit 5", 5},
		} {
			if out, st := r.run(t, c.script); st != c.want {
				t.Errorf("%q: status %d, want %d\n%s", c.script, st, c.want, out)
			}
		}
		for _, c := range []struct {
			sig   syscall.Signal
			group bool
		}{
			{syscall.SIGTERM, false},
			{syscall.SIGINT, false}, // no terminal here: forwarded
			{syscall.SIGHUP, false},
			{syscall.SIGINT, true},
			{syscall.SIGTERM, true},
		} {
			name := fmt.Sprintf("%v group=%v", c.sig, c.group)
			ready := filepath.Join(r.out, "ready")
			os.Remove(ready)
			trapped := filepath.Join(r.out, "trapped")
			os.Remove(trapped)
			cmd := r.command("run", "--mode", r.mode, "--then", "discard", "--", "sh", "-c",
				`trap 'echo x >> `+trapped+`; sleep 0.3; exit 42' `+shellSignal(c.sig)+`; touch `+ready+`; while :; do sleep 0.02; done`)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.SysProcAttr.Setpgid = true
			treetest.Must(t, cmd.Start())
			for i := 0; ; i++ {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if i == 500 {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("%s: the command never started\n%s", name, out.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			pid := cmd.Process.Pid
			if c.group {
				pid = -pid
			}
			treetest.Must(t, syscall.Kill(pid, c.sig))
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 42 {
				t.Errorf("%s: snapback ended with %v, want status 42 from the command's trap\n%s", name, err, out.String())
			}
		}
	})
}

// shellSignal is the shell's name of a signal.
func shellSignal(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGHUP:
		return "HUP"
	}
	return strconv.Itoa(int(s))
}

// TestRunTerminalInterrupt: at a terminal, the command is in the
// foreground process group: ^C reaches it, and neither snapback nor the
// run's init (nor the fuse helper) ends because of it. (A second copy
// forwarded at once would be merged with the first by the kernel: that
// snapback does not forward it is runner's rule, not checked here.)
func TestRunTerminalInterrupt(t *testing.T) {
	eachIsolation(t, func(t *testing.T, r isoRun) {
		master, tty := openPTY(t)
		ready, goOn, ints := filepath.Join(r.out, "ready"), filepath.Join(r.out, "go"), filepath.Join(r.out, "ints")
		cmd := r.command("run", "--mode", r.mode, "--then", "discard", "--", "sh", "-c",
			`trap 'echo int >> `+ints+`' INT; touch `+ready+`; while [ ! -e `+goOn+` ]; do sleep 0.05; done; exit 7`)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		var out bytes.Buffer
		copied := make(chan struct{})
		go func() { out.ReadFrom(master); close(copied) }()
		treetest.Must(t, cmd.Start())
		tty.Close()
		for i := 0; ; i++ {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if i == 500 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the command never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, err := master.Write([]byte{3}) // ^C
		treetest.Must(t, err)
		time.Sleep(500 * time.Millisecond)
		treetest.Must(t, os.WriteFile(goOn, nil, 0o644))
		err = cmd.Wait()
		master.Close()
		<-copied
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("snapback ended with %v, want the command's status 7\n%s", err, out.String())
		}
		if b, _ := os.ReadFile(ints); string(b) != "int\n" {
			t.Errorf("the command's trap ran %q, want once", b)
		}
	})
}

// openPTY opens a pseudo-terminal: its master and its terminal side.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	treetest.Must(t, err)
	t.Cleanup(func() { master.Close() })
	treetest.Must(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	treetest.Must(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	treetest.Must(t, err)
	return master, tty
}
