package snapshot

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// TempPrefix starts the names of the temp files a restore creates next to
// their destination; scans skip them and recover removes them.
const TempPrefix = layout.TempPrefix

// Ignorer says which paths a snapshot leaves out (and restores never touch).
type Ignorer interface {
	Ignored(path string, isDir bool) bool
}

// Excluder, when an Ignorer is one too, says which of the paths it leaves
// out an overlay run still isolates (commit moves them into the tree,
// discard drops them) instead of writing them through at once.
type Excluder interface {
	Excluded(path string, isDir bool) bool
}

type statInfo struct {
	Mode     uint32 // type and permission bits
	UID, GID uint32
	Size     int64
	Mtime    int64
	Ctime    int64
	Ino, Dev uint64
	Nlink    uint64
}

func (si statInfo) key() statKey {
	return statKey{Size: si.Size, Mtime: si.Mtime, Ctime: si.Ctime, Ino: si.Ino, Dev: si.Dev, Mode: si.Mode}
}

// excluded reports paths no snapshot ever holds: the store, a store set
// aside as untrusted (check --repair: never captured, never deleted by a
// restore) and restore temps.
func excluded(path string) bool {
	return path == StoreDir || strings.HasPrefix(path, UntrustedPrefix) && !strings.Contains(path, "/") ||
		strings.HasPrefix(record.Base(path), TempPrefix)
}

// scanner reads the tree into manifests, storing (or only hashing) the
// contents of files whose stat the cache does not vouch for.
type scanner struct {
	s       *Store
	root    *fsutil.Dir
	ign     Ignorer
	cache   *statCache
	store   bool // store contents as objects; else only hash them
	noCache bool // hash everything (recover: trust nothing)
	listed  bool // scanning listed paths: each stays in the result, absent if gone
	// upper: the root is an overlay upper layer. Whiteouts become Absent
	// entries, opaque directories are noted, overlay xattrs are dropped.
	upper    bool
	opaque   map[string]bool
	redirect map[string]string // upper dir -> its overlay.redirect value

	// ctx, when set, stops the scan once done (Ctrl-C): its error wraps
	// ctx.Err(), before anything is recorded from the scan.
	ctx context.Context

	mu       sync.Mutex
	entries  []*scanned
	firstErr error

	jobs chan job
	wg   sync.WaitGroup
	// Directories are walked by up to cap(walkSlots) more goroutines than
	// the one that starts: a scan of an unchanged tree is lstat calls and
	// cache lookups, which one goroutine cannot spread over the CPUs.
	walkSlots chan struct{}
	walkers   sync.WaitGroup

	progress    progressFunc // hears of each path seen and file read
	stats       ScanStats
	skipped     []record.Skipped // guarded by mu
	hashed      atomic.Int64     // files whose content was read
	bytesHashed atomic.Int64
}

// ScanStats says how much a scan had to read: a scan of an unchanged tree
// whose stat cache is warm reads nothing.
type ScanStats struct {
	Entries   int   // paths seen
	FilesRead int   // files whose content was read
	BytesRead int64 // their bytes
	// Skipped are the paths seen that snapshots do not hold (sockets,
	// devices), sorted.
	Skipped []record.Skipped
}

type scanned struct {
	record.Entry
	st     statInfo
	cached bool // the stat cache vouched for the content
	gone   bool // removed between the listing and the read: not in the snapshot
}

// beforeHash, when set (by tests), runs just before a file is opened to be
// read: it lets a test remove the file at that moment, as a concurrent
// `git gc` does, which a real race would hit only by chance.
var beforeHash func(path string)

type job struct {
	dir *dirRef
	e   *scanned
}

// dirRef shares an open directory between the walk and the hashing
// workers; the last user closes it.
type dirRef struct {
	d *fsutil.Dir
	n atomic.Int32
}

func (r *dirRef) release() {
	if r.n.Add(-1) == 0 {
		r.d.Close()
	}
}

func (s *Store) newScanner(root *fsutil.Dir, ign Ignorer, store bool) *scanner {
	sc := &scanner{s: s, root: root, ign: ign, cache: s.loadCache(), store: store}
	return sc
}

func (sc *scanner) fail(err error) {
	sc.mu.Lock()
	if sc.firstErr == nil {
		sc.firstErr = err
	}
	sc.mu.Unlock()
}

func (sc *scanner) start() {
	sc.jobs = make(chan job, 256)
	sc.walkSlots = make(chan struct{}, runtime.GOMAXPROCS(0))
	n := runtime.GOMAXPROCS(0)
	if n < 2 {
		n = 2
	}
	for i := 0; i < n; i++ {
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			for j := range sc.jobs {
				if err := sc.hash(j.dir.d, j.e); err != nil {
					sc.fail(err)
				}
				j.dir.release()
			}
		}()
	}
}

// finish waits for the workers and returns the sorted manifest, with hard
// links grouped.
func (sc *scanner) finish() (record.Manifest, error) {
	sc.walkers.Wait()
	close(sc.jobs)
	sc.wg.Wait()
	if sc.firstErr != nil {
		return nil, sc.firstErr
	}
	if sc.listed {
		for _, e := range sc.entries {
			if e.gone { // a listed path is in the result, as absent
				e.Entry = record.Entry{Path: e.Path, Type: record.Absent}
			}
		}
	} else {
		sc.entries = slices.DeleteFunc(sc.entries, func(e *scanned) bool { return e.gone })
	}
	slices.SortFunc(sc.entries, func(a, b *scanned) int { return strings.Compare(a.Path, b.Path) })
	m := make(record.Manifest, len(sc.entries))
	first := map[[2]uint64]string{}
	for i, e := range sc.entries {
		if e.Type == record.File && e.st.Nlink > 1 {
			k := [2]uint64{e.st.Dev, e.st.Ino}
			if p, ok := first[k]; ok {
				e.Link = p
			} else {
				first[k] = e.Path
			}
		}
		m[i] = e.Entry
	}
	sort.Slice(sc.skipped, func(i, j int) bool { return sc.skipped[i].Path < sc.skipped[j].Path })
	sc.stats = ScanStats{Entries: len(m), FilesRead: int(sc.hashed.Load()), BytesRead: sc.bytesHashed.Load(), Skipped: sc.skipped}
	return m, nil
}

// entryOf builds the entry for name in d (at path) from its stat; ok is
// false for what snapshots do not hold (sockets, devices).
func (sc *scanner) entryOf(d *fsutil.Dir, name, path string, st *unix.Stat_t) (*scanned, bool, error) {
	si := statOf(st)
	e := &scanned{st: si}
	e.Path = path
	e.Mode = si.Mode & 0o7777
	e.UID, e.GID = si.UID, si.GID
	e.Mtime = si.Mtime
	e.Ctime, e.Inode, e.Nlink = si.Ctime, [2]uint64{si.Dev, si.Ino}, si.Nlink
	switch si.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = record.File
		e.Size = si.Size
	case unix.S_IFDIR:
		e.Type = record.Dir
	case unix.S_IFLNK:
		e.Type = record.Symlink
		t, err := d.Readlink(name)
		if errors.Is(err, unix.ENOENT) {
			return nil, false, nil // removed since it was listed
		}
		if err != nil {
			return nil, false, err
		}
		e.Target = t
		e.Mode = 0o777
	case unix.S_IFIFO:
		e.Type = record.Fifo
	default:
		kind := record.SkippedDevice
		if si.Mode&unix.S_IFMT == unix.S_IFSOCK {
			kind = record.SkippedSocket
		}
		sc.mu.Lock()
		sc.skipped = append(sc.skipped, record.Skipped{Path: path, Type: kind})
		sc.mu.Unlock()
		return nil, false, nil
	}
	if e.Type == record.File && !sc.noCache {
		if ce, ok := sc.cache.lookup(path, si.key()); ok {
			e.Object, e.cached = ce.Object, true
			if ce.NoXattrs {
				return e, true, nil
			}
		}
	}
	if e.Type != record.Symlink {
		xs, err := d.Xattrs(name)
		if errors.Is(err, unix.ENOENT) {
			return nil, false, nil // removed since it was listed
		}
		if err != nil {
			return nil, false, err
		}
		if sc.upper {
			xs = sc.overlayXattrs(path, xs)
		}
		e.Xattrs = xs
	}
	return e, true, nil
}

// add records an entry and queues its content for hashing if needed.
func (sc *scanner) add(ref *dirRef, e *scanned) {
	sc.mu.Lock()
	sc.entries = append(sc.entries, e)
	n := len(sc.entries)
	sc.mu.Unlock()
	if sc.progress != nil {
		sc.progress(Progress{Step: StepScan, Paths: int64(n), Bytes: sc.bytesHashed.Load()})
	}
	if e.Type != record.File {
		return
	}
	if e.cached {
		return // entryOf found the content in the stat cache
	}
	ref.n.Add(1)
	sc.jobs <- job{dir: ref, e: e}
}

// hash reads (and, when storing, stores) one file's content.
func (sc *scanner) hash(d *fsutil.Dir, e *scanned) error {
	if err := sc.stopped(); err != nil {
		return err
	}
	name := record.Base(e.Path)
	if beforeHash != nil {
		beforeHash(e.Path)
	}
	f, err := d.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		// Removed since it was listed (a `git gc` packing loose objects
		// while a checkpoint begins): the snapshot is of a live tree, and
		// the file is no longer part of it.
		e.gone = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	defer f.Close() // read-only
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("read %s: replaced by something else during the snapshot", e.Path)
	}
	hashedAt := time.Now().UnixNano()
	var obj record.ObjectID
	var size int64
	if sc.store {
		obj, size, err = sc.s.PutFile(f)
	} else {
		var sum [32]byte
		sum, size, err = fsutil.HashFile(f)
		obj = sum
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	e.Object, e.Size = obj, size
	sc.hashed.Add(1)
	sc.bytesHashed.Add(size)
	if sc.store {
		// Cache what the file's stat is now: if it changed while we read,
		// the key will not match next time and the file is read again.
		after := statOf(&st)
		if after.key() == e.st.key() && size == e.st.Size {
			sc.cache.put(e.Path, after.key(), obj, hashedAt, len(e.Xattrs) == 0)
		}
	}
	return nil
}

// stopped is the scan's context's error, once it is done.
func (sc *scanner) stopped() error {
	if sc.ctx == nil || sc.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("scan: %w", sc.ctx.Err())
}

// walk scans the directory at path (open as ref) recursively.
func (sc *scanner) walk(ref *dirRef, path string) error {
	if err := sc.stopped(); err != nil {
		return err
	}
	names, err := ref.d.ReadDirNames()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		p := name
		if path != "" {
			p = path + "/" + name
		}
		if excluded(p) {
			continue
		}
		st, err := ref.d.Lstat(name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed while we looked: not part of this snapshot
			}
			return err
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if sc.ign != nil && sc.ign.Ignored(p, isDir) {
			continue
		}
		if sc.upper && isWhiteout(ref.d, name, &st) {
			sc.mu.Lock()
			sc.entries = append(sc.entries, &scanned{Entry: record.Entry{Path: p, Type: record.Absent}})
			sc.mu.Unlock()
			continue
		}
		e, ok, err := sc.entryOf(ref.d, name, p, &st)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		sc.add(ref, e)
		if isDir {
			if err := sc.walkSub(ref.d, name, p); errors.Is(err, unix.ENOENT) {
				e.gone = true // removed since it was listed
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

// walkSub walks the directory name in d, which is the tree's path p: in
// a goroutine of its own when a slot is free (its error then reaches
// finish through fail), else at once.
func (sc *scanner) walkSub(d *fsutil.Dir, name, p string) error {
	sub, err := d.OpenDir(name)
	if err != nil {
		return err
	}
	r := &dirRef{d: sub}
	r.n.Store(1)
	select {
	case sc.walkSlots <- struct{}{}:
		sc.walkers.Add(1)
		go func() {
			defer sc.walkers.Done()
			if err := sc.walk(r, p); err != nil {
				sc.fail(err)
			}
			r.release()
			<-sc.walkSlots
		}()
		return nil
	default:
	}
	err = sc.walk(r, p)
	r.release()
	return err
}

// scanTree reads every path of the tree (but ignored and excluded ones).
func (sc *scanner) scanTree() (record.Manifest, error) {
	sc.start()
	top, err := sc.root.OpenDir("")
	if err != nil {
		sc.finish()
		return nil, err
	}
	r := &dirRef{d: top}
	r.n.Store(1)
	err = sc.walk(r, "")
	r.release()
	m, ferr := sc.finish()
	if err != nil {
		return nil, err
	}
	return m, ferr
}

// scanPaths reads the listed paths (absent ones as Absent entries), and
// everything below those that are directories when deep is set.
func (sc *scanner) scanPaths(paths []string, deep bool) (record.Manifest, error) {
	return sc.scanPathsDeep(paths, func(string) bool { return deep })
}

func (sc *scanner) scanPathsDeep(paths []string, deep func(string) bool) (record.Manifest, error) {
	sc.listed = true
	sc.start()
	var err error
	seen := map[string]bool{}
	for _, p := range paths {
		if seen[p] {
			continue
		}
		seen[p] = true
		if err = sc.scanOne(p, deep(p)); err != nil {
			break
		}
	}
	m, ferr := sc.finish()
	if err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, ferr
	}
	// A deep scan can reach a path twice (listed and below a listed dir).
	out := m[:0]
	for i := range m {
		if len(out) > 0 && out[len(out)-1].Path == m[i].Path {
			continue
		}
		out = append(out, m[i])
	}
	return out, nil
}

func (sc *scanner) scanOne(p string, deep bool) error {
	absent := func() {
		sc.mu.Lock()
		sc.entries = append(sc.entries, &scanned{Entry: record.Entry{Path: p, Type: record.Absent}})
		sc.mu.Unlock()
	}
	d, err := sc.root.OpenDir(record.Parent(p))
	if err != nil {
		// A parent that is missing, a file, or a symlink: the path does not
		// exist as a path of this tree.
		if errors.Is(err, unix.ENOENT) || errors.Is(err, fsutil.ErrEscape) {
			absent()
			return nil
		}
		return err
	}
	ref := &dirRef{d: d}
	ref.n.Store(1)
	defer ref.release()
	name := record.Base(p)
	st, err := d.Lstat(name)
	if errors.Is(err, unix.ENOENT) {
		absent()
		return nil
	}
	if err != nil {
		return err
	}
	e, ok, err := sc.entryOf(d, name, p, &st)
	if err != nil {
		return err
	}
	if !ok {
		absent() // a socket or device: not something snapshots hold
		return nil
	}
	sc.add(ref, e)
	if deep && e.Type == record.Dir {
		return sc.walkSub(d, name, p)
	}
	return nil
}
