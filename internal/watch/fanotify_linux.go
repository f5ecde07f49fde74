//go:build linux

package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Who wrote: see doc.go ("Writers' processes").

// fanMask is what the fanotify group hears of each directory of the
// tree, as its inotify watch: every change of a name's contents,
// metadata, or of the directory's listing, on files and directories.
const fanMask = unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CLOSE_WRITE | unix.FAN_CREATE | unix.FAN_DELETE |
	unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_ONDIR | unix.FAN_EVENT_ON_CHILD

// lineage is a writer and its ancestors, the writer first; nil: not known
// (the process was gone before it was read).
type lineage []Proc

// fanEvent is one fanotify event, its directory's handle (fsid, type,
// bytes) as a map key.
type fanEvent struct {
	mask     uint64
	dir      string
	name     string
	who      *lineage
	overflow bool
}

// handleKey makes a directory handle's map key.
func handleKey(fsid [2]int32, typ int32, b []byte) string {
	var k [12]byte
	binary.LittleEndian.PutUint32(k[0:], uint32(fsid[0]))
	binary.LittleEndian.PutUint32(k[4:], uint32(fsid[1]))
	binary.LittleEndian.PutUint32(k[8:], uint32(typ))
	return string(k[:]) + string(b)
}

// dirHandle is the key of the directory at path (dirfd: relative to it;
// "" with dirfd: the directory itself), on the filesystem fsid.
func dirHandle(fsid [2]int32, dirfd int, path string) (string, error) {
	flags := 0
	if path == "" {
		flags = unix.AT_EMPTY_PATH
	}
	h, _, err := unix.NameToHandleAt(dirfd, path, flags)
	if err != nil {
		return "", err
	}
	return handleKey(fsid, h.Type(), h.Bytes()), nil
}

func fsidOf(st *unix.Statfs_t) [2]int32 { return [2]int32{st.Fsid.Val[0], st.Fsid.Val[1]} }

// fanGroup is a fanotify group with a mark on each directory of the tree
// (not one on the whole filesystem: the events of the rest of the
// machine would cost a pidfd each) and on the watcher's marks/.
type fanGroup struct {
	fd      int           // the group, non-blocking: its reader's, which closes it
	stopped atomic.Bool   // the reader is to stop
	done    chan struct{} // closed with stopped set
	// wake is an eventfd stop writes, so that a reader waiting for
	// events stops at once; closed by the last of stop and the reader.
	wake     int
	wakeRefs atomic.Int32
	exits    *exits // the reader's (nil: none)
	marksKey string // marks/'s handle
	rootFsid [2]int32
	// dirs is each watched directory's path by its handle: written by
	// the main loop, read by the reader (which resolves the writers of
	// the tree's events only).
	mu   sync.RWMutex
	dirs map[string]string
}

// openFan makes the watcher's fanotify group, or says why there is none:
// it needs root, pidfs (a pidfd names one process for good), and a
// filesystem that gives file handles.
func openFan(root string, marksFd int) (*fanGroup, string) {
	if os.Geteuid() != 0 {
		return nil, "the watcher does not run as root (fanotify needs it)"
	}
	pfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return nil, fmt.Sprintf("pidfd: %v", err)
	}
	var pst unix.Statfs_t
	err = unix.Fstatfs(pfd, &pst)
	unix.Close(pfd)
	if err != nil || pst.Type != unix.PID_FS_MAGIC {
		return nil, "this kernel has no pidfs (Linux 6.9 or later)"
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_UNLIMITED_MARKS|unix.FAN_REPORT_DFID_NAME|unix.FAN_REPORT_PIDFD, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Sprintf("fanotify: %v", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Sprintf("eventfd: %v", err)
	}
	// The exits heard from now on, before any directory is marked.
	g := &fanGroup{fd: fd, wake: wake, dirs: map[string]string{}, done: make(chan struct{}), exits: openExits()}
	g.wakeRefs.Store(2) // stop's and the reader's
	fail := func(why string) (*fanGroup, string) {
		unix.Close(fd)
		unix.Close(wake)
		g.exits.close()
		return nil, why
	}
	marks := fmt.Sprintf("/proc/self/fd/%d", marksFd)
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_ONLYDIR, unix.FAN_CREATE, unix.AT_FDCWD, marks); err != nil {
		return fail(fmt.Sprintf("fanotify mark on the store's marks/: %v", err))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fail(err.Error())
	}
	g.rootFsid = fsidOf(&st)
	if err := unix.Fstatfs(marksFd, &st); err != nil {
		return fail(err.Error())
	}
	if g.marksKey, err = dirHandle(fsidOf(&st), marksFd, ""); err != nil {
		return fail(fmt.Sprintf("the store's marks/ has no file handle: %v", err))
	}
	return g, ""
}

// addDir marks the directory p (abs) watched, and notes its handle;
// false: it could not (the writers of what changes in it could not be
// told).
func (g *fanGroup) addDir(p, abs string) bool {
	err := unix.FanotifyMark(g.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_ONLYDIR|unix.FAN_MARK_DONT_FOLLOW, fanMask, unix.AT_FDCWD, abs)
	var k string
	if err == nil {
		k, err = dirHandle(g.rootFsid, unix.AT_FDCWD, abs)
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return true // gone or replaced since: its parent's event says so
	}
	if err != nil {
		return false
	}
	g.mu.Lock()
	g.dirs[k] = p
	g.mu.Unlock()
	return true
}

// dropUnder forgets the directories at or below p.
func (g *fanGroup) dropUnder(p string) {
	g.mu.Lock()
	for k, d := range g.dirs {
		if under(d, p) {
			delete(g.dirs, k)
		}
	}
	g.mu.Unlock()
}

func (g *fanGroup) dirPath(k string) (string, bool) {
	g.mu.RLock()
	p, ok := g.dirs[k]
	g.mu.RUnlock()
	return p, ok
}

// stop has the reader stop, and close the group.
func (g *fanGroup) stop() {
	if !g.stopped.Swap(true) {
		close(g.done)
		unix.Write(g.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0}) // cannot fail: the count is far from its maximum
		g.releaseWake()
	}
}

// releaseWake closes wake once both stop and the reader are done with it.
func (g *fanGroup) releaseWake() {
	if g.wakeRefs.Add(-1) == 0 {
		unix.Close(g.wake)
	}
}

// exitsEvery: the reader reads the exits told at most this often (when
// the machine's processes exit faster), and at once otherwise; with
// no event and no exit it sleeps until one comes.
const exitsEvery = 100 * time.Millisecond

// readFan passes the group's events to the main loop, each with its
// writer's lineage read at once (see doc.go), until stopped.
func readFan(g *fanGroup, out chan<- []fanEvent) {
	defer close(out)
	defer unix.Close(g.fd)
	defer g.releaseWake()
	rv := &resolver{byIno: map[uint64]*lineage{}, exits: g.exits}
	defer rv.exits.close()
	buf := make([]byte, 64<<10)
	var drained time.Time
	for !g.stopped.Load() {
		before := monoNow()
		n, err := unix.Read(g.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			// Empty at before: every write's event of before is read.
			fds := []unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLIN}, {Fd: int32(g.wake), Events: unix.POLLIN}}
			timeout := -1
			if rv.exits != nil {
				if since := time.Since(drained); since >= exitsEvery {
					rv.exits.drain()
					rv.exits.evict(before)
					drained = time.Now()
					fds = append(fds, unix.PollFd{Fd: int32(rv.exits.fd), Events: unix.POLLIN})
				} else {
					timeout = int((exitsEvery - since + time.Millisecond - 1) / time.Millisecond)
				}
			}
			unix.Poll(fds, timeout) // woken or not, look again
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		var evs []fanEvent
		rv.waitUntil = 0 // a new batch: a new wait for exits not told yet
		for off := 0; off+fanMetaLen <= n; {
			md := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			end := off + int(md.Event_len)
			if md.Vers != unix.FANOTIFY_METADATA_VERSION || int(md.Event_len) < fanMetaLen || end > n {
				evs = append(evs, fanEvent{overflow: true}) // not understood: nothing is known of the writers
				break
			}
			if md.Fd >= 0 {
				unix.Close(int(md.Fd)) // not asked for (handles are)
			}
			ev := fanEvent{mask: md.Mask, overflow: md.Mask&unix.FAN_Q_OVERFLOW != 0}
			pidfd := -1
			for i := off + int(md.Metadata_len); i+4 <= end; {
				typ, l := buf[i], int(binary.LittleEndian.Uint16(buf[i+2:]))
				if l < 4 || i+l > end {
					break
				}
				rec := buf[i : i+l]
				switch typ {
				case unix.FAN_EVENT_INFO_TYPE_DFID_NAME, unix.FAN_EVENT_INFO_TYPE_DFID:
					if len(rec) >= 20 {
						fsid := [2]int32{int32(binary.LittleEndian.Uint32(rec[4:])), int32(binary.LittleEndian.Uint32(rec[8:]))}
						hb := int(binary.LittleEndian.Uint32(rec[12:]))
						if 20+hb <= len(rec) {
							ev.dir = handleKey(fsid, int32(binary.LittleEndian.Uint32(rec[16:])), rec[20:20+hb])
							name := rec[20+hb:]
							if z := indexZero(name); z >= 0 {
								name = name[:z]
							}
							ev.name = string(name)
						}
					}
				case unix.FAN_EVENT_INFO_TYPE_PIDFD:
					if len(rec) >= 8 {
						pidfd = int(int32(binary.LittleEndian.Uint32(rec[4:])))
					}
				}
				i += l
			}
			if _, ok := g.dirPath(ev.dir); ok && md.Pid > 0 {
				if pidfd >= 0 {
					ev.who = rv.who(int(md.Pid), pidfd)
				} else if pidfd == unix.FAN_NOPIDFD {
					ev.who = rv.gone(int(md.Pid))
				}
			}
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			evs = append(evs, ev)
			off = end
		}
		select {
		case out <- evs:
		case <-g.done: // nobody reads them any more
			return
		}
	}
}

// maxProcs bounds the resolver's cache.
const maxProcs = 1 << 14

// resolver reads writers' lineages, each process once: by its pidfd's
// inode (pidfs numbers each process once for the system's life); and,
// for a writer gone, from its exit (exits: nil where the process
// connector could not be heard).
type resolver struct {
	byIno map[uint64]*lineage
	exits *exits
	// waitUntil: until when (monotonic ns) the batch being read waits
	// for exits not told yet; 0: not waited yet.
	waitUntil uint64
}

// exitWait bounds how long the reader waits, for a batch of events, for
// the exits of writers gone and not told yet (see exits): a process's
// exit is told as soon as it runs again after its parent was told.
const exitWait = 1_000_000_000 // ns

// who is the lineage of the writer pid, whose pidfd the event brought
// (the process itself, while it or its zombie is there); nil when it
// could not be read.
func (rv *resolver) who(pid, pidfd int) *lineage {
	var st unix.Stat_t
	if unix.Fstat(pidfd, &st) != nil {
		return nil
	}
	if l, ok := rv.byIno[st.Ino]; ok {
		return l
	}
	self, ppid, err := procStat(pid)
	// The process read at pid is the pidfd's when that is still there
	// after the read: a pid is taken again only once its process is gone.
	if err != nil || unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return rv.gone(pid) // reaped meanwhile
	}
	l := ancestry(self, ppid)
	if l == nil {
		return nil
	}
	if len(rv.byIno) >= maxProcs {
		clear(rv.byIno)
	}
	rv.byIno[st.Ino] = &l
	return &l
}

// ancestry is the lineage of the process self, whose parent was ppid;
// nil when an ancestor cannot be read.
func ancestry(self Proc, ppid int) lineage {
	l := lineage{self}
	for ppid > 0 && len(l) < 256 {
		p, pp, err := procStat(ppid)
		if err != nil || p.Start > l[len(l)-1].Start {
			// Gone, or a later process took its id: the rest is not
			// known, nor is whether a session's agent is in it.
			return nil
		}
		l, ppid = append(l, p), pp
	}
	return l
}

// gone is the lineage of the writer pid, reaped before its event was
// read: from its exit, the one of that id told and not forgotten (see
// exits), its parent then, alive now and started by then, or gone too
// (its own exit then says its parent). Its start time is not known (0):
// it is no agent. An exit not told yet (a process is reaped before it
// tells its exit) is waited for, up to exitWait for the batch: it is
// told unless the connector lost it (then the writer is not known).
func (rv *resolver) gone(pid int) *lineage {
	if rv.exits == nil {
		return nil
	}
	rv.exits.drain()
	var l lineage
	after := uint64(0)
	for len(l) < 256 {
		e, n := rv.exits.exitOf(pid, after)
		for n == 0 && rv.waitExit() {
			e, n = rv.exits.exitOf(pid, after)
		}
		if n != 1 {
			return nil
		}
		l = append(l, Proc{Pid: pid})
		if p, pp, err := procStat(e.parent); err == nil && p.Start*nsPerTick <= bootTime(e.at) {
			rest := ancestry(p, pp)
			if rest == nil {
				return nil
			}
			l = append(l, rest...)
			return &l
		}
		pid, after = e.parent, e.at // gone, or its id taken since
	}
	return nil
}

// waitExit waits for more exits to be told, within the batch's wait;
// false when there is no more to wait.
func (rv *resolver) waitExit() bool {
	if rv.waitUntil == 0 {
		rv.waitUntil = monoNow() + exitWait
	}
	return rv.exits.wait(rv.waitUntil)
}

// procStat reads pid's start time, name and parent from /proc.
func procStat(pid int) (self Proc, ppid int, err error) {
	self, ppid, _, err = procStatName(pid)
	return self, ppid, err
}

func procStatName(pid int) (self Proc, ppid int, name string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, 0, "", err
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return Proc{}, 0, "", fmt.Errorf("/proc/%d/stat: %.40q", pid, s)
	}
	f := strings.Fields(s[j+1:]) // state, ppid, … starttime is the 20th
	if len(f) < 20 {
		return Proc{}, 0, "", fmt.Errorf("/proc/%d/stat: %.40q", pid, s)
	}
	pp, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return Proc{}, 0, "", fmt.Errorf("/proc/%d/stat: %.40q", pid, s)
	}
	return Proc{pid, start}, pp, s[i+1 : j], nil
}

// PidNS is this process's pid namespace (its inode), 0 when unknown: a
// [Proc] is meaningful in its namespace only.
func PidNS() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// shells are the programs a harness runs its hooks through, and
// snapback: none of them is an agent.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "fish": true, "snapback": true}

// notAgents are programs whose descendants are a whole login's (a
// person's shells, other agents): found where an agent should be (a
// begin typed in a terminal), no agent is known.
var notAgents = map[string]bool{"init": true, "systemd": true, "sshd": true, "sshd-session": true, "login": true,
	"su": true, "sudo": true, "runuser": true, "tmux: server": true, "tmux": true, "screen": true, "SCREEN": true,
	"script": true, "tini": true, "dumb-init": true}

// Agent is the process of the agent that runs this hook: the nearest
// ancestor that is not a shell or snapback (a harness runs hooks
// through a shell, the agent then being the hook's grandparent). ok is
// false where none is known (init's children, a login's or a terminal
// multiplexer's, /proc unreadable).
func Agent() (p Proc, ok bool) {
	pid := os.Getppid()
	for i := 0; i < 64 && pid > 1; i++ {
		self, ppid, name, err := procStatName(pid)
		if err != nil {
			return Proc{}, false
		}
		if !shells[name] && !strings.HasPrefix(name, "snapback") {
			return self, !notAgents[name]
		}
		pid = ppid
	}
	return Proc{}, false
}

// fanFail notes why this generation cannot tell who wrote (the first
// reason stays).
func (s *server) fanFail(why string) {
	if s.fanBroken == "" {
		s.fanBroken = why
	}
}

// handleFan notes one fanotify event: a marker's, or a write in the tree
// with its writer; the paths noted are those inotify's event notes.
func (s *server) handleFan(ev fanEvent) {
	if s.fan == nil {
		return
	}
	if ev.overflow {
		// Writers of what happened before are not all known: only a
		// stretch that begins after this can be told.
		s.fanLost = s.j.next()
		for name, q := range s.pending {
			if q.needFan { // its marker's event may be among those lost
				answerNo(q.r.conn, "the fanotify queue overflowed (writers were not all read)")
				delete(s.pending, name)
				unix.Unlinkat(s.marksFd, name, 0) // ours; a leftover is harmless
			}
		}
		return
	}
	if ev.dir == s.fan.marksKey {
		if q, ok := s.pending[ev.name]; ok && ev.mask&unix.FAN_CREATE != 0 {
			q.fan = true
			if q.in {
				s.answer(ev.name)
			}
		}
		return
	}
	dir, ok := s.fan.dirPath(ev.dir)
	if !ok {
		return // not in the tree, or a directory watched since (its deep note covers it)
	}
	p := dir
	if ev.name != "." && ev.name != "" {
		p = join(dir, ev.name)
	}
	seq := s.j.next()
	s.wrote1(p, ev.who, seq)
	if ev.mask&(unix.FAN_CREATE|unix.FAN_DELETE|unix.FAN_MOVED_FROM|unix.FAN_MOVED_TO) != 0 {
		s.wrote1(dir, ev.who, seq)
	}
}

// wrote is a writer of a path, and the number of its last write there.
type wrote struct {
	who *lineage
	seq uint64
}

func (s *server) wrote1(p string, who *lineage, seq uint64) {
	w, ok := s.wrote[p]
	if !ok && len(s.wrote) >= maxNoted {
		clear(s.wrote)
		s.fanLost = seq
	}
	for i := range w {
		if w[i].who == who {
			w[i].seq = seq
			return
		}
	}
	if len(w) >= 64 {
		who = nil // too many writers to keep: not known
		for i := range w {
			if w[i].who == nil {
				w[i].seq = seq
				return
			}
		}
	}
	s.wrote[p] = append(w, wrote{who, seq})
}

// writersRefused says why a "writers" question cannot be answered, ""
// when it can.
func (s *server) writersRefused(line string) string {
	f := strings.Fields(line)
	if len(f) < 3 {
		return fmt.Sprintf("request %.40q", line)
	}
	t, err := ParseToken(f[1])
	switch {
	case err != nil:
		return err.Error()
	case t.Gen != s.gen:
		return "the watcher that gave the token has stopped (this one started since)"
	case s.broken != "":
		return s.broken
	case s.fan == nil:
		return s.fanWhy
	case s.fanBroken != "":
		return s.fanBroken
	case t.Seq < s.fanLost:
		return "the fanotify queue overflowed (writers were not all read)"
	case f[2] != strconv.FormatUint(PidNS(), 10):
		return "the agents' processes are in another pid namespace"
	}
	return ""
}

// answerWriters answers "writers TOKEN NS PROC…": for each path changed
// after the token, which of the processes' trees wrote it: their
// indices, and "?" for a writer that is none of theirs or is not known,
// or a change whose writer was not heard (below a directory that came,
// went or moved, whose paths' events are told under other names).
func (s *server) answerWriters(r request) {
	f := strings.Fields(r.line)
	t, _ := ParseToken(f[1]) // parsed when asked
	var roots []Proc
	for _, x := range f[3:] {
		a, b, _ := strings.Cut(x, ":")
		pid, err1 := strconv.Atoi(a)
		start, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil {
			answerNo(r.conn, fmt.Sprintf("process %.40q", x))
			return
		}
		roots = append(roots, Proc{pid, start})
	}
	if s.fanBroken != "" || t.Seq < s.fanLost { // since it was asked
		answerNo(r.conn, "the writers were not all read")
		return
	}
	changes := s.j.since(t.Seq)
	if len(changes) > maxChanges {
		answerNo(r.conn, fmt.Sprintf("%d paths changed, more than %d", len(changes), maxChanges))
		return
	}
	deep := map[string]bool{}
	for _, c := range changes {
		if c.Deep {
			deep[c.Path] = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ok %d\n", len(changes))
	for _, c := range changes {
		b.WriteString(c.Path)
		b.WriteByte(0)
		b.WriteString(strings.Join(s.writersOf(c.Path, t.Seq, roots, deep), ","))
		b.WriteByte(0)
	}
	go func() {
		r.conn.Write([]byte(b.String())) // a client gone is its own loss
		r.conn.Close()
	}()
}

// writersOf lists which of roots' trees wrote p after seq ("?": a
// writer none of theirs, or not known).
func (s *server) writersOf(p string, seq uint64, roots []Proc, deep map[string]bool) []string {
	for q := p; ; q = parent(q) {
		if deep[q] {
			return []string{"?"}
		}
		if q == "" {
			break
		}
	}
	set := map[string]bool{}
	for _, w := range s.wrote[p] {
		who, at := w.who, w.seq
		if at <= seq {
			continue
		}
		found := false
		if who != nil {
			for i, r := range roots {
				if slices.Contains(*who, r) {
					set[strconv.Itoa(i)], found = true, true
				}
			}
		}
		if !found {
			set["?"] = true
		}
	}
	if len(set) == 0 {
		return []string{"?"} // changed, no writer heard
	}
	return slices.Sorted(maps.Keys(set))
}

// fanMetaLen is the size of struct fanotify_event_metadata.
const fanMetaLen = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
