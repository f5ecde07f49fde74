//go:build linux

package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/snapback/snapback/internal/layout"
	"golang.org/x/sys/unix"
)

// forwarded are the signals snapback passes on (runner's list): the init
// and the fuse helper catch them, so that one sent to them directly (the
// terminal's ^C, a kill of the whole process group) neither kills them
// (Go's default) nor reaches the command twice.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Session is one overlayfs run as seen from snapback's own process:
// Prepare turns the runner's command into the helper, Signal forwards a
// signal to the command through the init's pipe, Finish (after the
// command ended) closes the pipe.
type Session struct {
	spec       Spec
	sigR, sigW *os.File
}

// NewSession makes a session for spec (Path is filled by Prepare).
func NewSession(spec Spec) *Session { return &Session{spec: spec} }

// Prepare makes cmd start the helper as the init of a new PID and mount
// namespace; the helper mounts the view, then runs the command as its
// child.
func (s *Session) Prepare(cmd *exec.Cmd) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("overlay: find snapback's own binary: %w", err)
	}
	spec := s.spec
	spec.Path = cmd.Path
	if spec.Dir == "" {
		spec.Dir = cmd.Dir
	}
	if spec.Signals, err = s.SignalPipe(cmd); err != nil {
		return err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	cmd.Args = append([]string{"snapback", HelperVerb, string(b), "--"}, cmd.Args...)
	cmd.Path = self
	cmd.Dir = "/" // the helper is no process of the tree: the view is entered by the command alone
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS | unix.CLONE_NEWPID
	if spec.UserNS {
		UserNS(cmd.SysProcAttr)
	}
	return nil
}

// SignalPipe makes the pipe through which Signal reaches the init, for
// the helper cmd will start; it returns the read end's descriptor there.
func (s *Session) SignalPipe(cmd *exec.Cmd) (int, error) {
	var err error
	if s.sigR, s.sigW, err = os.Pipe(); err != nil {
		return 0, fmt.Errorf("overlay: signal pipe: %w", err)
	}
	return Pass(s.sigR)
}

// Pass makes f reach the next process snapback starts at its own
// descriptor number, which it returns: exec.Cmd's ExtraFiles would put it
// on 3 and up, over the caller's own descriptors, which must reach the
// command at theirs (a shell's `3>log`). Only the helper is started
// between this and the session's end, which closes f.
func Pass(f *os.File) (int, error) {
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return 0, fmt.Errorf("pass descriptor %d: %w", fd, err)
	}
	return fd, nil
}

// Signal forwards sig to the command (through the init).
func (s *Session) Signal(sig os.Signal) error {
	n, ok := sig.(syscall.Signal)
	if !ok || s.sigW == nil || n <= 0 || n > 255 {
		return fmt.Errorf("overlay: cannot forward %v", sig)
	}
	_, err := s.sigW.Write([]byte{byte(n)})
	return err
}

// Finish closes the signal pipe; call it once the command has ended.
func (s *Session) Finish() error {
	if s.sigW != nil {
		s.sigR.Close()
		s.sigW.Close()
		s.sigR, s.sigW = nil, nil
	}
	return nil
}

// InitVerb is the hidden verb of the init that [StartInit] starts.
const InitVerb = "__overlay-init"

// StartInit runs the command under an init of its own in a new PID and
// mount namespace, from a helper that has mounted the view in its mount
// namespace (the fuse mode's, whose server must stay out of the PID
// namespace); it returns the command's shell-style status. spec.Signals
// is the pipe's descriptor here: the init gets it as its own.
func StartInit(spec Spec, argv []string) int {
	self, err := os.Executable()
	if err != nil {
		return failed(err)
	}
	// The helper stays in the terminal's process group, as the command
	// does: what reaches it directly is the command's already.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	go func() {
		for range sigs {
		}
	}()
	pipe := os.NewFile(uintptr(spec.Signals), "signals")
	if _, err := Pass(pipe); err != nil {
		return failed(err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return failed(err)
	}
	cmd := exec.Command(self, append([]string{InitVerb, string(b), "--"}, argv...)...)
	cmd.Args[0] = "snapback"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		return failed(fmt.Errorf("start the init: %w", err))
	}
	pipe.Close()
	_ = cmd.Wait() // the status is in ProcessState
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// Init is the main of the init started by [StartInit] (args follow
// InitVerb).
func Init(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		return failed(errors.New("init: bad arguments"))
	}
	var spec Spec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return failed(fmt.Errorf("init: %w", err))
	}
	return initRun(spec, args[2:])
}

func failed(err error) int {
	fmt.Fprintf(os.Stderr, "snapback: overlay: %v\n", err)
	return 125
}

// initRun is PID 1 of the run's PID namespace, in a mount namespace where
// the view is mounted: it mounts the namespace's own /proc, closes what
// must not reach the command, starts the command as its child, forwards
// the signals snapback sends through the pipe, reaps every orphan and
// returns the command's status, as a shell reports it, once no other
// process of the run is left (see [leftBehind]).
func initRun(spec Spec, argv []string) int {
	// /proc shows this namespace's processes only: snapback, its working
	// directory and descriptors are out of reach.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return failed(fmt.Errorf("mount /proc of the run's PID namespace: %w", err))
	}
	if spec.Signals < 3 {
		return failed(errors.New("init: no signal pipe"))
	}
	unix.CloseOnExec(spec.Signals)
	pipe := os.NewFile(uintptr(spec.Signals), "signals")
	keep := []int{spec.Signals}
	if spec.Lock > 2 {
		// Held, not passed on: the run's lock lives as long as this init,
		// which outlives every process of the run.
		unix.CloseOnExec(spec.Lock)
		keep = append(keep, spec.Lock)
	}
	stores := []string{filepath.Join(spec.Root, layout.StoreDir)}
	if spec.Store != "" {
		if err := hideOutsideStore(spec.Store); err != nil {
			return failed(err)
		}
		stores = append(stores, spec.Store)
	}
	if spec.Cover != "" {
		if err := hideOutsideStore(spec.Cover); err != nil {
			return failed(err)
		}
	}
	if err := closeReaching(stores, keep); err != nil {
		return failed(err)
	}
	// An ordinary user's command runs with the caller's identity and no
	// capabilities: without ambient ones, a non-root exec keeps none.
	// Capabilities are a thread's: the command is started from this one.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return failed(fmt.Errorf("drop capabilities: %w", err))
	}
	// Caught before the start: as PID 1 the init would ignore them anyway
	// (the kernel drops default-handled signals to a namespace's init),
	// but Go's handler would end it.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	go func() {
		for range sigs {
		}
	}()
	proc, err := os.StartProcess(spec.Path, argv, &os.ProcAttr{Dir: spec.Dir, Env: os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "chdir" {
		return failed(fmt.Errorf("enter %s in the view: %w", spec.Dir, pe.Err))
	}
	if err != nil {
		st := 126
		if errors.Is(err, os.ErrNotExist) {
			st = 127
		}
		fmt.Fprintf(os.Stderr, "snapback: %s: %v\n", argv[0], unwrapPath(err))
		return st
	}
	var exited atomic.Bool
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := pipe.Read(b); err != nil {
				return // snapback is gone: the command runs on unsignalled
			}
			if exited.Load() {
				// What the command left behind gets it instead (-1: every
				// process of the namespace but this init).
				_ = unix.Kill(-1, syscall.Signal(b[0])) // none may be left
				continue
			}
			_ = proc.Signal(syscall.Signal(b[0])) // it may have just exited
		}
	}()
	status := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return failed(fmt.Errorf("wait for the command: %w", err))
		}
		if pid != proc.Pid {
			continue // an orphan the init inherited
		}
		status = ws.ExitStatus()
		if ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
		break
	}
	exited.Store(true)
	leftBehind(spec.Grace)
	return status
}

// leftBehind waits up to grace for the processes the command left
// running (every one of them is this init's child by now, or a child's),
// then kills those still there, and returns once none is left: only then
// may the run's layer be committed or discarded. It says what it does on
// stderr, since the user's background job is at stake.
func leftBehind(grace time.Duration) {
	if reap() {
		return
	}
	n, procs := describeProcs()
	them := "them"
	if n == 1 {
		them = "it"
	}
	fmt.Fprintf(os.Stderr, "snapback: the command left %s running; waiting up to %s for %s to exit\n", procs, grace, them)
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if reap() {
			return
		}
	}
	_, left := describeProcs()
	_ = unix.Kill(-1, unix.SIGKILL) // every process of the namespace but this init
	for {
		_, err := unix.Wait4(-1, nil, 0, nil)
		if err == unix.ECHILD {
			break
		}
		if err != nil && err != unix.EINTR {
			fmt.Fprintf(os.Stderr, "snapback: overlay: wait for the processes left behind: %v\n", err)
			break
		}
	}
	fmt.Fprintf(os.Stderr, "snapback: ended %s, still running %s after the command exited\n", left, grace)
}

// reap reaps what has exited and reports whether no process is left but
// this init.
func reap() bool {
	for {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		switch {
		case err == unix.ECHILD:
			return true
		case err == unix.EINTR:
		case err != nil || pid == 0:
			return false
		}
	}
}

// describeProcs names the processes of the namespace but this init: "2
// processes (sleep, sh)", with their number.
func describeProcs() (int, string) {
	ents, _ := os.ReadDir("/proc") // this namespace's own /proc; empty if unreadable
	var names []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue // gone meanwhile
		}
		names = append(names, strings.TrimSpace(string(comm)))
	}
	n := len(names)
	if len(names) > 5 {
		names = append(names[:5], "…")
	}
	word := "processes"
	if n == 1 {
		word = "process"
	}
	return n, fmt.Sprintf("%d %s (%s)", n, word, strings.Join(names, ", "))
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// hideOutsideStore covers a store outside the tree, in this mount
// namespace only, with an empty tmpfs mounted read-only and mode 0: the
// view has no store in it, and its path leads nowhere. The layers of the
// view (in the store) stay reachable to the mount made before, and to
// the fuse server in its own namespace.
func hideOutsideStore(store string) error {
	if err := unix.Mount("snapback-store", store, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=000"); err != nil {
		return fmt.Errorf("hide the store %s from the command: %w", store, err)
	}
	return nil
}

// closeReaching closes this process's descriptors that would lead the
// command around the view: every directory (openat and /proc/self/fd/N
// walk from it into the real tree, whatever it is, `..` included), and
// anything in a store. The terminal, pipes and files elsewhere pass on
// as before; a directory on 0, 1 or 2 (unusable for I/O anyway) becomes
// /dev/null. keep are the init's own: its pipe and the run's lock.
func closeReaching(stores []string, keep []int) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(keep, fd) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue // ReadDir's own, closed since
		}
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		inStore := slices.ContainsFunc(stores, func(s string) bool { return target == s || strings.HasPrefix(target, s+"/") })
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && !inStore {
			continue
		}
		if fd > 2 {
			unix.Close(fd)
			continue
		}
		null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("replace descriptor %d: %w", fd, err)
		}
		err = unix.Dup3(null, fd, 0)
		unix.Close(null)
		if err != nil {
			return fmt.Errorf("replace descriptor %d: %w", fd, err)
		}
	}
	return nil
}
