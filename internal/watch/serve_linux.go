//go:build linux

package watch

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/snapback/snapback/internal/layout"
	"golang.org/x/sys/unix"
)

const supported = true

// treeMask is what a directory's watch reports: every change of a name in
// it (contents, metadata, links, creation, removal, renames) and of the
// directory itself.
const treeMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR

// defaultIdle: a watcher nobody asked anything for this long exits.
const defaultIdle = time.Hour

// localFS are the filesystems (statfs magic numbers) on which every
// change to the tree is made by this kernel, so inotify hears of it: not
// a network filesystem, FUSE or overlayfs (whose lower layers change
// without events).
var localFS = map[int64]string{
	0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
	0xF2F52010: "f2fs", 0x2FC12FC1: "zfs", 0x3153464a: "jfs", 0x52654973: "reiserfs",
}

type event struct {
	wd     int32
	mask   uint32
	cookie uint32
	name   string
}

type request struct {
	line string
	conn net.Conn
}

// server is a running watcher; its fields are the main loop's alone.
type server struct {
	root, store string
	lock        *os.File // the store's watch/lock, held (flock) by this watcher
	watchFd     int      // the store's watch directory, held open (O_PATH)
	marksFd     int      // its marks/, held open (O_PATH): markers are made in it
	in          *os.File // the inotify instance (non-blocking, in Go's poller)
	events      chan []event
	marksWd     int32
	watchWd     int32
	rootWd      int32
	rootID      [2]uint64        // the root's device and inode
	wds         map[int32]string // each watch's directory, relative to the root

	gen    uint64
	j      *journal
	broken string            // why this generation cannot vouch; "" while it can
	lost   map[uint64]string // generations given up, and why
	// pending questions, by the name of their marker.
	pending map[string]*pending
	marks   int
	// walking says why no question is answered while the watches are
	// being added ("": they are all there).
	walking atomic.Value

	// Who wrote (fanotify_linux.go): the group (nil: none, fanWhy says
	// why), its events, why this generation cannot tell writers
	// (fanBroken), the first sequence number from which it can (fanLost:
	// events were lost before), and each path's writers with the number
	// of the last write of each.
	fan       *fanGroup
	fanWhy    string
	fanEvents chan []fanEvent
	fanBroken string
	fanLost   uint64
	wrote     map[string][]wrote
}

// pending is a question waiting for its marker's events: inotify's, and
// fanotify's when it asks who wrote.
type pending struct {
	r                request
	in, fan, needFan bool
}

// Serve runs a watcher of the tree at args[0] for the store at args[1]
// until it is idle, asked to stop, or its root or store goes. It is
// started by [Start], which passes it the lock it took (descriptor 3)
// and the socket it made (4): the watcher itself makes nothing in the
// store but its markers (see [server.marker]).
func Serve(args []string) int {
	if len(args) == 3 && args[0] == "--start" {
		// Start a watcher as a checkpoint's begin does, and return: for
		// scripts/bench-checkpoint.sh, which times a watcher's start.
		if err := Start(args[1], args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "snapback watcher:", err)
			return 1
		}
		return 0
	}
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: snapback "+ServeVerb+" ROOT STORE (run by the watcher's Start)")
		return 2
	}
	s := &server{root: args[0], store: args[1], watchFd: -1, marksFd: -1, lost: map[uint64]string{}, pending: map[string]*pending{}}
	if err := s.run(); err != nil {
		fmt.Fprintln(os.Stderr, "snapback watcher:", err)
		return 1
	}
	return 0
}

// Descriptors Start passes to the watcher.
const (
	lockFd = 3 // watch/lock, its flock taken
	sockFd = 4 // watch/sock, bound and listening
)

// prepare makes what a watcher of store needs, for [Start] to pass it:
// the store's watch directory and its marks/, the lock (taken) with the
// socket (bound, listening). The command that starts a watcher makes
// them, while it is itself at work on the store: the watcher, detached,
// may start while the tree and its store are being removed (rm -rf),
// and a file it made in a directory the removal had already listed
// would fail it (directory not empty). A store that is not there is not
// made (the caller made it, or it was removed since). No files (and no
// error): another process holds the lock, a watcher runs or is starting.
func prepare(store string) (lock, sock *os.File, err error) {
	dir := watchDir(store)
	for _, d := range []string{dir, filepath.Join(dir, "marks")} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, nil, err
		}
	}
	lock, err = os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close() // read nothing, wrote nothing
		return nil, nil, nil
	}
	addr, dirFd, err := sockAddr(store)
	if err != nil {
		lock.Close() // releases the lock
		return nil, nil, err
	}
	if dirFd >= 0 {
		defer unix.Close(dirFd)
	}
	os.Remove(filepath.Join(dir, "sock")) // a dead watcher's: we hold the lock
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		if err = unix.Bind(fd, &unix.SockaddrUnix{Name: addr}); err == nil {
			if err = unix.Listen(fd, 128); err != nil {
				os.Remove(filepath.Join(dir, "sock")) // ours, unused
			}
		}
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		lock.Close() // releases the lock
		return nil, nil, fmt.Errorf("socket %s: %w", filepath.Join(dir, "sock"), err)
	}
	return lock, os.NewFile(uintptr(fd), filepath.Join(dir, "sock")), nil
}

// unprepare undoes prepare, when no watcher could be started with them.
func unprepare(store string, lock, sock *os.File) {
	sock.Close()
	os.Remove(filepath.Join(watchDir(store), "sock")) // ours, under the lock
	lock.Close()                                      // releases the lock
}

// adopt takes the lock and socket Start passed; nil listener (and no
// error): the store is not there any more, or is another one.
func (s *server) adopt() (net.Listener, error) {
	var st unix.Stat_t
	if err := unix.Fstat(lockFd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("no lock passed (a watcher is started by the watch package's Start)")
	}
	if acc, err := unix.GetsockoptInt(sockFd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 1 {
		return nil, errors.New("no socket passed (a watcher is started by the watch package's Start)")
	}
	s.lock = os.NewFile(lockFd, filepath.Join(watchDir(s.store), "lock"))
	// Taken already by Start, through this same open file: taking it
	// again changes nothing then, and fails if another holds it.
	if err := unix.Flock(lockFd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("the lock passed is not held: %w", err)
	}
	f := os.NewFile(sockFd, filepath.Join(watchDir(s.store), "sock"))
	ln, err := net.FileListener(f)
	f.Close() // ln has its own descriptor
	if err != nil {
		return nil, err
	}
	// The directories its files are made in, held: one removed since
	// gets no new names (the kernel refuses them), and where it was is
	// looked at before each.
	fd, err := unix.Open(watchDir(s.store), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		ln.Close()
		return nil, nil // gone (removed, or being removed)
	}
	s.watchFd = fd
	var named unix.Stat_t
	if unix.Fstatat(fd, "lock", &named, unix.AT_SYMLINK_NOFOLLOW) != nil || named.Dev != st.Dev || named.Ino != st.Ino {
		ln.Close()
		return nil, nil // another store's by now
	}
	if s.marksFd, err = unix.Openat(fd, "marks", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		s.marksFd = -1
		ln.Close()
		return nil, nil
	}
	return ln, nil
}

func (s *server) run() error {
	ln, err := s.adopt()
	defer func() {
		for _, fd := range []int{s.watchFd, s.marksFd} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if s.lock != nil {
			s.lock.Close() // releases the lock, after the socket is gone
		}
	}()
	if ln == nil || err != nil {
		return err
	}
	defer func() {
		ln.Close()
		// Its name, made by Start under the lock we hold, is ours; in the
		// directory held (one removed has none left).
		unix.Unlinkat(s.watchFd, "sock", 0) // already gone: nothing to undo
	}()
	reqs := make(chan request)
	go accept(ln, reqs, &s.walking)

	idle := defaultIdle
	if d, err := time.ParseDuration(os.Getenv("SNAPBACK_WATCH_IDLE")); err == nil && d > 0 {
		idle = d
	}
	if err := s.begin(""); err != nil {
		return err
	}
	defer func() {
		s.in.Close() // the instance, with its watches
		if s.fan != nil {
			s.fan.stop() // its reader closes the group, with its marks
		}
	}()
	if !s.stillThere() {
		return nil // removed before its watch directory's watch was added
	}
	timer := time.NewTimer(idle)
	// The root's own removal is an event only once nothing holds its
	// directory (the lock held is in it when the store is): its
	// presence, and the store's, are looked at too, on each removal in
	// the store's watch directory and every few seconds.
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	for {
		select {
		case <-check.C:
			if !s.stillThere() {
				return nil
			}
		case evs, ok := <-s.events:
			if !ok {
				continue // an instance closed by begin: its reader is done
			}
			for _, ev := range evs {
				if quit := s.handle(ev); quit {
					return nil
				}
			}
		case evs, ok := <-s.fanEvents:
			if !ok {
				continue // a group closed by begin: its reader is done
			}
			for _, ev := range evs {
				s.handleFan(ev)
			}
		case r := <-reqs:
			timer.Reset(idle)
			if quit := s.serve(r); quit {
				return nil
			}
		case <-timer.C:
			return nil
		}
	}
}

// checkEvery: how often the watcher looks whether its root and store
// are still where they were.
const checkEvery = 5 * time.Second

// stillThere reports whether the root is the directory watched, and the
// store's watch directory, its marks/ and its lock those the watcher
// holds: a tree removed (or moved, or replaced) and its store have no
// use for the watcher, which must make nothing in them any more.
func (s *server) stillThere() bool {
	var root, held, named, dir, marks unix.Stat_t
	if unix.Lstat(s.root, &root) != nil || unix.Fstat(int(s.lock.Fd()), &held) != nil ||
		unix.Lstat(filepath.Join(watchDir(s.store), "lock"), &named) != nil ||
		unix.Fstat(s.watchFd, &dir) != nil || unix.Fstat(s.marksFd, &marks) != nil {
		return false
	}
	return root.Dev == s.rootID[0] && root.Ino == s.rootID[1] && held.Dev == named.Dev && held.Ino == named.Ino &&
		held.Nlink > 0 && dir.Nlink > 0 && marks.Nlink > 0 // removed, though still held
}

// accept reads each connection's one request line and passes it on;
// while the watcher adds its watches (walking holds why), it answers
// at once that it cannot vouch: a begin must not wait for the walk of a
// large tree.
func accept(ln net.Listener, reqs chan<- request, walking *atomic.Value) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed: the watcher is exiting
		}
		go func() {
			c.SetDeadline(time.Now().Add(askTimeout)) // a socket's deadline cannot fail
			line, err := bufio.NewReader(&limited{c, 4096}).ReadString('\n')
			if err != nil {
				c.Close()
				return
			}
			line = strings.TrimSuffix(line, "\n")
			if why, _ := walking.Load().(string); why != "" && line != "quit" {
				answerNo(c, why)
				return
			}
			reqs <- request{line, c}
		}()
	}
}

// limited reads at most n bytes in all.
type limited struct {
	c net.Conn
	n int
}

func (l *limited) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(b) > l.n {
		b = b[:l.n]
	}
	k, err := l.c.Read(b)
	l.n -= k
	return k, err
}

// begin starts a generation: a new inotify instance (the old one's queue
// and watches go with it), a new journal, every directory watched again.
// why says why the one before was given up ("" at the start).
func (s *server) begin(why string) error {
	if why == "" {
		s.walking.Store("the watcher is starting: it is adding its watches")
	} else {
		s.walking.Store("the watcher lost events (" + why + ") and is adding its watches again")
	}
	defer s.walking.Store("")
	s.fanWhy = ""
	if s.in != nil {
		s.lost[s.gen] = why
		s.in.Close() // its reader sees the close and stops
		for name, q := range s.pending {
			answerNo(q.r.conn, why)
			delete(s.pending, name)
			unix.Unlinkat(s.marksFd, name, 0) // ours; a leftover is harmless
		}
	}
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	s.gen = binary.LittleEndian.Uint64(b[:])
	s.j = newJournal()
	s.broken = ""
	s.wds = map[int32]string{}
	if s.fan != nil {
		s.fan.stop() // its reader closes it
		s.fan, s.fanEvents = nil, nil
	}
	s.fanBroken, s.fanLost, s.wrote = "", 0, map[string][]wrote{}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	s.in = os.NewFile(uintptr(fd), "inotify")
	s.events = make(chan []event, 64)
	go read(s.in, s.events)
	// marks/ and the watch directory held, through their descriptors:
	// the very directories the markers are made in, and the lock is in.
	wd, err := unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d", s.marksFd), unix.IN_CREATE|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Join(watchDir(s.store), "marks"), err)
	}
	s.marksWd = int32(wd)
	// A name removed from the watch directory (the lock, the socket,
	// marks/: the store's removal) makes the watcher look whether its
	// store is still there.
	wd, err = unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d", s.watchFd), unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("watch %s: %w", watchDir(s.store), err)
	}
	s.watchWd = int32(wd)
	var st unix.Statfs_t
	if err := unix.Statfs(s.root, &st); err != nil {
		return err
	}
	if _, ok := localFS[int64(st.Type)]; !ok {
		s.broken = fmt.Sprintf("the root's filesystem (type %#x) may change without the kernel's events (a network filesystem, FUSE, overlayfs)", st.Type)
		return nil
	}
	var rst unix.Stat_t
	if err := unix.Lstat(s.root, &rst); err != nil {
		return err
	}
	s.rootID = [2]uint64{rst.Dev, rst.Ino}
	s.rootWd = -1
	// The group before the walk, as the watches: each directory's handle
	// is noted as it is watched.
	if s.fan, s.fanWhy = openFan(s.root, s.marksFd); s.fan != nil {
		s.fanEvents = make(chan []fanEvent, 64)
		go readFan(s.fan, s.fanEvents)
	}
	s.addTree("")
	if s.rootWd < 0 {
		return fmt.Errorf("watch %s: %s", s.root, s.broken) // gone, or not to be watched: nothing to do
	}
	return nil
}

// read passes the instance's events to the main loop, until it is closed.
func read(in *os.File, out chan<- []event) {
	defer close(out)
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if err != nil || n <= 0 {
			return
		}
		var evs []event
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			if i := indexZero(name); i >= 0 {
				name = name[:i]
			}
			evs = append(evs, event{wd: raw.Wd, mask: raw.Mask, cookie: raw.Cookie, name: string(name)})
			off += unix.SizeofInotifyEvent + int(raw.Len)
		}
		out <- evs
	}
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// fail notes why this generation cannot vouch (the first reason stays).
func (s *server) fail(why string) {
	if s.broken == "" {
		s.broken = why
	}
}

// addTree watches the directory p and every directory below it: the
// watch first, then the listing, so that a name made in between is
// either listed or an event.
func (s *server) addTree(p string) {
	if p == layout.StoreDir {
		return // the store in the tree: scans never read it
	}
	abs := filepath.Join(s.root, filepath.FromSlash(p))
	wd, err := unix.InotifyAddWatch(int(s.in.Fd()), abs, treeMask)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return // gone or replaced since: its parent's event says so
	case errors.Is(err, unix.ENOSPC):
		s.fail(fmt.Sprintf("the limit of inotify watches was reached at %q (fs.inotify.max_user_watches is %s)", p, sysctl("max_user_watches")))
		return
	case err != nil:
		s.fail(fmt.Sprintf("watch %q: %v", p, err))
		return
	}
	if was, ok := s.wds[int32(wd)]; ok && was != p {
		// One directory at two paths (a bind mount in the tree): its
		// events would be told under one of them only.
		s.fail(fmt.Sprintf("the directory at %q is at %q too (a bind mount?)", p, was))
		return
	}
	s.wds[int32(wd)] = p
	if p == "" {
		s.rootWd = int32(wd)
	}
	if s.fan != nil && !s.fan.addDir(p, abs) {
		s.fanFail(fmt.Sprintf("the directory %q has no fanotify mark or file handle", p))
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return
	}
	if err != nil {
		s.fail(fmt.Sprintf("list %q: %v", p, err))
		return
	}
	f := os.NewFile(uintptr(fd), abs)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Dev != s.rootID[0] {
		// Another filesystem mounted in the tree: it must be one whose
		// changes are all this kernel's, as the root's.
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil || localFS[int64(fs.Type)] == "" {
			s.fail(fmt.Sprintf("the filesystem mounted at %q (type %#x) may change without the kernel's events", p, fs.Type))
		}
		s.fanFail(fmt.Sprintf("another filesystem is mounted at %q (writers are told on the root's only)", p))
	}
	ents, err := f.ReadDir(-1)
	f.Close() // read-only
	if err != nil {
		s.fail(fmt.Sprintf("list %q: %v", p, err))
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			s.addTree(join(p, e.Name()))
		}
	}
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/fs/inotify/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// handle notes one event; quit: the watcher has nothing left to watch.
func (s *server) handle(ev event) (quit bool) {
	switch {
	case ev.mask&unix.IN_Q_OVERFLOW != 0:
		if err := s.begin("the kernel's event queue overflowed (fs.inotify.max_queued_events is " + sysctl("max_queued_events") + ")"); err != nil {
			return true
		}
		return false
	case ev.wd == s.marksWd:
		if ev.mask&unix.IN_CREATE != 0 {
			s.answer(ev.name)
		}
		return false
	case ev.wd == s.watchWd:
		return !s.stillThere()
	case ev.mask&unix.IN_IGNORED != 0:
		delete(s.wds, ev.wd)
		return ev.wd == s.rootWd // the root went
	}
	dir, ok := s.wds[ev.wd]
	if !ok {
		return false // a watch removed since (a directory moved away), or of the instance before
	}
	if ev.mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		if ev.wd == s.rootWd {
			return true // the root moved or went: nothing to watch
		}
		return false // its parent's event said it
	}
	if ev.mask&unix.IN_UNMOUNT != 0 {
		s.j.next()
		s.j.note(dir, true)
		return false
	}
	p := join(dir, ev.name)
	s.j.next()
	isDir := ev.mask&unix.IN_ISDIR != 0
	switch {
	case ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		s.j.note(dir, false) // its listing and mtime
		s.j.note(p, isDir)
		if isDir {
			// Made, or moved in from elsewhere: what it held before its
			// watches existed had no event; the deep note covers it.
			s.addTree(p)
		}
	case ev.mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		s.j.note(dir, false)
		s.j.note(p, isDir)
		if isDir && ev.mask&unix.IN_MOVED_FROM != 0 {
			s.unwatch(p) // it lives elsewhere now, under other names: watched again where it lands
		}
	default: // contents, metadata
		s.j.note(p, false)
	}
	if len(s.j.paths) > maxNoted {
		return s.begin(fmt.Sprintf("more than %d paths changed", maxNoted)) != nil
	}
	return false
}

// unwatch drops the watches of p and every directory below it.
func (s *server) unwatch(p string) {
	for wd, d := range s.wds {
		if under(d, p) {
			unix.InotifyRmWatch(int(s.in.Fd()), uint32(wd)) // may be gone already: nothing to undo
			delete(s.wds, wd)
		}
	}
	if s.fan != nil {
		s.fan.dropUnder(p)
	}
}

// serve answers a request, or (a question about changes) starts its
// marker; quit: the request was to stop.
func (s *server) serve(r request) (quit bool) {
	switch {
	case r.line == "quit":
		answerOK(r.conn, "")
		return true
	case r.line == "status":
		why := s.fanWhy
		if why == "" {
			why = s.broken // no watcher's vouching, no writers
		}
		if why == "" {
			why = s.fanBroken
		}
		if why == "" && s.fan == nil {
			why = "no fanotify group"
		}
		if why == "" {
			answerOK(r.conn, " on")
		} else {
			answerOK(r.conn, " off "+strings.ReplaceAll(why, "\n", " "))
		}
		return false
	case strings.HasPrefix(r.line, "writers "):
		if why := s.writersRefused(r.line); why != "" {
			answerNo(r.conn, why)
			return false
		}
		return s.ask(r, true)
	case r.line == "mark":
		if s.broken != "" {
			answerNo(r.conn, s.broken)
			return false
		}
		answerOK(r.conn, " "+Token{s.gen, s.j.seq}.String())
		return false
	case strings.HasPrefix(r.line, "since "):
		t, err := ParseToken(strings.TrimPrefix(r.line, "since "))
		switch {
		case err != nil:
			answerNo(r.conn, err.Error())
		case t.Gen != s.gen:
			why := s.lost[t.Gen]
			if why == "" {
				why = "the watcher that gave the token has stopped (this one started since)"
			}
			answerNo(r.conn, why)
		case s.broken != "":
			answerNo(r.conn, s.broken)
		default:
			return s.ask(r, false)
		}
		return false
	}
	answerNo(r.conn, fmt.Sprintf("request %.40q", r.line))
	return false
}

// ask makes a question's marker; it is answered once the marker's
// inotify event (and fanotify's: needFan) has been read.
func (s *server) ask(r request, needFan bool) (quit bool) {
	s.marks++
	name := fmt.Sprintf("m%d-%d", os.Getpid(), s.marks)
	if err := s.marker(name); err != nil {
		answerNo(r.conn, fmt.Sprintf("marker: %v", err))
		return !s.stillThere()
	}
	s.pending[name] = &pending{r: r, needFan: needFan}
	return false
}

// marker makes the file named name in marks/ (held): the one file the
// watcher makes in the store, and only while its root and store are
// still there. One removed since it looked gets no new name: the kernel
// refuses a name in a removed directory.
func (s *server) marker(name string) error {
	if !s.stillThere() {
		return errors.New("the tree or its store was removed")
	}
	fd, err := unix.Openat(s.marksFd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(watchDir(s.store), "marks", name), err)
	}
	return unix.Close(fd) // empty
}

// answer answers the question whose marker's event has come: every
// change made before it was asked has been read.
func (s *server) answer(name string) {
	q, ok := s.pending[name]
	if !ok {
		return
	}
	q.in = true
	if q.needFan && !q.fan {
		return // fanotify's event of it answers
	}
	delete(s.pending, name)
	unix.Unlinkat(s.marksFd, name, 0) // ours; a leftover is harmless
	r := q.r
	if strings.HasPrefix(r.line, "writers ") {
		s.answerWriters(r)
		return
	}
	t, _ := ParseToken(strings.TrimPrefix(r.line, "since ")) // parsed when asked
	changes := s.j.since(t.Seq)
	if len(changes) > maxChanges {
		answerNo(r.conn, fmt.Sprintf("%d paths changed, more than %d", len(changes), maxChanges))
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ok %d %d\n", len(changes), s.j.seq)
	for _, c := range changes {
		if c.Deep {
			b.WriteByte('d')
		} else {
			b.WriteByte('s')
		}
		b.WriteString(c.Path)
		b.WriteByte(0)
	}
	go func() {
		r.conn.Write([]byte(b.String())) // a client gone is its own loss: it cannot vouch then
		r.conn.Close()
	}()
}

func answerOK(c net.Conn, rest string) {
	go func() {
		c.Write([]byte("ok" + rest + "\n")) // a client gone is its own loss
		c.Close()
	}()
}

func answerNo(c net.Conn, why string) {
	go func() {
		c.Write([]byte("no " + strings.ReplaceAll(why, "\n", " ") + "\n")) // a client gone is its own loss
		c.Close()
	}()
}
