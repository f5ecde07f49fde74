//go:build linux

package fuse

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay"
	"golang.org/x/sys/unix"
)

// Available reports whether fuse runs can work here, and why not.
func Available() (bool, string) {
	st, err := os.Stat("/dev/fuse")
	if err != nil {
		return false, "/dev/fuse is missing (modprobe fuse; in a container: --device /dev/fuse)"
	}
	if st.Mode()&os.ModeCharDevice == 0 {
		return false, "/dev/fuse is not a character device"
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		why := "cannot open /dev/fuse: " + err.Error()
		if os.Geteuid() != 0 && errors.Is(err, os.ErrPermission) {
			why += " (most distributions make it mode 0666 so that ordinary users can mount)"
		}
		return false, why
	}
	f.Close()
	return true, ""
}

// Mount serves the merged view of lower and upper at mnt from this
// process (for tests and tools: the process must then never enter mnt in
// a way that blocks the server, see the package doc), through io_uring
// where the kernel offers it (uring_linux.go). Unmount with the
// returned view's Unmount. The process's umask becomes 0, as the
// server's (see Serve).
func Mount(lower, upper, work, mnt string) (*Mounted, error) {
	unix.Umask(0)
	root, err := newRoot(lower, upper, work)
	if err != nil {
		return nil, err
	}
	opts := options()
	dev, err := mountDirect(mnt, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	ring := prepareRing(dev, &opts.MountOptions)
	raw := newRawFS(root, opts)
	srv, err := gofuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", dev), &opts.MountOptions)
	if err != nil {
		unix.Unmount(mnt, unix.MNT_DETACH)
		return nil, err
	}
	m := &Mounted{Server: srv, mnt: mnt, root: root}
	if startRing(ring, srv, raw, &opts.MountOptions) {
		m.ring = ring
	}
	go srv.Serve()
	if err := pollHack(mnt); err != nil {
		m.Unmount()
		return nil, err
	}
	return m, nil
}

// Session is one fuse run as seen from snapback's own process: Prepare
// turns the runner's command into the exec helper, Finish (after the
// command ended) stops the server and waits until it is gone, so the
// upper layer is complete and still.
type Session struct {
	spec           overlay.Spec
	signals        overlay.Session // only its signal pipe
	aliveR, aliveW *os.File
	doneR, doneW   *os.File
	prepared       bool
	finishTimeout  time.Duration
	kept           *keptRun // the project's kept view (keep_linux.go), or nil
}

// NewSession makes a session for spec (Path and Dir are filled by Prepare
// and by the caller).
func NewSession(spec overlay.Spec) *Session {
	return &Session{spec: spec, finishTimeout: 30 * time.Second}
}

// helperArgs is what the exec helper and the server are told.
type helperArgs struct {
	overlay.Spec
	Alive int `json:"alive"`           // read end: EOF when snapback is done with the run
	Done  int `json:"done"`            // write end: the server holds it until it exits
	Mount int `json:"mount,omitempty"` // a kept view's mount to attach (no server of the run's own)
}

// Prepare makes cmd start the exec helper in a new mount namespace.
func (s *Session) Prepare(cmd *exec.Cmd) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fuse: find snapback's own binary: %w", err)
	}
	if s.aliveR, s.aliveW, err = os.Pipe(); err != nil {
		return err
	}
	if s.doneR, s.doneW, err = os.Pipe(); err != nil {
		return err
	}
	s.prepared = true
	a := helperArgs{Spec: s.spec}
	a.Path = cmd.Path
	if a.Alive, err = overlay.Pass(s.aliveR); err != nil {
		return err
	}
	if a.Done, err = overlay.Pass(s.doneW); err != nil {
		return err
	}
	if a.Signals, err = s.signals.SignalPipe(cmd); err != nil {
		return err
	}
	var why string
	if s.kept, why = beginKept(s.spec.Root, s.spec.Upper, s.spec.Work); s.kept != nil {
		if a.Mount, err = overlay.Pass(s.kept.mnt); err != nil {
			return err
		}
	} else if why != "" {
		fmt.Fprintf(os.Stderr, "snapback: fuse: no kept view (%s): a fresh one\n", why)
	}
	if a.Dir == "" {
		a.Dir = cmd.Dir
	}
	cmd.Dir = "/" // the helper is no process of the tree: the view is entered by the command alone
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	cmd.Args = append([]string{"snapback", ExecVerb, string(b), "--"}, cmd.Args...)
	cmd.Path = self
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS
	if os.Geteuid() != 0 {
		// An ordinary user mounts FUSE in a user namespace of its own that
		// maps only its own ids, as the overlayfs mode does.
		overlay.UserNS(cmd.SysProcAttr)
	}
	// The server is orphaned on purpose (the command must not be its
	// parent): as a subreaper, snapback inherits and reaps it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("fuse: become a subreaper: %w", err)
	}
	return nil
}

// Signal forwards sig to the command (through its init).
func (s *Session) Signal(sig os.Signal) error { return s.signals.Signal(sig) }

// Finish stops the server (if it still runs) and waits for it to exit.
// Call it once the command has ended, before reading the upper layer.
func (s *Session) Finish() error {
	if !s.prepared {
		return nil
	}
	s.prepared = false
	s.signals.Finish()
	if s.kept != nil {
		s.aliveR.Close()
		s.aliveW.Close()
		s.doneR.Close()
		s.doneW.Close()
		return s.kept.end()
	}
	// The server's signal to stop: the word, then EOF. EOF alone means
	// snapback died, and the view must then stay until the command ends.
	// (The pipe's buffer takes it even if the server never started: our
	// own read end is still open.)
	_, werr := s.aliveW.Write([]byte(stopWord))
	s.aliveR.Close()
	s.doneW.Close()
	s.aliveW.Close()
	if werr != nil {
		return fmt.Errorf("fuse: tell the server to stop: %w", werr)
	}
	defer s.doneR.Close()
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(s.doneR) // EOF: the server has exited
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		ch <- result{pid, err}
	}()
	select {
	case r := <-ch:
		if r.pid > 0 {
			// Reap it (it is ours as the subreaper; ECHILD if it was not
			// started at all). Its exit is imminent once done is closed.
			var ws unix.WaitStatus
			for i := 0; i < 200; i++ {
				got, err := unix.Wait4(r.pid, &ws, unix.WNOHANG, nil)
				if got == r.pid && (ws.Signaled() || ws.ExitStatus() != 0) {
					// The command lost its view midway (ENOTCONN): what
					// it left is not to be committed unseen.
					return fmt.Errorf("%w (%s): the command may have seen \"Transport endpoint is not connected\"; its changes so far stay pending", ErrServerDied, describe(ws))
				}
				if got == r.pid || err != nil {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return r.err
	case <-time.After(s.finishTimeout):
		return errors.New("fuse: the server did not exit after the command ended")
	}
}

// stopWord is what snapback writes to the alive pipe once the command
// has ended: only then does the server stop at the pipe's EOF.
const stopWord = "stop\n"

// ErrServerDied is returned by Finish when the server did not exit
// normally (killed, or failed) while the command ran.
var ErrServerDied = errors.New("fuse: the server died during the run")

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// Helper is the exec helper's main (args follow ExecVerb): it mounts the
// view, then runs the command under an init of its own in a new PID
// namespace (overlay.StartInit; the server stays out of it), and returns
// the command's status (125 if it failed itself).
func Helper(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "snapback: fuse: %v\n", err)
		return 125
	}
	if len(args) < 3 || args[1] != "--" {
		return fail(errors.New("helper: bad arguments"))
	}
	var a helperArgs
	if err := json.Unmarshal([]byte(args[0]), &a); err != nil {
		return fail(fmt.Errorf("helper: %w", err))
	}
	argv := args[2:]
	// Not the server's: the init gets it (overlay.StartInit).
	unix.CloseOnExec(a.Signals)
	mount := mountView
	if a.Mount != 0 {
		mount = attachView
	}
	if err := mount(a); err != nil {
		return fail(err)
	}
	// The command holds neither pipe: snapback's EOFs depend on it.
	unix.CloseOnExec(a.Alive)
	unix.CloseOnExec(a.Done)
	return overlay.StartInit(a.Spec, argv)
}

// mountView starts the server and mounts the view on the root (in the
// helper's private namespace).
func mountView(a helperArgs) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	// The device is usable only once mounted: the server waits for this.
	mountedR, mountedW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer mountedW.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := json.Marshal(a.Spec)
	if err != nil {
		return err
	}
	// The intermediate starts the server and exits: the server is
	// orphaned (to snapback, the subreaper), never the command's child.
	// Its mount namespace is copied now, before the FUSE mount exists.
	spawn := exec.Command(self, ServeVerb, "spawn", string(b))
	spawn.ExtraFiles = []*os.File{dev, os.NewFile(uintptr(a.Alive), "alive"), os.NewFile(uintptr(a.Done), "done"), readyW, mountedR}
	spawn.Stderr = os.Stderr
	spawn.Dir = "/"
	spawn.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
	err = spawn.Run()
	readyW.Close()
	mountedR.Close()
	if err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(a.Root, &st); err != nil {
		return err
	}
	opts := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,allow_other,default_permissions,max_read=%d", dev.Fd(), st.Mode&unix.S_IFMT, os.Getuid(), os.Getgid(), 1<<20)
	if err := unix.Mount("snapback", a.Root, "fuse.snapback", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the view on %s: %w", a.Root, err)
	}
	if _, err := mountedW.Write([]byte("mounted\n")); err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	if line != "ok\n" {
		return errors.New("the server did not start (see above)")
	}
	return nil
}

// ProfileEnv names the environment variable that makes the server write
// a CPU profile of its whole run to the file it names (for performance
// work: `go tool pprof` reads it), in a test-seams build only
// (-tags snapback_testseams; see fsutil.EnableTestSeams). A fresh view's
// server only (KeepEnv=0): a kept view's outlives the run.
const ProfileEnv = "SNAPBACK_FUSE_CPUPROFILE"

// profile starts the server's CPU profile if ProfileEnv asks for one, and
// returns what stops it.
func profile() func() {
	p := os.Getenv(ProfileEnv)
	if p == "" || !fsutil.TestSeams() {
		return func() {}
	}
	f, err := os.Create(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "snapback: fuse server: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "snapback: fuse server: %v\n", err)
		f.Close()
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close() // the profile is complete once written; a failed close leaves a short file pprof rejects
		})
	}
}

// Serve is the server's main (args follow ServeVerb).
func Serve(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "snapback: fuse server: %v\n", err)
		return 125
	}
	if len(args) != 2 {
		return fail(errors.New("bad arguments"))
	}
	// Descriptor 3 is /dev/fuse: go-fuse uses it by number, so no *os.File
	// may own it in the server (its finalizer would close it).
	files := []*os.File{nil, os.NewFile(4, "alive"), os.NewFile(5, "done"), os.NewFile(6, "ready"), os.NewFile(7, "mounted")}
	if args[0] == "spawn" {
		files[0] = os.NewFile(3, "fuse")
		self, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		srv := exec.Command(self, ServeVerb, "serve", args[1])
		srv.ExtraFiles = files
		srv.Stderr = os.Stderr
		srv.Dir = "/"
		srv.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no terminal signals
		if err := srv.Start(); err != nil {
			return fail(err)
		}
		return 0 // not waited for: the server must outlive its parent
	}
	var spec overlay.Spec
	if err := json.Unmarshal([]byte(args[1]), &spec); err != nil {
		return fail(err)
	}
	unix.CloseOnExec(3)
	for _, f := range files[1:] {
		unix.CloseOnExec(int(f.Fd()))
	}
	fmt.Fprintf(files[2], "%d\n", os.Getpid())
	stopProfile := profile()
	go func() {
		// EOF after the stop word: snapback is done with the run. EOF
		// without it: snapback died (SIGKILL) while the command may still
		// run; the view stays, and the server ends with the mount, once
		// the last process of the run is gone (Serve returns then).
		b, _ := io.ReadAll(files[1])
		if string(b) != stopWord {
			return
		}
		stopProfile()
		os.Exit(0)
	}()
	// The kernel sends modes with the caller's umask applied: the
	// server's own must not mask them again.
	unix.Umask(0)
	// Over /dev/fuse reads it serves one request at a time (see
	// options): a second P would only add thread hand-offs and the
	// runtime's polling of blocked threads on a machine whose CPUs the
	// command needs. The ring's queues, if it is used, serve at once.
	runtime.GOMAXPROCS(1)
	root, err := newRoot(spec.Root, spec.Upper, spec.Work)
	if err != nil {
		return fail(err)
	}
	opts := options()
	if line, _ := bufio.NewReader(files[4]).ReadString('\n'); line != "mounted\n" {
		return fail(errors.New("the view was not mounted"))
	}
	files[4].Close()
	ring := prepareRing(3, &opts.MountOptions)
	raw := newRawFS(root, opts)
	srv, err := gofuse.NewServer(raw, "/dev/fd/3", &opts.MountOptions) // waits for the kernel's INIT
	if err != nil {
		return fail(err)
	}
	if startRing(ring, srv, raw, &opts.MountOptions) {
		// The queues' threads (one per CPU, each bound to it, serving at
		// once) want a P each, and the device's reader one more.
		runtime.GOMAXPROCS(ring.Queues() + 1)
	}
	fmt.Fprintln(files[3], "ok")
	files[3].Close()
	srv.Serve() // until the mount is gone (its namespace ended)
	stopProfile()
	return 0
}
