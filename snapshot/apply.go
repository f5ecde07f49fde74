package snapshot

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// applier makes the tree match a target manifest: for ScopeTree every path
// of the tree, for ScopePaths the manifest's paths and what lies below
// those that stop being directories. Every step only looks at the tree as
// it is now and moves it towards the target, so running it again after a
// crash finishes the job (it is idempotent). Each path is replaced by a
// rename from a temp file in its own directory, so no path is ever torn;
// no operation follows a symlink (see [fsutil.Dir]).
type applier struct {
	s      *Store
	root   *fsutil.Dir
	opID   string
	target record.Manifest
	scope  record.Scope
	dirs   map[string]*fsutil.Dir
	tmpN   int
	isRoot bool
	// touched collects the directories whose entries changed; dirMtime
	// holds each directory's mtime from before this apply changed it.
	touched  map[string]bool
	dirMtime map[string]int64
	// knownMtime, when set, holds directories' mtimes from before the
	// operation began (its journal's DirTimes): after a crash they are
	// what dirMtime must hold, not the times the attempt left.
	knownMtime map[string]int64
	// written lists the regular files put in place, to sync; others
	// counts the other entries (synced with their directories).
	written []string
	others  int
	// src, when set, is an upper layer holding the target's contents:
	// entries are moved from it (a rename) rather than copied from the
	// store. What is no longer there comes from the store.
	src     *fsutil.Dir
	srcDirs map[string]*fsutil.Dir
	// keep: paths whose contents come from the store even so, their
	// layer entries left in place (parts of files: journal.Kept).
	keep map[string]bool
	// staged: contents may still be in the store's staging area.
	staged bool
	// rollback: putting back what an operation replaced, from the
	// staged links first (the tree's own inodes: an object of the same
	// content may be the damaged one that made the operation fail).
	rollback bool
	// cache, when set, learns the stat of every file written from an
	// object, so the next scan need not read it back.
	cache *statCache
	// open, when set, is where contents come from instead of the store
	// (an archive being restored), and rootPath is then the root's path.
	open     func(record.ObjectID) (io.ReadCloser, error)
	rootPath string
	// progress, when set, hears of each path applied.
	progress progressFunc
}

func (a *applier) close() {
	for _, d := range a.dirs {
		d.Close()
	}
	for _, d := range a.srcDirs {
		d.Close()
	}
	a.dirs, a.srcDirs = nil, nil
}

func (a *applier) dir(p string) (*fsutil.Dir, error) {
	if d, ok := a.dirs[p]; ok {
		return d, nil
	}
	d, err := a.root.OpenDir(p)
	if err != nil {
		return nil, err
	}
	a.dirs[p] = d
	if _, ok := a.dirMtime[p]; !ok {
		// Opened before anything in it changes: its time as it was.
		var st unix.Stat_t
		if t, ok := a.knownMtime[p]; ok {
			a.dirMtime[p] = t
		} else if unix.Fstat(d.Fd(), &st) == nil {
			a.dirMtime[p] = st.Mtim.Nano()
		}
	}
	return d, nil
}

// forget drops cached handles at or below p (it was removed or replaced).
func (a *applier) forget(p string) {
	for k, d := range a.dirs {
		if record.Under(k, p) && k != "" {
			d.Close()
			delete(a.dirs, k)
		}
	}
}

func (a *applier) tmpName() string {
	a.tmpN++
	return TempPrefix + a.opID + "." + strconv.Itoa(a.tmpN)
}

// covered reports whether the tree's path p is governed by the target.
func (a *applier) covered(p string) bool {
	if a.scope == record.ScopeTree {
		return true
	}
	return a.target.Find(p) != nil || belowRemoved(a.target, p)
}

// run applies the target given cur, the tree's current state of the
// covered paths (from a scan with hashes).
func (a *applier) run(cur record.Manifest) error {
	a.dirs = map[string]*fsutil.Dir{}
	a.srcDirs = map[string]*fsutil.Dir{}
	a.touched = map[string]bool{}
	a.dirMtime = map[string]int64{}
	a.isRoot = os.Geteuid() == 0
	defer a.close()

	// Each path of the target counts once, when it is put in place or
	// (absent from the target) removed; one already absent is not
	// counted, so the count may end a little under the total.
	done, total := int64(0), int64(len(a.target))
	step := func() {
		done++
		report(a.progress, Progress{Step: StepApply, Paths: min(done, total), Total: total})
	}
	defer func() {
		report(a.progress, Progress{Step: StepApply, Paths: min(done, total), Total: total, Done: true})
	}()
	// 1. Remove what must go, deepest first.
	removed := map[string]bool{}
	for i := len(cur) - 1; i >= 0; i-- {
		c := &cur[i]
		if c.Type == record.Absent || !a.covered(c.Path) {
			continue
		}
		t := a.target.Find(c.Path)
		if t != nil && t.Type == c.Type && t.Type != record.Absent {
			continue
		}
		if err := a.remove(c); err != nil {
			return err
		}
		removed[c.Path] = true
		if t == nil || t.Type == record.Absent {
			step() // a path that goes: done with it
		}
		fsutil.CrashPoint("apply")
	}
	// 2. Create and update, parents first.
	for i := range a.target {
		t := &a.target[i]
		if t.Type == record.Absent {
			continue
		}
		c := cur.Find(t.Path)
		if c != nil && (removed[c.Path] || c.Type == record.Absent) {
			c = nil
		}
		if err := a.put(t, c); err != nil {
			return err
		}
		step()
		fsutil.CrashPoint("apply")
	}
	// 3. Directory metadata last, deepest first, so that nothing we do
	// afterwards moves a directory's mtime.
	for i := len(a.target) - 1; i >= 0; i-- {
		t := &a.target[i]
		if t.Type != record.Dir {
			continue
		}
		c := cur.Find(t.Path)
		if c != nil && !removed[c.Path] && c.Type == record.Dir && c.SameMeta(t) && !a.touched[t.Path] {
			continue
		}
		if err := a.setMeta(t, c); err != nil {
			return err
		}
	}
	// 4. A directory the target does not cover, whose entries changed only
	// because a covered path in it was replaced by a rename, keeps its
	// time: a file edited in place never moved it.
	// After a crash (knownMtime), such a directory may have been moved by
	// the interrupted attempt, or by the removal of its temps, and not be
	// touched now: every one whose time differs is put back.
	for p := range a.knownMtime {
		if a.touched[p] || a.target.Find(p) != nil {
			continue
		}
		d, err := a.dir(record.Parent(p))
		if err != nil {
			continue // gone: nothing to put back
		}
		if st, err := d.Lstat(record.Base(p)); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mtim.Nano() != a.knownMtime[p] {
			a.touched[p] = true
		}
	}
	for p := range a.touched {
		old, ok := a.dirMtime[p]
		if t, known := a.knownMtime[p]; known {
			old, ok = t, true
		}
		if p == "" || !ok || a.target.Find(p) != nil {
			continue
		}
		d, err := a.dir(record.Parent(p))
		if err == nil {
			err = d.SetTimes(record.Base(p), time.Unix(0, old))
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("restore the time of %s: %w", p, err)
		}
	}
	return a.sync()
}

func (a *applier) remove(c *record.Entry) error {
	d, err := a.dir(record.Parent(c.Path))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // its parent is gone already
		}
		return fmt.Errorf("remove %s: %w", c.Path, err)
	}
	name := record.Base(c.Path)
	if c.Type == record.Dir {
		a.forget(c.Path)
		err = d.Rmdir(name)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			// What is left is ignored or excluded content, which no
			// restore may touch: keep the directory around it.
			if t := a.target.Find(c.Path); t == nil || t.Type == record.Absent {
				return nil
			}
			return fmt.Errorf("remove %s: it holds ignored files; move them away and run `snapback recover`", c.Path)
		}
	} else {
		err = d.Unlink(name)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", c.Path, err)
	}
	a.touched[record.Parent(c.Path)] = true
	return nil
}

// put makes path t.Path hold t, given its current (surviving) entry c.
func (a *applier) put(t, c *record.Entry) error {
	d, err := a.dir(record.Parent(t.Path))
	if err != nil {
		return fmt.Errorf("restore %s: %w", t.Path, err)
	}
	name := record.Base(t.Path)
	if c != nil && c.SameContent(t) {
		if t.Type == record.Dir || c.SameMeta(t) {
			return nil // directory metadata comes in the last pass
		}
		return a.setMeta(t, c)
	}
	if t.Type == record.Dir {
		if err := d.Mkdir(name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("restore %s: %w", t.Path, err)
		}
		a.touched[record.Parent(t.Path)] = true
		a.touched[t.Path] = true
		return nil
	}
	// A commit moves the upper layer's entry straight onto the path: one
	// rename, so the content is at every instant either in the layer or
	// in the tree, where a recovery finds it again. (Through a temp name,
	// a crash between the two renames would leave the only copy in a temp
	// that recovery sweeps.)
	moved, err := a.fromSource(d, name, t)
	if err != nil {
		return fmt.Errorf("commit %s: %w", t.Path, err)
	}
	if !moved {
		tmp := a.tmpName()
		if err := a.create(d, tmp, t); err != nil {
			d.Unlink(tmp) // best effort; recover also sweeps temps of this op
			return fmt.Errorf("restore %s: %w", t.Path, err)
		}
		if err := d.Rename(tmp, d, name); err != nil {
			d.Unlink(tmp)
			return fmt.Errorf("restore %s: %w", t.Path, err)
		}
	}
	a.touched[record.Parent(t.Path)] = true
	a.written = append(a.written, t.Path)
	if t.Type != record.File {
		a.written = a.written[:len(a.written)-1] // its rename is synced with its directory
		a.others++
	}
	// Only contents copied from the store may enter the stat cache: the
	// cache vouches that the store holds them.
	if a.cache != nil && t.Type == record.File && !moved {
		if st, err := d.Lstat(name); err == nil {
			// We wrote these bytes ourselves a moment ago, so the entry is
			// trusted at once (no racy-timestamp wait). The window in which
			// another writer could change the file unseen is the few
			// microseconds between the rename and this stat.
			k := statOf(&st).key()
			a.cache.put(t.Path, k, t.Object, max(k.Ctime, k.Mtime)+racyMargin(k)+1, len(t.Xattrs) == 0)
		}
	}
	return nil
}

// create makes tmp in d a complete copy of t, metadata included.
func (a *applier) create(d *fsutil.Dir, tmp string, t *record.Entry) error {
	switch t.Type {
	case record.File:
		if t.Link != "" {
			pd, err := a.dir(record.Parent(t.Link))
			if err != nil {
				return err
			}
			if err := pd.Link(record.Base(t.Link), d, tmp); err != nil {
				return err
			}
			return nil // the inode's metadata came with its first name
		}
		if err := a.writeTemp(d, tmp, t, func(f *os.File) error { return a.fill(f, t) }); err != nil {
			return err
		}
	case record.Symlink:
		if err := d.Symlink(t.Target, tmp); err != nil {
			return err
		}
		if a.isRoot {
			if err := d.Lchown(tmp, int(t.UID), int(t.GID)); err != nil {
				return err
			}
		}
	case record.Fifo:
		if err := d.Mkfifo(tmp, 0o600); err != nil {
			return err
		}
		f, err := d.Open(tmp, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		err = a.fileMeta(f, t)
		f.Close() // read-only
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("cannot restore a %s", t.Type)
	}
	return d.SetTimes(tmp, time.Unix(0, t.Mtime))
}

// fileMeta sets owner, mode and xattrs on an open file (not the mtime:
// callers set it last, after everything that could move it).
func (a *applier) fileMeta(f *os.File, t *record.Entry) error {
	fd := int(f.Fd())
	if a.isRoot {
		fsutil.Mutating()
		if err := unix.Fchown(fd, int(t.UID), int(t.GID)); err != nil {
			return fmt.Errorf("chown %s: %w", t.Path, err)
		}
	}
	if err := fsutil.SetXattrs(fd, t.Path, t.Xattrs); err != nil {
		return err
	}
	// chmod after chown: chown clears setuid/setgid bits.
	fsutil.Mutating()
	if err := unix.Fchmod(fd, t.Mode); err != nil {
		return fmt.Errorf("chmod %s: %w", t.Path, err)
	}
	return nil
}

// setMeta fixes the metadata of an existing entry with the right content.
func (a *applier) setMeta(t, c *record.Entry) error {
	d, err := a.dir(record.Parent(t.Path))
	if err != nil {
		return fmt.Errorf("restore %s: %w", t.Path, err)
	}
	return a.metaIn(d, record.Base(t.Path), t, c)
}

// metaIn gives the entry name in d the metadata of t (c: what it had).
func (a *applier) metaIn(d *fsutil.Dir, name string, t, c *record.Entry) error {
	if t.Type != record.Symlink {
		f, err := d.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err == nil {
			err = a.fileMeta(f, t)
			f.Close() // read-only
		} else if errors.Is(err, unix.EACCES) && (c == nil || c.UID == t.UID && c.GID == t.GID && len(t.Xattrs) == 0) {
			err = d.Chmod(name, t.Mode) // unreadable to us: the mode is all we can set
		}
		if err != nil {
			return fmt.Errorf("restore %s: %w", t.Path, err)
		}
	} else if a.isRoot {
		if err := d.Lchown(name, int(t.UID), int(t.GID)); err != nil {
			return fmt.Errorf("restore %s: %w", t.Path, err)
		}
	}
	if err := d.SetTimes(name, time.Unix(0, t.Mtime)); err != nil {
		return fmt.Errorf("restore %s: %w", t.Path, err)
	}
	return nil
}

// fromSource moves t's entry from the upper layer onto name in d, with
// its metadata made t's first. It reports false when the layer no longer
// has it (moved by an earlier attempt) or it must be made from the entry.
func (a *applier) fromSource(d *fsutil.Dir, name string, t *record.Entry) (bool, error) {
	if a.src == nil || t.Link != "" || a.keep[t.Path] {
		return false, nil
	}
	sd, ok := a.srcDirs[record.Parent(t.Path)]
	if !ok {
		var err error
		if sd, err = a.src.OpenDir(record.Parent(t.Path)); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return false, nil
			}
			return false, err
		}
		a.srcDirs[record.Parent(t.Path)] = sd
	}
	src := record.Base(t.Path)
	st, err := sd.Lstat(src)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	want := map[record.Type]uint32{record.File: unix.S_IFREG, record.Symlink: unix.S_IFLNK, record.Fifo: unix.S_IFIFO}[t.Type]
	if uint32(st.Mode)&unix.S_IFMT != want || t.Type == record.File && st.Size != t.Size {
		return false, fmt.Errorf("upper layer entry changed since the changeset was read")
	}
	// Only overlay xattrs and (for a non-root caller's copy-up) the owner
	// can differ from t: fixed in the layer, where a repeat is harmless.
	meta := &record.Entry{Path: t.Path, Type: t.Type, Mode: t.Mode, UID: t.UID, GID: t.GID, Mtime: t.Mtime, Xattrs: t.Xattrs}
	if err := a.metaIn(sd, src, meta, nil); err != nil {
		return false, err
	}
	err = sd.Rename(src, d, name)
	if errors.Is(err, unix.EXDEV) && t.Type == record.File {
		// The tree path is on another filesystem (a mount inside the
		// root): copy to a temp beside it, then rename. The layer keeps
		// its entry until the commit is done, so a crash loses nothing.
		tmp := a.tmpName()
		if err := a.copyFrom(sd, src, d, tmp, meta); err != nil {
			d.Unlink(tmp) // best effort; recover sweeps temps of this op
			return false, err
		}
		if err := d.Rename(tmp, d, name); err != nil {
			d.Unlink(tmp)
			return false, err
		}
		return true, nil
	}
	if errors.Is(err, unix.EXDEV) {
		return false, nil // a symlink or fifo: recreated from the entry
	}
	return err == nil, err
}

// copyFrom copies the regular file name in sd to tmp in d, with meta.
func (a *applier) copyFrom(sd *fsutil.Dir, name string, d *fsutil.Dir, tmp string, meta *record.Entry) error {
	src, err := sd.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close() // read-only
	if err := a.writeTemp(d, tmp, meta, func(f *os.File) error { return fsutil.CopyFile(f, src) }); err != nil {
		return err
	}
	return d.SetTimes(tmp, time.Unix(0, meta.Mtime))
}

// fill writes t's content into f, checked against its hash as it is
// written: a damaged object never reaches the tree unnoticed. The
// content comes from the store or, when the operation staged it, from
// the staging area's link (the inode of a file it replaces or removes):
// a rollback reads that first, anything else when the object is missing
// or damaged. Last come the tree's own files that may hold it: the one
// at t's path (rewritten only to end a hard link) and the names the
// target links to t. (A commit of a renamed directory reads its files
// from the store: a damaged object of the same content stopped it
// half-way, and recover could not finish it, with the files' own inodes
// staged; an undo ending a hard link failed so, and its rollback too.)
func (a *applier) fill(f *os.File, t *record.Entry) error {
	if a.open != nil {
		src, err := a.open(t.Object)
		if err != nil {
			return err
		}
		defer src.Close() // read-only
		return copyChecked(f, src, t)
	}
	type source struct {
		open   func(record.ObjectID) (io.ReadCloser, error)
		object bool
	}
	object := source{a.s.OpenObject, true}
	staged := source{func(id record.ObjectID) (io.ReadCloser, error) { return a.s.openStaged(a.opID, id) }, false}
	sources := []source{object}
	switch {
	case a.staged && a.rollback:
		sources = []source{staged, object}
	case a.staged:
		sources = append(sources, staged)
	}
	inTree := func(p string) source {
		return source{func(record.ObjectID) (io.ReadCloser, error) { return a.openTree(p) }, false}
	}
	sources = append(sources, inTree(t.Path))
	for i := range a.target {
		if a.target[i].Link == t.Path {
			sources = append(sources, inTree(a.target[i].Path))
		}
	}
	var objErr, err error
	written := false
	for _, from := range sources {
		var src io.ReadCloser
		if src, err = from.open(t.Object); err == nil {
			if written { // a damaged source's bytes go first
				fsutil.Mutating()
				if err = f.Truncate(0); err == nil {
					_, err = f.Seek(0, io.SeekStart)
				}
				if err != nil {
					src.Close() // read-only
					return err
				}
			}
			written = true
			err = copyChecked(f, src, t)
			src.Close() // read-only
			if err == nil {
				return nil
			}
		}
		var de *DamagedError
		if !errors.As(err, &de) && !errors.Is(err, ErrMissingObject) && !errors.Is(err, record.ErrCorrupt) && !errors.Is(err, fs.ErrNotExist) {
			return err // not the source's fault: another would fail too
		}
		if from.object {
			objErr = err // what the store says is what is reported
		}
	}
	return objErr
}

// openTree opens the tree's regular file at p to read, following no
// symlink and never blocking (the directory not cached: reading moves no
// time the apply keeps).
func (a *applier) openTree(p string) (*os.File, error) {
	d, err := a.root.OpenDir(record.Parent(p))
	if err != nil {
		return nil, err
	}
	defer d.Close() // read-only
	f, err := d.Open(record.Base(p), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close() // read-only
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// copyChecked copies src into f, failing with a DamagedError when what
// was written is not t's content.
func copyChecked(f *os.File, src io.Reader, t *record.Entry) error {
	var sum [32]byte
	var size int64
	var err error
	if of, ok := src.(*os.File); ok {
		sum, size, err = fsutil.CopyHash(f, of) // sparse files stay sparse
	} else {
		h := sha256.New()
		size, err = io.Copy(io.MultiWriter(f, h), src)
		copy(sum[:], h.Sum(nil))
	}
	if err == nil && (record.ObjectID(sum) != t.Object || size != t.Size) {
		err = &DamagedError{Path: t.Path, Object: t.Object}
	}
	return err
}

// writeTemp creates the file tmp in d, fills it, and gives it t's owner,
// mode and xattrs (not its mtime: callers set that last).
func (a *applier) writeTemp(d *fsutil.Dir, tmp string, t *record.Entry, fill func(*os.File) error) error {
	f, err := d.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = a.fileMeta(f, t)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (a *applier) treePath() string {
	if a.s == nil {
		return a.rootPath
	}
	return a.s.Root
}

// Materialize writes the manifest m beneath root, an empty directory, with
// contents from open: how an archive is restored, through the same apply
// as undo (no symlink followed, metadata set deepest-first, synced).
func Materialize(root string, m record.Manifest, open func(record.ObjectID) (io.ReadCloser, error)) error {
	d, err := fsutil.OpenRoot(root)
	if err != nil {
		return err
	}
	defer d.Close()
	a := &applier{root: d, opID: "materialize", target: m, scope: record.ScopeTree, open: open, rootPath: root}
	return a.run(nil)
}

// sync makes everything the apply changed durable: each file and
// directory for a small change, one syncfs for a large one.
func (a *applier) sync() error {
	if len(a.written)+a.others+len(a.touched) > syncEachLimit {
		if err := syncFS(a.treePath()); err != nil {
			return fmt.Errorf("sync tree: %w", err)
		}
		return nil
	}
	needFS := false
	for _, p := range a.written {
		d, err := a.dir(record.Parent(p))
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
		f, err := d.Open(record.Base(p), unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			if errors.Is(err, unix.EACCES) {
				needFS = true // unreadable to us (mode 0000): syncfs covers it
				continue
			}
			return fmt.Errorf("sync %s: %w", p, err)
		}
		fsutil.Mutating()
		err = f.Sync()
		f.Close() // read-only
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	for p := range a.touched {
		d, err := a.dir(p)
		if err != nil {
			continue // removed again since: nothing there to sync
		}
		if err := d.Sync(); err != nil {
			return err
		}
	}
	if needFS {
		if err := syncFS(a.treePath()); err != nil {
			return fmt.Errorf("sync tree: %w", err)
		}
	}
	return nil
}

// sweepTemps removes temp files an interrupted operation opID left in the
// directories the target touches.
func (s *Store) sweepTemps(root *fsutil.Dir, target record.Manifest, opID string) {
	prefix := TempPrefix + opID + "."
	dirs := map[string]bool{"": true}
	for i := range target {
		dirs[record.Parent(target[i].Path)] = true
		if target[i].Type == record.Dir {
			dirs[target[i].Path] = true
		}
	}
	keys := make([]string, 0, len(dirs))
	for k := range dirs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, p := range keys {
		d, err := root.OpenDir(p)
		if err != nil {
			continue // not there (yet): nothing to sweep
		}
		names, _ := d.ReadDirNames() // best effort: a sweep that misses leaves a hidden temp
		for _, n := range names {
			if len(n) > len(prefix) && n[:len(prefix)] == prefix {
				d.Unlink(n) // best effort, as above
			}
		}
		d.Close()
	}
}
