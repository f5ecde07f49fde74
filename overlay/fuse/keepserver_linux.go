//go:build linux

package fuse

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// keptServer is the long-lived server of one project's kept view (see
// keep_linux.go). Its FUSE mount is never attached where the server
// could enter it: it made the mount detached (fsmount) and holds it by
// a descriptor; each run attaches a clone of it in its own namespace.
type keptServer struct {
	root  string
	files keepFiles
	ln    *net.UnixListener
	w     *watcher
	idle  time.Duration
	// sockIno tells this server's socket from a later server's at the
	// same path.
	sockIno uint64
	// logHold is the log, held (flock, shared) for as long as the server
	// runs: a sweep (sweepKept) leaves a live server's files alone.
	logHold *os.File

	mu     sync.Mutex
	active bool      // a run has the view
	gone   bool      // no longer taking runs (a run's snapback died, or idle)
	last   time.Time // the end of the last run
	ov     *overlayFS
	top    *node
	raw    *rawFS
	mnt    int    // the detached mount (-1 once given up)
	upper  string // the current run's upper layer
	// runs is the store's directory of runs (the first run's upper
	// layer's grandparent), held: the server ends once it is removed.
	runs   string
	runsFd int
}

// keepArgs is what the runner tells a server it starts.
type keepArgs struct {
	Root string        `json:"root"`
	Idle time.Duration `json:"idle"`
}

// keepRequest is one message of a run to the server.
type keepRequest struct {
	Op    string `json:"op"` // "begin", "end", "status"
	Root  string `json:"root,omitempty"`
	Upper string `json:"upper,omitempty"`
	Work  string `json:"work,omitempty"`
}

// keepReply is the server's answer; "begin" comes with the clone of the
// mount as a descriptor.
type keepReply struct {
	Error string `json:"error,omitempty"`
	Busy  bool   `json:"busy,omitempty"`
	Pid   int    `json:"pid,omitempty"`
}

// Keep is the kept server's main (args follow KeepVerb). Descriptor 3
// is the ready pipe: "ok" once it listens.
func Keep(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "snapback: fuse kept server: %v\n", err)
		return 125
	}
	var a keepArgs
	if len(args) != 1 || json.Unmarshal([]byte(args[0]), &a) != nil || a.Root == "" {
		return fail(errors.New("bad arguments"))
	}
	closeInherited()
	ready := os.NewFile(3, "ready")
	unix.CloseOnExec(3)
	unix.Umask(0)
	runtime.GOMAXPROCS(1) // as Serve: one request at a time over /dev/fuse reads (more Ps for the ring's queues)
	files, err := keepPaths(a.Root)
	if err != nil {
		return fail(err)
	}
	s := &keptServer{root: a.Root, files: files, idle: a.Idle, mnt: -1, runsFd: -1, last: time.Now()}
	// Held before the runner that started this server lets go of the
	// lock: from then on, only this hold says the server runs.
	if s.logHold, err = os.OpenFile(files.log, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
		return fail(err)
	}
	if err := unix.Flock(int(s.logHold.Fd()), unix.LOCK_SH); err != nil {
		return fail(err)
	}
	// Watch before anything can be cached: a change is then heard, or
	// happened before the first lookup.
	if s.w, err = newWatcher(a.Root); err != nil {
		return fail(err)
	}
	go s.w.run()
	os.Remove(files.sock) // a dead server's (the runner holds the lock)
	err = atSock(files.sock, func(addr string) (err error) {
		s.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return fail(err)
	}
	s.ln.SetUnlinkOnClose(false) // removed under the lock only (quit)
	var st unix.Stat_t
	if err := unix.Lstat(files.sock, &st); err != nil {
		return fail(err)
	}
	s.sockIno = st.Ino
	fmt.Fprintln(ready, "ok")
	ready.Close()
	go s.idleLoop()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			gone := s.gone
			s.mu.Unlock()
			if gone {
				select {} // serving a run whose snapback died: Serve's end exits
			}
			return fail(err)
		}
		go s.conn(c)
	}
}

// closeInherited closes every descriptor above 3 the server inherited
// from the run that started it (those the runner passes to its helper
// are not close-on-exec): holding the run's lock, or its pipes, would
// keep that run "running" for as long as the server lives. Every
// descriptor Go opened itself is close-on-exec.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// conn serves one connection: a run (begin, then end) or a status.
func (s *keptServer) conn(c *net.UnixConn) {
	defer c.Close()
	if uid, err := peerUID(c); err != nil || uid != os.Getuid() {
		return // not ours to serve: the socket's directory is private, so this is a bug or an attack
	}
	req, err := readRequest(c)
	if err != nil {
		return
	}
	switch req.Op {
	case "status":
		s.mu.Lock()
		r := keepReply{Pid: os.Getpid()}
		s.mu.Unlock()
		writeReply(c, r, -1)
		return
	case "begin":
	default:
		writeReply(c, keepReply{Error: "unknown request " + strconv.Quote(req.Op)}, -1)
		return
	}
	clone, err := s.begin(req)
	if err != nil {
		var busy *busyError
		var fatal *fatalError
		writeReply(c, keepReply{Error: err.Error(), Busy: errors.As(err, &busy)}, -1)
		if errors.As(err, &fatal) {
			s.giveUp()
		}
		return
	}
	err = writeReply(c, keepReply{Pid: os.Getpid()}, clone)
	unix.Close(clone)
	if err == nil {
		req, err = readRequest(c)
	}
	if err != nil || req.Op != "end" {
		// The run's snapback died (EOF) or misspoke: its command may
		// still use the view. Take no more runs (the next one starts a
		// server of its own); serve this one until its mount is gone.
		s.giveUp()
		return
	}
	if err := s.end(); err != nil {
		fmt.Fprintf(os.Stderr, "snapback: fuse kept server: %v\n", err)
		writeReply(c, keepReply{Error: err.Error()}, -1)
		s.giveUp()
		return
	}
	writeReply(c, keepReply{}, -1)
}

// fatalError is a failure after which the server takes no more runs.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

type busyError struct{}

func (*busyError) Error() string { return "the kept view is in use by another run" }

// begin gives the view to a run: the first mounts it, later ones swap
// in their upper layer and take back from the kernel what changed
// since. It returns a clone of the mount for the run to attach.
func (s *keptServer) begin(req keepRequest) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Root != s.root {
		return -1, fmt.Errorf("the kept view serves %s, not %s", s.root, req.Root)
	}
	if s.active || s.gone {
		return -1, &busyError{}
	}
	if s.top == nil {
		runs := filepath.Dir(filepath.Dir(req.Upper))
		fd, err := unix.Open(runs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &fatalError{err}
		}
		if err := s.mount(req.Upper, req.Work); err != nil {
			unix.Close(fd)
			return -1, &fatalError{err}
		}
		s.runs, s.runsFd = runs, fd
	} else {
		// The root replaced (removed and made again, or another
		// filesystem mounted on it): the view shows the old one.
		var a, b unix.Stat_t
		if err := unix.Stat(s.root, &a); err != nil {
			return -1, &fatalError{err}
		}
		if err := unix.Fstat(s.ov.lowerFd, &b); err != nil || a.Dev != b.Dev || a.Ino != b.Ino {
			return -1, &fatalError{fmt.Errorf("%s is no longer the directory the kept view shows", s.root)}
		}
		if err := s.swap(req.Upper, req.Work); err != nil {
			return -1, err
		}
	}
	s.upper = req.Upper
	clone, err := unix.OpenTree(s.mnt, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("clone the view's mount: %w", err)
	}
	s.active = true
	return clone, nil
}

// mount makes the view (detached) and starts serving it.
func (s *keptServer) mount(upper, work string) error {
	top, err := newRoot(s.root, upper, work)
	if err != nil {
		return err
	}
	top.ov.warm.on = true
	s.w.take() // nothing is cached yet
	dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mnt, err := fsmountFUSE(dev, s.root)
	if err != nil {
		unix.Close(dev)
		return err
	}
	opts := options()
	ring := prepareRing(dev, &opts.MountOptions) // as a fresh view's server (Serve)
	raw := newRawFS(top, opts)
	srv, err := gofuse.NewServer(raw, "/dev/fd/"+strconv.Itoa(dev), &opts.MountOptions) // answers the kernel's INIT
	if err != nil {
		unix.Close(mnt)
		return err
	}
	if startRing(ring, srv, raw, &opts.MountOptions) {
		runtime.GOMAXPROCS(ring.Queues() + 1)
	}
	s.ov, s.top, s.raw, s.mnt = top.ov, top, raw, mnt
	go func() {
		srv.Serve() // until the last mount of the view is gone
		os.Exit(0)
	}()
	return nil
}

// fsmountFUSE makes a detached FUSE mount served through dev, with the
// options a run's view has (mountView).
func fsmountFUSE(dev int, root string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return -1, err
	}
	fsfd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen fuse: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{
		{"source", "snapback"}, {"subtype", "snapback"}, {"fd", strconv.Itoa(dev)},
		{"rootmode", strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8)},
		{"user_id", strconv.Itoa(os.Getuid())}, {"group_id", strconv.Itoa(os.Getgid())},
		{"max_read", strconv.Itoa(1 << 20)},
	} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", kv[0], err)
		}
	}
	flags := []string{"default_permissions"}
	if os.Geteuid() == 0 {
		// Root's view serves every user, as a fresh one's. An ordinary
		// user's server runs in a user namespace of its own, and allow_other
		// would admit only processes of that namespace (or its
		// descendants), never a run's; without it the kernel admits the
		// processes whose ids are user_id and group_id, in any namespace.
		flags = append(flags, "allow_other")
	}
	for _, f := range flags {
		if err := unix.FsconfigSetFlag(fsfd, f); err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", f, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return mnt, nil
}

// swap gives the view the run's upper layer (a new run's is empty, a
// session's next step's is not), and takes back from the kernel every
// path the watcher heard change since the last run, and every path of a
// step's upper layer.
func (s *keptServer) swap(upper, work string) error {
	var fds [2]int
	for i, d := range []string{upper, work} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			if i == 1 {
				unix.Close(fds[0])
			}
			return fmt.Errorf("%s: %w", d, err)
		}
		fds[i] = fd
	}
	empty, err := isEmptyDir(upper)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return err
	}
	changes, all, err := s.w.take()
	if err != nil || all {
		// Events were lost: what changed is unknown, and the kernel's
		// negative entries cannot all be named to drop them. This run
		// gets a fresh view; the next, a new server.
		unix.Close(fds[0])
		unix.Close(fds[1])
		if err == nil {
			err = errors.New("the watcher of the tree lost events")
		}
		return &fatalError{err}
	}
	ov := s.ov
	ov.mu.Lock()
	oldUp, oldWork := ov.upperFd, ov.workFd
	ov.upperFd, ov.workFd = fds[0], fds[1]
	ov.upperEmpty.Store(empty)
	ov.mu.Unlock()
	unix.Close(oldUp)
	unix.Close(oldWork)
	s.raw.reset()
	if !empty {
		// A step of a session (run --continue): the runs since its
		// last step may have cached the lower state of its paths.
		if err := ov.forgetUpper(&s.top.Inode, upper); err != nil {
			return &fatalError{err}
		}
	}
	for _, c := range changes {
		ov.changed(&s.top.Inode, c)
	}
	return nil
}

// end takes back from the kernel what the run's upper layer changed.
// Every process of the run is gone when the runner says so.
func (s *keptServer) end() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.ov.forgetUpper(&s.top.Inode, s.upper)
	s.raw.reset()
	s.active = false
	s.last = time.Now()
	return err
}

// giveUp stops taking runs: the socket goes (under the lock, so that a
// runner starting a new server is not cut off) and the mount with the
// last run's namespace.
func (s *keptServer) giveUp() {
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return
	}
	s.gone = true
	mnt := s.mnt
	s.mnt = -1
	s.mu.Unlock()
	s.quit(false, false)
	if mnt >= 0 {
		unix.Close(mnt)
	}
	if s.top == nil {
		os.Exit(0)
	}
}

// quit removes the socket if it is still this server's, under the lock
// (taken here unless held), then exits if asked to.
func (s *keptServer) quit(held, exit bool) {
	if !held {
		lk, err := lockFile(s.files.lock)
		if err != nil {
			fmt.Fprintf(os.Stderr, "snapback: fuse kept server: %v\n", err)
			s.ln.Close() // the socket stays: a runner finds it refusing, and starts a server
			if exit {
				os.Exit(0)
			}
			return
		}
		defer lk.Close()
	}
	var st unix.Stat_t
	if unix.Lstat(s.files.sock, &st) == nil && st.Ino == s.sockIno {
		os.Remove(s.files.sock)
	}
	s.ln.Close()
	if exit {
		if st, err := os.Stat(s.files.log); err == nil && st.Size() == 0 {
			os.Remove(s.files.log) // nothing to tell
		}
		os.Exit(0) // the lock goes with the process
	}
}

// idleLoop ends the server once no run has had the view for s.idle,
// or once no run is in it and its root or store was removed (or
// replaced): it looks on each removal the watcher hears in the root
// directory, and every few seconds (a store outside the tree, or a
// root's removal, is heard by no watch).
func (s *keptServer) idleLoop() {
	every := min(max(s.idle/4, time.Millisecond), checkEvery)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.w.removed:
		}
		s.mu.Lock()
		done := !s.active && !s.gone && (time.Since(s.last) >= s.idle || !s.stillThere())
		s.mu.Unlock()
		if !done {
			continue
		}
		lk, err := lockFile(s.files.lock) // no runner is between dial and begin
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		// No lock to take (err set): the private directory went, with
		// the socket (a test's temporary directory held both): no runner
		// can reach this server any more.
		s.mu.Lock()
		done = !s.active && !s.gone && (time.Since(s.last) >= s.idle || !s.stillThere())
		if done {
			s.gone = true
		}
		s.mu.Unlock()
		if done {
			s.quit(true, true)
		}
		if lk != nil {
			lk.Close()
		}
	}
}

// checkEvery is how often an idle server looks whether its root and
// store are still there.
const checkEvery = 2 * time.Second

// stillThere reports whether the root is the directory the view shows,
// and the store's runs directory the one the server holds (called with
// s.mu held). A tree removed (a test's temporary one, say) has no use
// for its server.
func (s *keptServer) stillThere() bool {
	same := func(path string, fd int) bool {
		var named, held unix.Stat_t
		return unix.Lstat(path, &named) == nil && unix.Fstat(fd, &held) == nil &&
			named.Dev == held.Dev && named.Ino == held.Ino && held.Nlink > 0 // removed, though still held
	}
	return same(s.root, s.w.rootFd) && (s.runsFd < 0 || same(s.runs, s.runsFd))
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

func readRequest(c *net.UnixConn) (keepRequest, error) {
	var r keepRequest
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		return r, err
	}
	if n == 0 {
		return r, errors.New("EOF")
	}
	return r, json.Unmarshal(buf[:n], &r)
}

// writeReply sends r, with fd as a descriptor unless it is -1.
func writeReply(c *net.UnixConn, r keepReply, fd int) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	return err
}
