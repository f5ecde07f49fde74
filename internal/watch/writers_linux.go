package watch

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxMaps bounds what is read of one process's memory map.
const maxMaps = 16 << 20

// Writers returns the files below root (paths relative to it) that a
// process has open for writing, or mapped shared and writable, now. A
// write through a shared mapping is no inotify event; the event comes
// when the file's last descriptor and mapping are gone (IN_CLOSE_WRITE:
// a mapping holds the open file too). So a reader of the watcher's
// changes reads these files as well (snapshot/watch.go), and misses no
// mapped write. It reads /proc: a process whose entries it may not read
// (another user's, for an ordinary user) is not seen.
//
// It runs in every watched checkpoint verb and costs what the system's
// processes hold (their descriptors and mappings), so it reads /proc
// with the fewest system calls it can: each process's entries relative
// to its directory, every listing and map into one buffer, and a
// string made only of what is below the root.
func Writers(root string) []string { return writersBelow(root, false) }

// writersBelow is Writers; text reads every map as text, as on a kernel
// without PROCMAP_QUERY (a test compares the two).
func writersBelow(root string, text bool) []string {
	w := writers{seen: map[string]bool{}, buf: make([]byte, 64<<10), noQuery: text}
	r := filepath.Clean(root)
	w.roots = [][]byte{[]byte(r + "/")}
	if real, err := filepath.EvalSymlinks(r); err == nil && real != r {
		w.roots = append(w.roots, []byte(real+"/"))
	}
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(proc)
	pids, ok := w.names(proc, nil)
	if !ok {
		return nil
	}
	for _, pid := range pids {
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		// Its entries by a descriptor of its directory: one process's
		// throughout, and a short lookup each.
		dir, err := unix.Openat(proc, pid, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone
		}
		// A process without memory (a kernel thread, or one that has
		// exited: its files are closed, or about to be, an event for
		// the watcher) holds no file of ours: its descriptors are not
		// listed (kernel threads are often half of the processes).
		if w.mappedWritable(dir) {
			w.openForWrite(dir)
		}
		unix.Close(dir)
	}
	return w.out
}

// writers is what Writers keeps while it reads /proc.
type writers struct {
	roots [][]byte // the root, and where its symbolic links lead, each with a slash
	seen  map[string]bool
	out   []string
	buf   []byte // a directory's listing, a process's map
	ents  []string
	link  [unix.PathMax]byte
	// noQuery: the kernel has no PROCMAP_QUERY (before Linux 6.11); maps
	// are read as text.
	noQuery bool
}

// below returns p relative to the root, if it is below it.
func (w *writers) below(p []byte) (string, bool) {
	for _, r := range w.roots {
		if rel, ok := bytes.CutPrefix(p, r); ok && len(rel) > 0 {
			return string(rel), true
		}
	}
	return "", false
}

func (w *writers) add(p []byte) {
	if rel, ok := w.below(p); ok && !w.seen[rel] {
		w.seen[rel] = true
		w.out = append(w.out, rel)
	}
}

// names lists directory fd's entries (but . and ..) into names[:0].
func (w *writers) names(fd int, names []string) ([]string, bool) {
	names = names[:0]
	for {
		n, err := unix.Getdents(fd, w.buf)
		if err != nil {
			return names, false
		}
		if n <= 0 {
			return names, true
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
	}
}

// mappedWritable adds each file the process of /proc directory dir maps
// shared and writable. It reports false when the process has no memory
// (its map is empty), true when it has, or its map could not be read.
func (w *writers) mappedWritable(dir int) bool {
	fd, err := unix.Openat(dir, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd) // read-only
	if !w.noQuery {
		has, ok := w.queryMaps(fd)
		if ok {
			return has
		}
		w.noQuery = true // an older kernel: the text, from now on
	}
	b := w.buf[:0]
	for len(b) < maxMaps {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if n == 0 && err == nil && len(b) == 0 {
			return false
		}
		if n <= 0 || err != nil {
			break
		}
		b = b[:len(b)+n]
	}
	w.buf = b[:cap(b)] // grown for the next
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil // the last, or cut at maxMaps
		}
		// address perms offset dev inode pathname
		_, rest, _ := bytes.Cut(line, []byte{' '})
		if len(rest) < 4 || rest[1] != 'w' || rest[3] != 's' {
			continue
		}
		for range 4 { // perms, offset, dev, inode
			_, rest, _ = bytes.Cut(rest, []byte{' '})
		}
		p := bytes.TrimLeft(rest, " ")
		if len(p) == 0 || p[0] != '/' || bytes.HasSuffix(p, []byte(" (deleted)")) {
			continue
		}
		if bytes.Contains(p, []byte(`\012`)) { // the kernel escapes a newline so
			p = bytes.ReplaceAll(p, []byte(`\012`), []byte("\n"))
		}
		w.add(p)
	}
	return true
}

// openForWrite adds each file below the root that the process of /proc
// directory dir has open for writing.
func (w *writers) openForWrite(dir int) {
	fds, err := unix.Openat(dir, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fds) // read-only
	w.ents, _ = w.names(fds, w.ents)
	for _, name := range w.ents {
		n, err := unix.Readlinkat(fds, name, w.link[:])
		if err != nil || n >= len(w.link) {
			continue
		}
		p := w.link[:n]
		if _, ok := w.below(p); !ok {
			continue
		}
		if writable(dir, name) {
			w.add(p)
		}
	}
}

// writable says whether descriptor name of the process of /proc
// directory dir is open for writing (its fdinfo's flags).
func writable(dir int, name string) bool {
	fd, err := unix.Openat(dir, "fdinfo/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd) // read-only
	var b [4096]byte
	n, err := unix.Read(fd, b[:])
	if err != nil || n <= 0 {
		return false
	}
	for l := range strings.SplitSeq(string(b[:n]), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return false
}

// procmapQuery is the kernel's struct procmap_query (linux/fs.h).
type procmapQuery struct {
	Size        uint64
	QueryFlags  uint64
	QueryAddr   uint64
	VMAStart    uint64
	VMAEnd      uint64
	VMAFlags    uint64
	VMAPageSize uint64
	VMAOffset   uint64
	Inode       uint64
	DevMajor    uint32
	DevMinor    uint32
	VMANameSize uint32
	BuildIDSize uint32
	VMANameAddr uint64
	BuildIDAddr uint64
}

const (
	// procmapQueryIoctl is PROCMAP_QUERY: _IOWR('f', 17, struct procmap_query).
	procmapQueryIoctl = 0xC0000000 | uint(unsafe.Sizeof(procmapQuery{}))<<16 | 'f'<<8 | 17
	procmapWritable   = 0x02
	procmapShared     = 0x08
	procmapNext       = 0x10 // the mapping covering the address, or the next one
	procmapFileBacked = 0x20
)

// queryMaps adds the files the process maps shared and writable, asking
// the kernel through the open maps file fd for those mappings alone
// (PROCMAP_QUERY, Linux 6.11+): where reading the map as text costs a
// line per mapping, most processes here have no such mapping and cost
// one call. has is false for a process without memory (a kernel thread,
// or one exiting); ok is false where the kernel does not know the call.
func (w *writers) queryMaps(fd int) (has, ok bool) {
	if len(w.buf) < unix.PathMax+1 {
		w.buf = make([]byte, 64<<10)
	}
	name := w.buf[:unix.PathMax+1]
	addr := uint64(0)
	for {
		q := procmapQuery{
			Size:        uint64(unsafe.Sizeof(procmapQuery{})),
			QueryFlags:  procmapNext | procmapWritable | procmapShared | procmapFileBacked,
			QueryAddr:   addr,
			VMANameSize: uint32(len(name)),
			VMANameAddr: uint64(uintptr(unsafe.Pointer(&name[0]))),
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(procmapQueryIoctl), uintptr(unsafe.Pointer(&q)))
		runtime.KeepAlive(name)
		switch e {
		case 0:
		case unix.ENOENT:
			return true, true // no (more) such mapping
		case unix.ESRCH:
			return false, true // no memory
		case unix.ENOTTY, unix.EINVAL, unix.EOPNOTSUPP:
			return false, false
		default:
			return true, true // gone meanwhile, or not ours to look at: as an unreadable map
		}
		if q.VMAEnd <= addr {
			return true, true // (the kernel moves on; this never loops)
		}
		addr = q.VMAEnd
		// The name is the file's path, NUL-terminated (not escaped, as the
		// text's is); " (deleted)" marks a file that has lost its name.
		if n := q.VMANameSize; n > 1 && int(n) <= len(name) {
			p := name[:n-1]
			if p[0] == '/' && !bytes.HasSuffix(p, []byte(" (deleted)")) {
				w.add(p)
			}
		}
	}
}
