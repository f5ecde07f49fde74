package watch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ServeVerb is the hidden first argument that makes snapback a watcher:
// `snapback __watch-tree ROOT STORE` (see [Serve]).
const ServeVerb = "__watch-tree"

// Errors of the client.
var (
	// ErrNotRunning: no watcher answers for this store.
	ErrNotRunning = errors.New("no watcher is running")
	// ErrUnsupported: this system has no watcher (not Linux).
	ErrUnsupported = errors.New("no tree watcher on this system")
)

// NotVouchedError is a watcher's refusal to vouch for a stretch.
type NotVouchedError struct{ Reason string }

func (e *NotVouchedError) Error() string { return "the watcher cannot vouch: " + e.Reason }

// Token is a point in a watcher's numbering of changes.
type Token struct {
	Gen uint64 // the watcher's generation
	Seq uint64 // the last sequence number read before the token was given
}

func (t Token) String() string { return fmt.Sprintf("%016x.%d", t.Gen, t.Seq) }

// ParseToken reads a token as String writes it.
func ParseToken(s string) (Token, error) {
	g, q, ok := strings.Cut(s, ".")
	if !ok || len(g) != 16 {
		return Token{}, fmt.Errorf("token %q: not GEN.SEQ", s)
	}
	gen, err := strconv.ParseUint(g, 16, 64)
	if err != nil {
		return Token{}, fmt.Errorf("token %q: %w", s, err)
	}
	seq, err := strconv.ParseUint(q, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("token %q: %w", s, err)
	}
	return Token{gen, seq}, nil
}

// Change is a path (relative to the root, slash-separated) that changed;
// Deep: everything below it may have changed too.
type Change struct {
	Path string
	Deep bool
}

// Bounds on an answer: beyond maxChanges paths the watcher says so and
// the reader scans the tree (cheaper by then).
const (
	maxChanges = 200_000
	maxAnswer  = 64 << 20
)

// askTimeout bounds a question: a watcher that does not answer (stopped,
// its marks/ gone) cannot vouch.
const askTimeout = 5 * time.Second

// watchDir is the watcher's directory in the store dir.
func watchDir(store string) string { return filepath.Join(store, "watch") }

// ask sends one request and returns a reader of the answer's body, after
// its first line ("ok …", or "no REASON": a NotVouchedError).
func ask(store, req string) (first string, body *bufio.Reader, c net.Conn, err error) {
	addr, fd, err := sockAddr(store)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	if fd >= 0 {
		defer unix.Close(fd)
	}
	c, err = net.DialTimeout("unix", addr, askTimeout)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	c.SetDeadline(time.Now().Add(askTimeout)) // a socket's deadline cannot fail
	if _, err := io.WriteString(c, req+"\n"); err != nil {
		c.Close()
		return "", nil, nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	br := bufio.NewReader(io.LimitReader(c, maxAnswer))
	line, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return "", nil, nil, fmt.Errorf("%w: no answer: %v", ErrNotRunning, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if reason, ok := strings.CutPrefix(line, "no "); ok {
		c.Close()
		return "", nil, nil, &NotVouchedError{Reason: reason}
	}
	first, ok := strings.CutPrefix(line, "ok")
	if !ok {
		c.Close()
		return "", nil, nil, fmt.Errorf("watcher: answer %.40q", line)
	}
	return strings.TrimSpace(first), br, c, nil
}

// Mark returns the watcher's token now: every change after it gets a
// greater number. ErrNotRunning when no watcher runs; a NotVouchedError
// when it runs but cannot vouch (it is still adding its watches, or a
// watch could not be added).
func Mark(store string) (Token, error) {
	first, _, c, err := ask(store, "mark")
	if err != nil {
		return Token{}, err
	}
	c.Close() // read-only use
	return ParseToken(first)
}

// Since returns the paths that changed after t, each once, in no order,
// and the token of the moment it asked: every change after it gets a
// greater number (what is read after Since returns is at least as new).
// When the watcher cannot vouch for the whole stretch, a
// NotVouchedError says why (ErrNotRunning: none runs).
func Since(store string, t Token) ([]Change, Token, error) {
	first, br, c, err := ask(store, "since "+t.String())
	if err != nil {
		return nil, Token{}, err
	}
	defer c.Close() // read-only use
	count, at, _ := strings.Cut(first, " ")
	n, err1 := strconv.Atoi(count)
	seq, err2 := strconv.ParseUint(at, 10, 64)
	if err1 != nil || err2 != nil || n < 0 || n > maxChanges || seq < t.Seq {
		return nil, Token{}, fmt.Errorf("watcher: answer %q", first)
	}
	out := make([]Change, 0, n)
	for i := 0; i < n; i++ {
		rec, err := br.ReadString(0)
		if err != nil {
			return nil, Token{}, fmt.Errorf("watcher: answer cut short after %d of %d paths: %w", i, n, err)
		}
		rec = rec[:len(rec)-1]
		if len(rec) < 1 || rec[0] != 'd' && rec[0] != 's' {
			return nil, Token{}, fmt.Errorf("watcher: record %.40q", rec)
		}
		out = append(out, Change{Path: rec[1:], Deep: rec[0] == 'd'})
	}
	return out, Token{t.Gen, seq}, nil
}

// Stop asks the watcher of store to exit, and waits (up to a few
// seconds) until it has let go of its lock; none running is no error. A
// watcher still starting (its lock taken, its socket not yet there) is
// waited for.
func Stop(store string) error {
	for i := 0; i < 500 && Running(store); i++ {
		_, _, c, err := ask(store, "quit")
		if err == nil {
			c.Close() // read-only use
		} else if !errors.Is(err, ErrNotRunning) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Running reports whether a watcher holds store's watcher lock.
func Running(store string) bool {
	f, err := os.OpenFile(filepath.Join(watchDir(store), "lock"), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close() // read-only
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

// Pid returns the process id the running watcher wrote in its lock file
// (for tests that kill it), or 0.
func Pid(store string) int {
	b, err := os.ReadFile(filepath.Join(watchDir(store), "lock"))
	if err != nil || len(b) > 64 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(b), "pid "))) // 0: none
	return n
}

// Start starts a watcher of root for store, detached from the caller (its
// own session, no terminal, its output discarded), and does not wait for
// it: it becomes useful once it has added its watches. Start makes the
// watcher's files in the store (its directory, the lock, taken, and the
// socket) and passes them to it: the watcher, which may start while the
// tree and store are being removed, makes none of them. When the lock is
// taken already (a watcher runs, or another process is starting one),
// Start starts none. The program started is this one (os.Executable),
// which must run [Serve] when its first argument is [ServeVerb].
func Start(root, store string) error {
	if !supported {
		return ErrUnsupported
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start watcher: %w", err)
	}
	lock, sock, err := prepare(store)
	if err != nil {
		return fmt.Errorf("start watcher: %w", err)
	}
	if lock == nil {
		return nil // one runs, or is starting
	}
	cmd := exec.Command(exe, ServeVerb, root, store)
	cmd.Args[0] = "snapback" // a test binary acting as snapback picks its part by this name
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{lock, sock} // descriptors 3 and 4 (lockFd, sockFd)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SNAPBACK_KILL_AT=") { // the crash tests' kill is the caller's, not the watcher's
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	closeInherited()
	if err := cmd.Start(); err != nil {
		unprepare(store, lock, sock)
		return fmt.Errorf("start watcher: %w", err)
	}
	go cmd.Wait() // reap it if it exits while this process lives; the error is the watcher's own business
	// For a person, and tests, to read ([Pid]); the lock is the
	// watcher's from now on (it holds the same open file).
	if err := lock.Truncate(0); err == nil {
		fmt.Fprintf(lock, "pid %d\n", cmd.Process.Pid)
	}
	sock.Close()
	lock.Close()
	return nil
}

// Proc names a process for as long as the system runs: its id and its
// start time (clock ticks after boot, /proc/PID/stat): a process id
// taken again by a later process has a later start.
type Proc struct {
	Pid   int
	Start uint64
}

func (p Proc) String() string { return fmt.Sprintf("%d:%d", p.Pid, p.Start) }

// WrittenBy asks the watcher of store who wrote each path that changed
// after t: for each, the indices in agents of the processes whose trees
// (the process and its descendants) wrote it, and -1 for a writer that
// is none of theirs or is not known (a process gone before the watcher
// read it), or a change whose writer was not heard. ns is the agents'
// pid namespace ([PidNS]). A NotVouchedError says why the watcher cannot
// tell (it does not run as root, its fanotify group lost events, …).
func WrittenBy(store string, t Token, ns uint64, agents []Proc) (map[string][]int, error) {
	req := fmt.Sprintf("writers %s %d", t, ns)
	for _, a := range agents {
		req += " " + a.String()
	}
	first, br, c, err := ask(store, req)
	if err != nil {
		return nil, err
	}
	defer c.Close() // read-only use
	n, err := strconv.Atoi(first)
	if err != nil || n < 0 || n > maxChanges {
		return nil, fmt.Errorf("watcher: answer %q", first)
	}
	out := make(map[string][]int, n)
	for i := 0; i < n; i++ {
		p, err1 := br.ReadString(0)
		w, err2 := br.ReadString(0)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("watcher: answer cut short after %d of %d paths: %w", i, n, err)
		}
		var who []int
		for _, x := range strings.Split(w[:len(w)-1], ",") {
			k, err := strconv.Atoi(x)
			if x == "?" {
				k, err = -1, nil
			}
			if err != nil || k >= len(agents) || k < -1 {
				return nil, fmt.Errorf("watcher: writers %.40q", w)
			}
			who = append(who, k)
		}
		out[p[:len(p)-1]] = who
	}
	return out, nil
}

// WriterStatus says whether the watcher of store tells who wrote what
// changed (it runs as root, with a fanotify group on the root's
// filesystem), and if not why.
func WriterStatus(store string) (on bool, why string, err error) {
	first, _, c, err := ask(store, "status")
	if err != nil {
		return false, "", err
	}
	c.Close() // read-only use
	if first == "on" {
		return true, "", nil
	}
	return false, strings.TrimSpace(strings.TrimPrefix(first, "off")), nil
}
