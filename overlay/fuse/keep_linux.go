//go:build linux

package fuse

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/snapback/snapback/overlay"
	"golang.org/x/sys/unix"
)

// A kept view (on unless KeepEnv is "0") is one FUSE view of a project
// served across its runs by one long-lived server, so that what the
// kernel cached of the tree in one run (entries, attributes, pages,
// listings) serves the next: every run after a project's first starts
// warm.
//
//   - The server is started by the first run that finds none, in a
//     session of its own (KeepVerb), and ends once no run has used the
//     view for the idle time (KeepIdleEnv, default 10 minutes), or,
//     between runs, a few seconds after its root or its store was
//     removed or replaced (a test's temporary tree). Its
//     socket and lock live in a directory only the user can enter
//     (keepPaths), it serves only peers of its own uid, and it belongs
//     to one project root and one snapback binary; starting one and asking it for the view
//     happen under the lock, so two runs at once are safe: the second
//     finds the view busy and gets a fresh one of its own. A server
//     killed (SIGKILL) leaves its socket, lock and log there: the next
//     server's start removes those of every server that is gone
//     (sweepKept).
//   - Each run gets a clone of the view's detached mount, attached in
//     the run's private namespace as a fresh view's would be, and the
//     server swaps in the run's new upper layer.
//   - An ordinary user's server mounts in a user namespace of its own
//     that maps only the user's ids (as a fresh view's helper does), and
//     each run attaches the clone in a user namespace of its own: the
//     kernel lets a run use a FUSE mount of another user namespace when
//     the mount has no allow_other and the run's ids are the mount's
//     user_id and group_id (they are the same user's). Root's view has
//     allow_other, as a fresh one's.
//   - What the kernel may hold wrongly is taken back between runs
//     (warmState): the ending run's upper layer, every change the
//     watcher of the lower tree heard (inotify on every directory; its
//     events are queued by the very system call that changed the tree,
//     so a change made before a run begins is known when it begins;
//     when events were lost, the server ends and the run gets a fresh
//     view), and every lower hard link.
//   - If the run's snapback dies, the server takes no more runs and
//     serves that one until its last process is gone; the next run
//     starts a new server. If the server dies, the run fails as a fresh
//     view's would (its changes stay pending) and the next run starts
//     a new server.

// KeepOn reports whether fuse runs use kept views.
func KeepOn() bool { return os.Getenv(KeepEnv) != "0" }

// KeepCheck reports why the project at root could not have a kept view
// (nil: it can): fuse runs need to be possible, and the server's
// private directory (keepPaths) usable.
func KeepCheck(root string) error {
	if ok, why := Available(); !ok {
		return errors.New(why)
	}
	_, err := keepPaths(root)
	return err
}

// keepFiles are the paths of one project's kept view server.
type keepFiles struct {
	sock, lock, log string
}

// keepPaths names root's server's files, in a directory private to the
// user (made mode 0700; refused if it is anyone else's, or open to others).
// The name is the project root's and this snapback binary's (exeID): a
// run of another snapback (the user upgraded it) starts a server of its
// own instead of being served by the older one, which ends when idle.
func keepPaths(root string) (keepFiles, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("snapback-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return keepFiles{}, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return keepFiles{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return keepFiles{}, fmt.Errorf("%s: not a directory private to uid %d", dir, os.Getuid())
	}
	sum := sha256.Sum256([]byte(root + "\x00" + exeID()))
	key := filepath.Join(dir, "view-"+hex.EncodeToString(sum[:10]))
	return keepFiles{sock: key + ".sock", lock: key + ".lock", log: key + ".log"}, nil
}

// exeID names the running snapback binary: the device, inode, size and
// modification time of /proc/self/exe (which stay those of the file the
// process was started from, even once it is replaced or removed). ""
// where it cannot be read: every such process then shares one name.
func exeID() string {
	var st unix.Stat_t
	if unix.Stat("/proc/self/exe", &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

// lockFile takes the lock at path (made if need be), waiting for it.
func lockFile(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, err
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		var held, named unix.Stat_t
		if err == nil {
			err = unix.Fstat(int(f.Fd()), &held)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		// A lock file removed while this waited for it (sweepKept
		// removes a dead server's, holding it) excludes nobody: take the
		// one at path now.
		if unix.Lstat(path, &named) == nil && named.Dev == held.Dev && named.Ino == held.Ino {
			return f, nil
		}
		f.Close()
	}
}

// keepKeyLen is the length of the names keepPaths gives, without their
// extension: "view-" and 20 hex digits.
const keepKeyLen = len("view-") + 20

// keepKey returns the name a file of keepPaths's has, without its
// extension (.sock, .lock, .log); ok false: not such a name.
func keepKey(name string) (key string, ok bool) {
	for _, ext := range []string{".sock", ".lock", ".log"} {
		k, found := strings.CutSuffix(name, ext)
		if !found || len(k) != keepKeyLen || !strings.HasPrefix(k, "view-") {
			continue
		}
		for _, c := range k[len("view-"):] {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return "", false
			}
		}
		return k, true
	}
	return "", false
}

// sweepKept removes from dir (keepPaths's private directory) the files
// of every server that is gone, but the one named except (the caller's,
// whose lock it holds). A server that ends removes its socket (and its
// log when empty), one killed (SIGKILL) leaves its socket, lock and log,
// and nobody uses them again unless a run of the same project starts a
// server. A project's files are gone when its lock is free (no runner,
// no server quitting), its log is not held (each server holds it, shared,
// for as long as it runs: one that gave up serves its last run without
// a socket) and its socket, if any, refuses (a server of an older
// snapback holds no log). Only names keepPaths gives are touched, only
// regular files and sockets (never a symlink, which is left alone with
// its project's other files), through the directory held.
func sweepKept(dir, except string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return // nothing to sweep: the next start tries again
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close() // read-only
	// What was read is swept; anything not read, by the next start.
	names, _ := d.Readdirnames(-1)
	keys := map[string]bool{}
	for _, n := range names {
		if k, ok := keepKey(n); ok && k != except {
			keys[k] = true
		}
	}
	for k := range keys {
		sweepOne(fd, k)
	}
}

// sweepOne removes one project's files from the directory dirFd, if its
// server is gone (see sweepKept).
func sweepOne(dirFd int, key string) {
	for ext, kind := range map[string]uint32{".lock": unix.S_IFREG, ".log": unix.S_IFREG, ".sock": unix.S_IFSOCK} {
		var st unix.Stat_t
		err := unix.Fstatat(dirFd, key+ext, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != kind {
			return // not a file snapback made
		}
	}
	lk, err := unix.Openat(dirFd, key+".lock", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return // no lock (another sweep is removing them): nothing to hold them by
	}
	defer unix.Close(lk) // unlocks
	if unix.Flock(lk, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a runner of that project, or its server quitting, holds it
	}
	if lg, err := unix.Openat(dirFd, key+".log", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		held := unix.Flock(lg, unix.LOCK_EX|unix.LOCK_NB) != nil
		unix.Close(lg) // unlocks
		if held {
			return // its server runs
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return
	}
	if answers(fmt.Sprintf("/proc/self/fd/%d/%s.sock", dirFd, key)) {
		return
	}
	unix.Unlinkat(dirFd, key+".sock", 0) // gone already: nothing to undo
	unix.Unlinkat(dirFd, key+".log", 0)
	unix.Unlinkat(dirFd, key+".lock", 0) // last, and held: a runner waiting for it takes the next one (lockFile)
}

// answers reports whether a server listens on the socket at path: a
// connection is taken, or would be but for a full queue.
func answers(path string) bool {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true // cannot tell: leave it
	}
	defer unix.Close(s) // the server reads no request: it closes its end
	err = unix.Connect(s, &unix.SockaddrUnix{Name: path})
	return err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINPROGRESS)
}

// keptRun is a run's hold on the kept view.
type keptRun struct {
	conn *net.UnixConn
	mnt  *os.File // the clone of the view's mount, for the helper to attach
}

// beginKept asks the project's server (started if there is none) for the
// view, for the run of spec. nil (and why, "" when it is simply off or
// in use) when the run must make a fresh view of its own.
func beginKept(root, upper, work string) (*keptRun, string) {
	if !KeepOn() {
		return nil, ""
	}
	files, err := keepPaths(root)
	if err != nil {
		return nil, err.Error()
	}
	lk, err := lockFile(files.lock)
	if err != nil {
		return nil, err.Error()
	}
	defer lk.Close() // unlocks
	c, err := dialKept(files)
	if err != nil {
		if err := startKept(root, files); err != nil {
			return nil, err.Error()
		}
		if c, err = dialKept(files); err != nil {
			return nil, err.Error()
		}
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	r, fd, err := ask(c, keepRequest{Op: "begin", Root: root, Upper: upper, Work: work})
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	if err == nil && fd < 0 {
		err = errors.New("no mount came with the view")
	}
	if err != nil {
		c.Close()
		if r.Busy {
			return nil, ""
		}
		return nil, err.Error()
	}
	c.SetDeadline(time.Time{})
	return &keptRun{conn: c, mnt: os.NewFile(uintptr(fd), "view")}, ""
}

// end tells the server the run has ended (every process of it is gone)
// and waits until the view is ready for the next one.
func (k *keptRun) end() error {
	defer k.conn.Close()
	k.mnt.Close()
	k.conn.SetDeadline(time.Now().Add(2 * time.Minute))
	r, _, err := ask(k.conn, keepRequest{Op: "end"})
	if err != nil {
		return fmt.Errorf("%w (%v): the command may have seen \"Transport endpoint is not connected\"; its changes so far stay pending", ErrServerDied, err)
	}
	if r.Error != "" {
		return fmt.Errorf("fuse: the kept view: %s", r.Error)
	}
	return nil
}

// dialKept connects to the server, checking that it runs as the user.
func dialKept(files keepFiles) (*net.UnixConn, error) {
	var c *net.UnixConn
	err := atSock(files.sock, func(addr string) (err error) {
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: addr, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return nil, err
	}
	if uid, err := peerUID(c); err != nil || uid != os.Getuid() {
		c.Close()
		return nil, fmt.Errorf("%s: not served by uid %d", files.sock, os.Getuid())
	}
	return c, nil
}

// atSock calls f with an address of the socket at path that fits a
// socket address (107 bytes): path itself when it fits, else the name in
// its directory, reached through a descriptor (/proc/self/fd/N/NAME), so
// that a long XDG_RUNTIME_DIR or TMPDIR does not cost the kept view.
func atSock(path string, f func(addr string) error) error {
	if len(path) < len(unix.RawSockaddrUnix{}.Path) {
		return f(path)
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path)))
}

// startKept starts root's server and waits until it listens (called
// with the lock held).
func startKept(root string, files keepFiles) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	idle := 10 * time.Minute
	if v := os.Getenv(KeepIdleEnv); v != "" {
		if idle, err = time.ParseDuration(v); err != nil || idle <= 0 {
			return fmt.Errorf("%s=%q: not a duration", KeepIdleEnv, v)
		}
	}
	b, err := json.Marshal(keepArgs{Root: root, Idle: idle})
	if err != nil {
		return err
	}
	// Servers killed (SIGKILL) before leave their files: swept now,
	// when one starts.
	sweepKept(filepath.Dir(files.lock), strings.TrimSuffix(filepath.Base(files.lock), ".lock"))
	log, err := os.OpenFile(files.log, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	srv := exec.Command(self, KeepVerb, string(b))
	srv.ExtraFiles = []*os.File{readyW}
	srv.Stderr = log
	srv.Dir = "/"
	srv.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no terminal signals
	if os.Geteuid() != 0 {
		// An ordinary user's server mounts FUSE in a user namespace
		// (and a mount namespace) of its own.
		overlay.UserNS(srv.SysProcAttr)
		srv.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS
	}
	err = srv.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the kept view's server: %w", err)
	}
	go srv.Wait() // reaped if it ends while snapback runs
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	if line != "ok\n" {
		return fmt.Errorf("the kept view's server did not start (see %s)", files.log)
	}
	return nil
}

// ask sends req and reads the reply, with the descriptor that came
// with it (-1 if none).
func ask(c *net.UnixConn, req keepRequest) (keepReply, int, error) {
	var r keepReply
	b, err := json.Marshal(req)
	if err != nil {
		return r, -1, err
	}
	if _, err := c.Write(b); err != nil {
		return r, -1, err
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return r, -1, err
	}
	if n == 0 {
		return r, -1, errors.New("the server hung up")
	}
	fd := -1
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
				fd = fds[0]
				unix.CloseOnExec(fd)
			}
		}
	}
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return r, -1, err
	}
	return r, fd, nil
}

// KeptServer reports whether a kept view's server runs for the project
// at root, and its process id.
func KeptServer(root string) (pid int, ok bool) {
	files, err := keepPaths(root)
	if err != nil {
		return 0, false
	}
	c, err := dialKept(files)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r, fd, err := ask(c, keepRequest{Op: "status"})
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil || r.Pid == 0 {
		return 0, false
	}
	return r.Pid, true
}

// attachView attaches the kept view's clone (descriptor a.Mount) on the
// root, in the helper's private namespace.
func attachView(a helperArgs) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	err := unix.MoveMount(a.Mount, "", unix.AT_FDCWD, a.Root, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(a.Mount)
	if err != nil {
		return fmt.Errorf("attach the kept view on %s: %w", a.Root, err)
	}
	return nil
}
