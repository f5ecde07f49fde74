//go:build linux

package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/layer"
	"golang.org/x/sys/unix"
)

// storeName is the store's name at the root: never shown, never made.
const storeName = ".snapback"

// cacheTimeout is how long the kernel may trust what the server said:
// the server is the only writer of the upper layer.
const cacheTimeout = time.Hour

// overlayFS is one merged view: lower is read, upper is written.
type overlayFS struct {
	// The layers' directories, held open (O_PATH): every call names its
	// entry from one of them (see at).
	lowerFd, upperFd, workFd int
	asRoot                   bool // whiteouts as 0/0 devices; owners preserved

	// mu serializes copy-ups and the operations that change names, so a
	// copy-up never races an unlink or rename of the same path.
	mu      sync.Mutex
	aliasMu sync.Mutex
	alias   map[uint64]uint64 // upper inode number -> the view's inode number (after a copy-up)
	seq     atomic.Uint64
	gen     atomic.Uint64 // generations that tell lower hard links apart

	// upperEmpty is true while the upper layer is known to hold nothing
	// (it was empty at the start and no request that may write has come
	// since: rawFS clears it before serving one). Lookups and listings
	// then skip the upper layer: in a fresh view that is a fstatat per
	// looked-up name that could only fail.
	upperEmpty atomic.Bool

	warm warmState // a view kept across runs (warm_linux.go)

	statters callers // who stats what it lists (listing_linux.go)
}

// node is a path of the view. Its layer is decided at lookup and changes
// only by a copy-up (lower to upper).
type node struct {
	fs.Inode
	ov *overlayFS

	inUpper atomic.Bool // non-directories: the entry is the upper one
	// lower is the entry's path in the lower tree (where its content
	// comes from before a copy-up). It stays what it was when the node
	// was found: a renamed directory keeps showing its lower children
	// (the upper layer records the move with an overlay redirect).
	lower   string
	lowerOK bool // directories: the children of lower show through
	// listedBare: a listing of this directory left out the attributes
	// of some of its entries (listing_linux.go).
	listedBare atomic.Bool

	detached detachedFile // a file without a name that the kernel may still have open
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
)

// newRoot makes the view's root node.
func newRoot(lower, upper, work string) (*node, error) {
	var fds [3]int
	for i, d := range []string{lower, upper, work} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds[:i] {
				unix.Close(f)
			}
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		fds[i] = fd
	}
	ov := &overlayFS{lowerFd: fds[0], upperFd: fds[1], workFd: fds[2], asRoot: os.Geteuid() == 0, alias: map[uint64]uint64{}}
	empty, err := isEmptyDir(upper)
	if err != nil {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, fmt.Errorf("%s: %w", upper, err)
	}
	ov.upperEmpty.Store(empty)
	return &node{ov: ov, lowerOK: true}, nil // lower "": the root
}

// isEmptyDir reports whether the directory dir has no entries.
func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close() // read-only
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// options are the go-fuse options of every view.
func options() *fs.Options {
	t := cacheTimeout
	return &fs.Options{
		EntryTimeout:    &t,
		AttrTimeout:     &t,
		NegativeTimeout: &t,
		// A mode 0000 is a mode: go-fuse would show 0644 (0755) instead.
		NullPermissions: true,
		MountOptions: gofuse.MountOptions{
			FsName:       "snapback",
			Name:         "snapback",
			MaxWrite:     1 << 20,
			AllowOther:   true,
			Options:      []string{"default_permissions"},
			MaxReadAhead: 1 << 20,
			// One request at a time, read and answered by one goroutine,
			// as fuse-overlayfs serves: go-fuse's default keeps a second
			// reader blocked on the device and hands requests between
			// threads, which on 2 CPUs cost more than the requests did
			// (a fresh `tar` of Go's src/ 0.87 s -> 0.65 s, one run on a
			// loaded machine; see docs/performance.md). Nothing the server does
			// waits for another request (no lock requests: EnableLocks is
			// off; NotifyContent(-1) drops attributes only), so serving
			// in turn cannot deadlock. A budget smaller than one request
			// lets exactly one through.
			MaxInflightRequestBytes: 1,
			// Reads answer with bytes, never with a descriptor to splice
			// from, yet go-fuse would still write each READ reply's
			// header into a pipe, then drain it and write the reply
			// again: three system calls per READ for nothing.
			DisableSplice: true,
		},
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// up names rel in the upper layer, low in the lower tree (close the
// result).
func (ov *overlayFS) up(rel string) (at, error)  { return resolve(ov.upperFd, rel) }
func (ov *overlayFS) low(rel string) (at, error) { return resolve(ov.lowerFd, rel) }

// tmp names a new temporary entry in the work directory.
func (ov *overlayFS) tmp() at {
	return at{dir: ov.workFd, name: "fuse-" + strconv.FormatUint(ov.seq.Add(1), 10) + "-" + strconv.Itoa(os.Getpid())}
}

// orphan is the path of a node no longer in the tree (an open file
// whose name was removed): the NUL makes every path call on it fail
// (EINVAL) instead of reaching some other entry.
const orphan = "\x00orphan"

// rel is the node's path in the view ("" for the root).
func (n *node) rel() string {
	var parts []string
	for p := &n.Inode; !p.IsRoot(); {
		name, parent := p.Parent()
		if parent == nil {
			return orphan
		}
		parts = append(parts, name)
		p = parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

func (n *node) isDir() bool { return n.StableAttr().Mode == syscall.S_IFDIR }

// path is where the node's current state is: upper when it has one
// (close the result).
func (n *node) path() (at, error) {
	if n.isDir() && n.lowerOK && n.ov.upperEmpty.Load() {
		return n.ov.low(n.lower)
	}
	rel := n.rel()
	if n.isDir() {
		if !n.lowerOK {
			return n.ov.up(rel)
		}
		u, err := n.ov.up(rel)
		if err == nil && u.exists() {
			return u, nil
		}
		if err == nil {
			u.close()
		}
		return n.ov.low(n.lower)
	}
	if n.inUpper.Load() {
		return n.ov.up(rel)
	}
	return n.ov.low(n.lower)
}

// isWhiteout reads both whiteout forms.
func isWhiteout(a at, st *syscall.Stat_t) bool {
	return layer.IsWhiteout(st.Mode, st.Rdev, st.Size, layer.PathGetter(a.proc()))
}

// isWhiteoutAt reports whether the upper layer has a whiteout at a.
func isWhiteoutAt(a at) bool {
	_, _, wh := upperState(a)
	return wh
}

// upperState says what the upper layer has at a: nothing (ENOENT), a
// whiteout, or an entry.
func upperState(a at) (st syscall.Stat_t, has, whiteout bool) {
	if a.lstat(&st) != nil {
		return st, false, false
	}
	if isWhiteout(a, &st) {
		return st, false, true
	}
	return st, true, false
}

// lowerHas reports whether the lower tree shows an entry name in n (a
// whiteout must then hide it).
func (n *node) lowerHas(name string) bool {
	if !n.lowerOK {
		return false
	}
	l, err := n.ov.low(join(n.lower, name))
	if err != nil {
		return false
	}
	defer l.close()
	return l.exists()
}

// redirect reads an upper directory's overlay redirect: the lower
// directory it shows.
func redirect(a at, parentLower string) (string, bool) {
	r, ok := layer.Redirect(layer.PathGetter(a.proc()))
	if !ok {
		return "", false
	}
	return layer.Origin(r, parentLower), true
}

// isLowerDir reports whether the lower tree has a directory at rel.
func (ov *overlayFS) isLowerDir(rel string) bool {
	l, err := ov.low(rel)
	if err != nil {
		return false
	}
	defer l.close()
	var st syscall.Stat_t
	return l.lstat(&st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
}

// makeWhiteout replaces whatever non-directory is at a with a whiteout.
func (ov *overlayFS) makeWhiteout(a at) error {
	tmp := ov.tmp()
	if err := makeWhiteout(tmp.proc(), ov.asRoot); err != nil {
		return err
	}
	if err := unix.Renameat(tmp.dir, tmp.name, a.dir, a.name); err != nil {
		unix.Unlinkat(tmp.dir, tmp.name, 0) // best effort: err is reported
		return err
	}
	return nil
}

// makeWhiteout makes a whiteout at p: a 0/0 device as root, unless the
// layer's filesystem refuses one (overlayfs does, as a container's root
// is: EPERM), then an xwhiteout, which the layer's readers take alike.
func makeWhiteout(p string, device bool) error {
	err := layer.MakeWhiteout(p, device)
	if device && errors.Is(err, syscall.EPERM) {
		err = layer.MakeWhiteout(p, false)
	}
	return err
}

// stable is the view's inode number for an upper entry.
func (ov *overlayFS) stable(ino uint64) uint64 {
	ov.aliasMu.Lock()
	defer ov.aliasMu.Unlock()
	if s, ok := ov.alias[ino]; ok {
		return s
	}
	return ino
}

// setIno reports the node's inode number, kept across a copy-up.
func (n *node) setIno(a *gofuse.Attr) { a.Ino = n.StableAttr().Ino }

// newChild registers the child found or made at st.
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t, inUpper bool, lower string, lowerOK bool, out *gofuse.EntryOut) *fs.Inode {
	id := fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino}
	lowerLink := !inUpper && id.Mode != syscall.S_IFDIR && st.Nlink > 1
	if inUpper {
		id.Ino = n.ov.stable(id.Ino)
	}
	if lowerLink {
		// A lower hard link is a node of its own (a copy-up splits the
		// link), with the lower inode number: until then `cp -a` or tar
		// see the names as one file, as on overlayfs.
		id.Gen = n.ov.gen.Add(1)
	} else {
		id.Gen = n.ov.warm.genOf(id.Ino) // 0 unless a kept view retired the number
	}
	c := &node{ov: n.ov, lower: lower, lowerOK: lowerOK}
	c.inUpper.Store(inUpper)
	ch := n.NewInode(ctx, c, id)
	if lowerLink {
		n.ov.warm.linked(ch)
	}
	out.Attr.FromStat(st)
	ch.Operations().(*node).setIno(&out.Attr)
	return ch
}

// childRel is the relative path of name in n; ok is false for the store,
// which the view never shows.
func (n *node) childRel(name string) (rel string, ok bool) {
	prel := n.rel()
	if prel == "" && name == storeName {
		return "", false
	}
	return join(prel, name), true
}

// Lookup answers LOOKUP; a listing's entries are looked up by
// dirHandle.Lookup.
func (n *node) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.listedBare.Load() {
		n.ov.statters.add(ctx)
	}
	return n.lookup(ctx, name, out)
}

func (n *node) lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.IsRoot() && name == storeName {
		return nil, syscall.ENOENT
	}
	var st syscall.Stat_t
	var has, wh bool
	if n.ov.upperEmpty.Load() {
		// Nothing to look at in the upper layer (nor a path to build).
	} else if u, err := n.ov.up(join(n.rel(), name)); err == nil { // else the upper layer has nothing there
		st, has, wh = upperState(u)
		if has && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && layer.IsOpaque(layer.PathGetter(u.proc())) {
			u.close()
			return n.newChild(ctx, &st, true, join(n.lower, name), false, out), 0
		}
		r, redirected := "", false
		if has && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			r, redirected = redirect(u, n.lower)
		}
		u.close()
		if wh {
			return nil, syscall.ENOENT
		}
		if has {
			lower, lowerOK := join(n.lower, name), false
			if redirected {
				lower, lowerOK = r, n.ov.isLowerDir(r)
			} else if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				lowerOK = n.lowerOK && n.ov.isLowerDir(lower)
			}
			return n.newChild(ctx, &st, true, lower, lowerOK, out), 0
		}
	}
	if !n.lowerOK {
		return nil, syscall.ENOENT
	}
	lower := join(n.lower, name)
	l, err := n.ov.low(lower)
	if err == nil {
		err = l.lstat(&st)
		l.close()
	}
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, false, lower, st.Mode&syscall.S_IFMT == syscall.S_IFDIR, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	if ok, errno := n.orphanAttr(ctx, out); ok {
		return errno
	}
	var st syscall.Stat_t
	p, err := n.path()
	if err == nil {
		err = p.lstat(&st)
		p.close()
	}
	if err != nil {
		if fg, ok := n.handle(f).(fs.FileGetattrer); ok { // an open file whose name is gone
			errno := fg.Getattr(ctx, out)
			n.setIno(&out.Attr)
			return errno
		}
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	n.setIno(&out.Attr)
	return 0
}

// list merges a directory's layers: upper entries (but whiteouts), then
// lower ones not hidden (when lowerOK). The store is left out at the root.
func (ov *overlayFS) list(rel, lower string, lowerOK bool) ([]gofuse.DirEntry, syscall.Errno) {
	var out []gofuse.DirEntry
	seen := map[string]bool{}
	read := func(a at, upper bool) syscall.Errno {
		fd, err := unix.Openat(a.dir, a.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		ds, errno := fs.NewLoopbackDirStreamFd(fd) // closes fd
		if errno != 0 {
			return errno
		}
		defer ds.Close()
		for ds.HasNext() {
			e, errno := ds.Next()
			if errno != 0 {
				return errno
			}
			if e.Name == "." || e.Name == ".." || (rel == "" && e.Name == storeName) || seen[e.Name] {
				continue
			}
			seen[e.Name] = true
			if upper && layer.MayBeWhiteout(e.Mode) {
				c := at{dir: fd, name: e.Name}
				var st syscall.Stat_t
				if c.lstat(&st) == nil && isWhiteout(c, &st) {
					continue // seen: hides the lower name
				}
			}
			if upper {
				e.Ino = ov.stable(e.Ino)
			}
			out = append(out, e)
		}
		return 0
	}
	upperDir := false
	if ov.upperEmpty.Load() {
		// Nothing to list in the upper layer.
	} else if u, err := ov.up(rel); err == nil {
		if upperDir = u.exists(); upperDir {
			if errno := read(u, true); errno != 0 {
				u.close()
				return nil, errno
			}
		}
		u.close()
	}
	if lowerOK {
		l, err := ov.low(lower)
		errno := fs.ToErrno(err)
		if err == nil {
			errno = read(l, false)
			l.close()
		}
		if errno != 0 && (errno != syscall.ENOENT || !upperDir) {
			return nil, errno
		}
	}
	return out, 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ents, errno := n.ov.list(n.rel(), n.lower, n.lowerOK)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{FileHandle: fs.NewListDirStream(ents).(fs.FileHandle), n: n}, gofuse.FOPEN_CACHE_DIR | gofuse.FOPEN_KEEP_CACHE, 0
}

// dirHandle is an open directory: its listing, and fsync.
type dirHandle struct {
	fs.FileHandle
	n    *node
	last gofuse.DirEntry // the entry Readdirent gave last (listing_linux.go)
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.FileHandle.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {}

// Fsyncdir makes the upper directory durable (a lower one has nothing
// of the run's to sync).
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	u, err := d.n.ov.up(d.n.rel())
	if err != nil {
		return 0
	}
	defer u.close()
	fd, err := unix.Openat(u.dir, u.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd) // read-only
	return fs.ToErrno(unix.Fsync(fd))
}

// dirOf is the parent of a view path ("" for the root's children).
func dirOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// openDir opens the directory a names (O_PATH) and releases a: the
// result names the directory itself, and its entries are in(name).
func (a at) openDir() (at, error) {
	fd, err := unix.Openat(a.dir, a.name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	a.close()
	if err != nil {
		return at{}, err
	}
	return at{dir: fd, name: ".", own: true}, nil
}

// in is the entry name in the directory a (which keeps the
// descriptor: close a, not the result). a is short enough for that when
// it comes from dirFor.
func (a at) in(name string) at {
	if a.name == "." {
		return at{dir: a.dir, name: name}
	}
	return at{dir: a.dir, name: a.name + "/" + name}
}

// dirFor makes the directory a fit to name entries in with in: opened
// when its path leaves no room for a name.
func (a at) dirFor() (at, error) {
	if len(a.name)+1+unix.NAME_MAX <= maxAt {
		return a, nil
	}
	return a.openDir()
}

// readlinkAt reads the symbolic link at a, whatever its length.
func readlinkAt(a at) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(a.dir, a.name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// removeAll removes the upper entry at a: a whiteout, or a directory the
// view shows empty (only whiteouts are left in it).
func removeAll(a at) error { return os.RemoveAll(a.proc()) }

// copyUpDir makes sure the upper layer has directory d, copying it and
// its parents up from the lower tree where needed. Called with ov.mu held.
func (ov *overlayFS) copyUpDir(d *node) error {
	rel := d.rel()
	if rel == "" {
		return nil
	}
	if u, err := ov.up(rel); err == nil { // else its parent is not there yet either
		there := u.exists()
		u.close()
		if there {
			return nil
		}
	}
	_, parent := d.Parent()
	if parent == nil {
		return syscall.ENOENT
	}
	pn := parent.Operations().(*node)
	if err := ov.copyUpDir(pn); err != nil {
		return err
	}
	src, err := ov.low(d.lower)
	if err != nil {
		return err
	}
	defer src.close()
	var st syscall.Stat_t
	if err := src.lstat(&st); err != nil {
		return err
	}
	tmp := ov.tmp()
	if err := unix.Mkdirat(tmp.dir, tmp.name, 0o700); err != nil {
		return err
	}
	if err := ov.copyMeta(src, tmp, &st, false); err != nil {
		unix.Unlinkat(tmp.dir, tmp.name, unix.AT_REMOVEDIR) // best effort: err is reported
		return err
	}
	return ov.install(tmp, rel, pn.lower, &st)
}

// copyMeta gives tmp the owner, mode and xattrs of the lower entry src
// (times are set by install, after the rename).
func (ov *overlayFS) copyMeta(src, tmp at, st *syscall.Stat_t, symlink bool) error {
	if ov.asRoot {
		if err := unix.Fchownat(tmp.dir, tmp.name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if !symlink {
		// After the chown, which clears set-user-ID and set-group-ID.
		if err := unix.Fchmodat(tmp.dir, tmp.name, st.Mode&0o7777, 0); err != nil {
			return err
		}
		if err := copyXattrs(src.proc(), tmp.proc()); err != nil {
			return err
		}
	}
	return nil
}

func copyXattrs(src, dst string) error {
	sz, err := unix.Llistxattr(src, nil)
	if err != nil || sz == 0 {
		return nil // no xattrs here (or none readable): nothing to copy
	}
	buf := make([]byte, sz)
	if sz, err = unix.Llistxattr(src, buf); err != nil {
		return nil
	}
	for _, name := range bytes.Split(buf[:sz], []byte{0}) {
		x := string(name)
		if x == "" || layer.IsMark(x) {
			continue
		}
		vs, err := unix.Lgetxattr(src, x, nil)
		if err != nil {
			continue
		}
		v := make([]byte, vs)
		if vs, err = unix.Lgetxattr(src, x, v); err != nil {
			continue
		}
		if err := unix.Lsetxattr(dst, x, v[:vs], 0); err != nil && !(os.IsPermission(err) || err == unix.ENOTSUP) {
			return fmt.Errorf("copy xattr %s: %w", x, err)
		}
	}
	return nil
}

// install renames a prepared copy into the upper layer at rel, gives it
// the lower entry's times, and keeps the parent's times as they were when
// the copy-up was the parent's only change (a copy-up changes no
// directory of the view).
func (ov *overlayFS) install(tmp at, rel, parentLower string, st *syscall.Stat_t) error {
	u, err := ov.up(rel)
	if err != nil {
		os.RemoveAll(tmp.proc()) // best effort: err is reported
		return err
	}
	defer u.close()
	var pst, lpst syscall.Stat_t
	keep := false
	parent, perr := ov.up(dirOf(rel))
	if perr == nil {
		defer parent.close()
		if lp, err := ov.low(parentLower); err == nil {
			keep = parent.lstat(&pst) == nil && lp.lstat(&lpst) == nil && pst.Mtim == lpst.Mtim
			lp.close()
		}
	}
	if err := unix.Renameat(tmp.dir, tmp.name, u.dir, u.name); err != nil {
		os.RemoveAll(tmp.proc()) // best effort: err is reported
		return err
	}
	ts := []unix.Timespec{unix.Timespec(st.Atim), unix.Timespec(st.Mtim)}
	if err := unix.UtimesNanoAt(u.dir, u.name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	var ust syscall.Stat_t
	if err := u.lstat(&ust); err == nil && (st.Nlink <= 1 || st.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
		ov.aliasMu.Lock()
		ov.alias[ust.Ino] = st.Ino // (a lower hard link has a node of its own: no alias)
		ov.aliasMu.Unlock()
	}
	if keep {
		pts := []unix.Timespec{unix.Timespec(pst.Atim), unix.Timespec(pst.Mtim)}
		_ = unix.UtimesNanoAt(parent.dir, parent.name, pts, unix.AT_SYMLINK_NOFOLLOW) // cosmetic: the parent then shows as changed
	}
	return nil
}

// copyUp moves the node to the upper layer (a directory: makes sure the
// upper layer has it).
func (n *node) copyUp() syscall.Errno {
	if !n.isDir() && n.inUpper.Load() {
		return 0
	}
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	return n.copyUpLocked()
}

// copyUpLocked is copyUp with ov.mu held.
func (n *node) copyUpLocked() syscall.Errno {
	ov := n.ov
	if n.isDir() {
		return fs.ToErrno(ov.copyUpDir(n))
	}
	if n.inUpper.Load() {
		return 0
	}
	_, parent := n.Parent()
	if parent == nil {
		return syscall.ENOENT // removed meanwhile
	}
	pn := parent.Operations().(*node)
	if err := ov.copyUpDir(pn); err != nil {
		return fs.ToErrno(err)
	}
	rel := n.rel()
	u, err := ov.up(rel)
	if err != nil {
		return fs.ToErrno(err)
	}
	_, _, wh := upperState(u)
	u.close()
	if wh {
		return syscall.ENOENT // unlinked while this waited for the lock
	}
	src, err := ov.low(n.lower)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer src.close()
	var st syscall.Stat_t
	if err := src.lstat(&st); err != nil {
		return fs.ToErrno(err)
	}
	tmp := ov.tmp()
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		err = copyData(src, tmp)
	case syscall.S_IFLNK:
		var target string
		if target, err = readlinkAt(src); err == nil {
			err = unix.Symlinkat(target, tmp.dir, tmp.name)
		}
	default:
		err = unix.Mknodat(tmp.dir, tmp.name, st.Mode, int(st.Rdev))
	}
	if err == nil {
		err = ov.copyMeta(src, tmp, &st, st.Mode&syscall.S_IFMT == syscall.S_IFLNK)
	}
	if err == nil {
		err = ov.install(tmp, rel, pn.lower, &st)
	}
	if err != nil {
		unix.Unlinkat(tmp.dir, tmp.name, 0) // best effort (install removed it already): err is reported
		return fs.ToErrno(err)
	}
	n.inUpper.Store(true)
	return 0
}

// copyData copies a regular file's content (reflink or sparse copy).
func copyData(src, dst at) error {
	ifd, err := unix.Openat(src.dir, src.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(ifd), src.name)
	defer in.Close() // read-only
	ofd, err := unix.Openat(dst.dir, dst.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), dst.name)
	if err := fsutil.CopyFile(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *gofuse.SetAttrIn, out *gofuse.AttrOut) syscall.Errno {
	if f == nil && n.rel() == orphan { // a file without a name: through its held descriptor
		if w, own, errno := n.writable(ctx, nil); errno == 0 {
			if own {
				defer w.Release(ctx)
			}
			errno = w.Setattr(ctx, in, out)
			n.setIno(&out.Attr)
			return errno
		}
	}
	if fsa, ok := f.(fs.FileSetattrer); ok && n.inUpper.Load() && n.rel() == orphan {
		return fsa.Setattr(ctx, in, out) // an open upper file without a name: its descriptor is the upper one
	}
	if errno := n.copyUp(); errno != 0 {
		return errno
	}
	// Always by name in the upper layer: a handle may be a read-only
	// descriptor of the lower file, which must never change.
	p, err := n.ov.up(n.rel())
	if err != nil {
		return fs.ToErrno(err)
	}
	defer p.close()
	if m, ok := in.GetMode(); ok {
		if n.StableAttr().Mode == syscall.S_IFLNK {
			return syscall.EOPNOTSUPP // fchmodat would follow the link; Linux has no mode on one
		}
		if err := unix.Fchmodat(p.dir, p.name, m&0o7777, 0); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := unix.Fchownat(p.dir, p.name, su, sg, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := syscall.Truncate(p.proc(), int64(sz)); err != nil { // no truncateat
			return fs.ToErrno(err)
		}
		var st syscall.Stat_t
		if p.lstat(&st) == nil && killsSGID(ctx, &st) { // as a write does (see file.Write)
			if err := unix.Fchmodat(p.dir, p.name, st.Mode&0o7777&^syscall.S_ISGID, 0); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := unix.UtimesNanoAt(p.dir, p.name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	if err := p.lstat(&st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	n.setIno(&out.Attr)
	return 0
}

const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC | syscall.O_APPEND

// Open (and Create, OpendirHandle) serve the kernel's opens only where it
// cannot do without them (rawFS answers ENOSYS elsewhere: the kernel
// then opens without a message, see noopen_linux.go). The listing
// handles of rawFS come from OpendirHandle on every kernel.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		if errno := n.copyUp(); errno != 0 {
			return nil, 0, errno
		}
	}
	// The kernel positions appends itself (it knows the size: every
	// write passes here).
	flags &^= syscall.O_APPEND | gofuse.FMODE_EXEC | syscall.O_CREAT
	lower := !n.inUpper.Load() && !n.isDir()
	p, err := n.path()
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	fd, err := unix.Openat(p.dir, p.name, int(flags)|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	p.close()
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	fuseFlags := uint32(gofuse.FOPEN_KEEP_CACHE)
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		fuseFlags |= gofuse.FOPEN_NOFLUSH // nothing to flush; locks go with the descriptor at release
	}
	return newFile(fd, n, lower), fuseFlags, 0
}

// file is an open file of the view. It never offers go-fuse a
// passthrough descriptor: go-fuse would register the first open's file
// (perhaps the lower one) as the inode's backing file and reuse it for
// later opens, so writes after a copy-up could reach the real tree. A
// handle opened on the lower file reads the upper copy once there is one.
type file struct {
	*fs.LoopbackFile
	fd    int // the LoopbackFile's, valid until Release
	n     *node
	lower bool

	mu sync.Mutex
	up *os.File // the upper copy, opened read-only after a copy-up
}

var _ fs.FilePassthroughFder = (*file)(nil)

func newFile(fd int, n *node, lower bool) *file {
	return &file{LoopbackFile: fs.NewLoopbackFileFromOS(os.NewFile(uintptr(fd), "")), fd: fd, n: n, lower: lower}
}

// Write writes, then clears the set-group-ID bit where Linux would and
// the kernel's FUSE client does not (see killsSGID), making the kernel
// drop its cached attributes: fstat on the writing descriptor must show
// the new mode at once (they are cached for an hour). A handle that
// writes is always an upper one (opening for writing copies up).
func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	var st syscall.Stat_t
	if errno == 0 && syscall.Fstat(f.fd, &st) == nil && killsSGID(ctx, &st) {
		if syscall.Fchmod(f.fd, st.Mode&0o7777&^syscall.S_ISGID) == nil {
			f.n.NotifyContent(-1, 0) // offset -1: the attributes only, not the pages (the writer holds them)
		}
	}
	return n, errno
}

// killsSGID reports whether a write or truncate by the caller clears the
// set-group-ID bit of a file with stat st on Linux where the kernel's
// FUSE client leaves it: the bit without group execute, and a caller
// outside the file's group without CAP_FSETID (taken as: not root). The
// client clears set-user-ID, and set-group-ID with group execute, itself
// (a SETATTR before the write); go-fuse does not negotiate
// FUSE_HANDLE_KILLPRIV(_V2), which would leave all of it to the server.
func killsSGID(ctx context.Context, st *syscall.Stat_t) bool {
	if st.Mode&(syscall.S_ISGID|syscall.S_IXGRP) != syscall.S_ISGID {
		return false
	}
	c, ok := gofuse.FromContext(ctx)
	if !ok || c.Uid == 0 || c.Gid == st.Gid {
		return false
	}
	return !inGroups(c.Pid, st.Gid)
}

// inGroups reports whether gid is a supplementary group of the thread
// pid (FUSE names the calling thread; /proc has its status though it
// lists only processes). Unreadable: not a member.
func inGroups(pid, gid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	want := strconv.FormatUint(uint64(gid), 10)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, g := range strings.Fields(rest) {
				if g == want {
					return true
				}
			}
		}
	}
	return false
}

// PassthroughFd declines passthrough (see file).
func (f *file) PassthroughFd() (int, bool) { return -1, false }

func (f *file) Read(ctx context.Context, buf []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	if f.lower && f.n.inUpper.Load() {
		f.mu.Lock()
		if f.up == nil {
			if u, err := f.n.ov.up(f.n.rel()); err == nil {
				if fd, err := unix.Openat(u.dir, u.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
					f.up = os.NewFile(uintptr(fd), "")
				}
				u.close()
			}
		}
		up := f.up
		f.mu.Unlock()
		if up != nil {
			n, err := up.ReadAt(buf, off)
			if err != nil && n == 0 && !errors.Is(err, io.EOF) {
				return nil, fs.ToErrno(err)
			}
			return gofuse.ReadResultData(buf[:n]), 0
		}
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	f.mu.Lock()
	if f.up != nil {
		f.up.Close() // read-only
		f.up = nil
	}
	f.mu.Unlock()
	return f.LoopbackFile.Release(ctx)
}

// prepareNew readies the upper layer for a new entry name in n: the
// directory copied up, a whiteout there removed (reported: the lower
// tree had something there). dir is n's upper directory: the new entry
// is dir.in(name). Close dir.
func (n *node) prepareNew(name string) (dir at, overWhiteout bool, errno syscall.Errno) {
	prel := n.rel()
	if prel == "" && name == storeName {
		return at{}, false, syscall.EPERM
	}
	if errno := n.copyUpLocked(); errno != 0 {
		return at{}, false, errno
	}
	u, err := n.ov.up(prel)
	if err == nil {
		dir, err = u.dirFor()
	}
	if err != nil {
		return at{}, false, fs.ToErrno(err)
	}
	if e := dir.in(name); isWhiteoutAt(e) {
		if err := unix.Unlinkat(e.dir, e.name, 0); err != nil {
			dir.close()
			return at{}, false, fs.ToErrno(err)
		}
		overWhiteout = true
	}
	return dir, overWhiteout, 0
}

// own gives the new upper entry name in dir the caller's uid and gid
// (the server runs as root), keeping a set-group-ID directory's group.
// A chown clears a file's set-user-ID and set-group-ID bits: setid, the
// mode the caller asked for when it has them, is put back.
func (n *node) own(ctx context.Context, dir at, name string, setid uint32) {
	if !n.ov.asRoot {
		return
	}
	caller, ok := gofuse.FromContext(ctx)
	if !ok {
		return
	}
	gid := int(caller.Gid)
	var pst syscall.Stat_t
	if dir.lstat(&pst) == nil && pst.Mode&syscall.S_ISGID != 0 {
		gid = -1
	}
	e := dir.in(name)
	_ = unix.Fchownat(e.dir, e.name, int(caller.Uid), gid, unix.AT_SYMLINK_NOFOLLOW) // root can always chown
	if setid&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		_ = unix.Fchmodat(e.dir, e.name, setid&0o7777, 0) // root can always chmod
	}
}

func (n *node) entryOut(ctx context.Context, a at, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := a.lstat(&st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, true, "", false, out), 0
}

// Create, Mkdir and Mknod make the entry with the mode the request
// carries: the kernel has applied the caller's umask already (go-fuse
// does not negotiate FUSE_DONT_MASK), and the server's own umask is 0
// (Serve), so nothing is masked twice.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *gofuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	dir, _, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer dir.close()
	flags &^= syscall.O_APPEND | gofuse.FMODE_EXEC
	e := dir.in(name)
	fd, err := unix.Openat(e.dir, e.name, int(flags)|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	n.own(ctx, dir, name, mode)
	ch, errno := n.entryOut(ctx, e, out)
	if errno != 0 {
		syscall.Close(fd)
		return nil, nil, 0, errno
	}
	return ch, newFile(fd, ch.Operations().(*node), false), gofuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, 0, out, func(dir at, overWhiteout bool) error {
		e := dir.in(name)
		if err := unix.Mkdirat(e.dir, e.name, mode); err != nil {
			return err
		}
		if overWhiteout {
			return layer.SetOpaque(e.proc()) // nothing of the lower directory shows through
		}
		return nil
	})
}

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, mode, out, func(dir at, _ bool) error {
		e := dir.in(name)
		return unix.Mknodat(e.dir, e.name, mode, int(dev))
	})
}

func (n *node) Symlink(ctx context.Context, target, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, 0, out, func(dir at, _ bool) error {
		e := dir.in(name)
		return unix.Symlinkat(target, e.dir, e.name)
	})
}

// make creates a new entry name in the upper layer with create (given
// the opened upper directory, and told whether the entry replaces a
// whiteout), owned by the caller; setid is as for own.
func (n *node) make(ctx context.Context, name string, setid uint32, out *gofuse.EntryOut, create func(dir at, overWhiteout bool) error) (*fs.Inode, syscall.Errno) {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	dir, wh, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, errno
	}
	defer dir.close()
	if err := create(dir, wh); err != nil {
		return nil, fs.ToErrno(err)
	}
	n.own(ctx, dir, name, setid)
	return n.entryOut(ctx, dir.in(name), out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	if errno := t.copyUpLocked(); errno != 0 {
		return nil, errno
	}
	dir, _, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, errno
	}
	defer dir.close()
	src, err := n.ov.up(t.rel())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	defer src.close()
	e := dir.in(name)
	if err := unix.Linkat(src.dir, src.name, e.dir, e.name, 0); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := e.lstat(&st); err != nil {
		return nil, fs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	t.setIno(&out.Attr)
	return t.EmbeddedInode(), 0 // the same file: one inode in the kernel too
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	p, err := n.path()
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	defer p.close()
	s, err := readlinkAt(p)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return []byte(s), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	rel, ok := n.childRel(name)
	if !ok {
		return syscall.ENOENT
	}
	lower := n.lowerHas(name)
	if lower {
		if errno := n.copyUpLocked(); errno != 0 {
			return errno
		}
	}
	u, err := n.ov.up(rel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer u.close()
	if lower {
		n.detach(name) // (a copied-up file's content is only in the upper layer)
		return fs.ToErrno(n.ov.makeWhiteout(u))
	}
	if _, has, _ := upperState(u); !has {
		return syscall.ENOENT
	}
	n.detach(name)
	return fs.ToErrno(unix.Unlinkat(u.dir, u.name, 0))
}

// child finds the node of name in n.
func (n *node) child(ctx context.Context, name string) (*node, syscall.Errno) {
	ch := n.GetChild(name)
	if ch == nil {
		var out gofuse.EntryOut
		var errno syscall.Errno
		if ch, errno = n.Lookup(ctx, name, &out); errno != 0 {
			return nil, errno
		}
	}
	c, ok := ch.Operations().(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	return c, 0
}

// empty reports whether directory c (at rel) shows no entry.
func (c *node) empty(rel string) (bool, syscall.Errno) {
	ents, errno := c.ov.list(rel, c.lower, c.lowerOK)
	return len(ents) == 0, errno
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	rel, ok := n.childRel(name)
	if !ok {
		return syscall.ENOENT
	}
	c, errno := n.child(ctx, name)
	if errno != 0 {
		return errno
	}
	if empty, errno := c.empty(rel); errno != 0 {
		return errno
	} else if !empty {
		return syscall.ENOTEMPTY
	}
	lower := n.lowerHas(name)
	if lower {
		if errno := n.copyUpLocked(); errno != 0 {
			return errno
		}
	}
	u, err := n.ov.up(rel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer u.close()
	_, has, _ := upperState(u)
	if has {
		if err := removeAll(u); err != nil {
			return fs.ToErrno(err)
		}
	}
	if lower {
		return fs.ToErrno(n.ov.makeWhiteout(u))
	}
	if !has {
		return syscall.ENOENT
	}
	return 0
}

// Rename moves in the upper layer: a file is copied up first; a
// directory with lower content is copied up (the directory alone) and
// gets an overlay redirect to its lower directory, as overlayfs with
// redirect_dir does; a whiteout takes the old name when the lower tree
// has it.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^uint32(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return syscall.EINVAL // RENAME_WHITEOUT: not in this view
	}
	if np.rel() == "" && newName == storeName {
		return syscall.EPERM
	}
	ov := n.ov
	srel, drel := join(n.rel(), name), join(np.rel(), newName)
	src, errno := n.child(ctx, name)
	if errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		return n.exchange(ctx, src, srel, np, newName, drel)
	}
	dir := src.isDir()
	var dst syscall.Stat_t
	var dstHas, dstWh bool
	if d, err := ov.up(drel); err == nil { // else the upper layer has nothing there
		dst, dstHas, dstWh = upperState(d)
		d.close()
	}
	dstLower := np.lowerHas(newName)
	if flags&unix.RENAME_NOREPLACE != 0 && (dstHas || dstLower && !dstWh) {
		return syscall.EEXIST
	}
	dstDir := dstHas && dst.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if dir && (dstDir || dstLower && !dstWh) {
		d, errno := np.child(ctx, newName)
		if errno != 0 {
			return errno
		}
		if empty, errno := d.empty(drel); errno != 0 {
			return errno
		} else if !empty {
			return syscall.ENOTEMPTY
		}
	}
	if errno := src.copyUpLocked(); errno != 0 {
		return errno
	}
	if errno := np.copyUpLocked(); errno != 0 {
		return errno
	}
	s, err := ov.up(srel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer s.close()
	d, err := ov.up(drel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.close()
	if dstWh || dir && dstDir {
		if err := removeAll(d); err != nil { // a whiteout, or a directory of whiteouts
			return fs.ToErrno(err)
		}
	}
	if !dir {
		np.detach(newName) // the file renamed over, maybe open
	}
	srcLower := n.lowerHas(name)
	if srcLower && ov.asRoot {
		if err := layer.RenameLeavingWhiteout(s.proc(), d.proc()); err != nil {
			return fs.ToErrno(err)
		}
	} else {
		if err := unix.Renameat(s.dir, s.name, d.dir, d.name); err != nil {
			return fs.ToErrno(err)
		}
		if srcLower {
			if err := ov.makeWhiteout(s); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if dir && src.lowerOK {
		// Its lower children stay where they are: the redirect names them.
		if err := layer.SetRedirect(d.proc(), src.lower); err != nil {
			return fs.ToErrno(err)
		}
	} else if dir && dstLower {
		if err := layer.SetOpaque(d.proc()); err != nil {
			return fs.ToErrno(err)
		}
	}
	return 0
}

// exchange swaps two names (renameat2 RENAME_EXCHANGE): both exist, so
// no whiteout is needed; directories with lower content, or moving to
// where the lower tree has something, are refused with EXDEV.
func (n *node) exchange(ctx context.Context, src *node, srel string, np *node, newName, drel string) syscall.Errno {
	dst, errno := np.child(ctx, newName)
	if errno != 0 {
		return errno
	}
	for _, c := range []*node{src, dst} {
		if c.isDir() && (c.lowerOK || n.lowerHas(base(srel)) || np.lowerHas(newName)) {
			return syscall.EXDEV
		}
	}
	for _, c := range []*node{src, dst, n, np} {
		if errno := c.copyUpLocked(); errno != 0 {
			return errno
		}
	}
	s, err := n.ov.up(srel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer s.close()
	d, err := n.ov.up(drel)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.close()
	return fs.ToErrno(unix.Renameat2(s.dir, s.name, d.dir, d.name, unix.RENAME_EXCHANGE))
}

// base is the last element of a view path.
func base(rel string) string { return rel[strings.LastIndexByte(rel, '/')+1:] }

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if layer.IsMark(attr) {
		return 0, syscall.ENODATA
	}
	p, err := n.path()
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	defer p.close()
	sz, err := unix.Lgetxattr(p.proc(), attr, dest)
	return uint32(sz), fs.ToErrno(err)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	a, err := n.path()
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	defer a.close()
	p := a.proc()
	sz, err := unix.Llistxattr(p, nil)
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	buf := make([]byte, sz)
	if sz, err = unix.Llistxattr(p, buf); err != nil {
		return 0, fs.ToErrno(err)
	}
	var out []byte
	for _, x := range bytes.Split(buf[:sz], []byte{0}) {
		if len(x) > 0 && !layer.IsMark(string(x)) {
			out = append(append(out, x...), 0)
		}
	}
	if len(dest) == 0 {
		return uint32(len(out)), 0
	}
	if len(dest) < len(out) {
		return 0, syscall.ERANGE
	}
	return uint32(copy(dest, out)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if layer.IsMark(attr) {
		return syscall.EPERM
	}
	if errno := n.copyUp(); errno != 0 {
		return errno
	}
	p, err := n.ov.up(n.rel())
	if err != nil {
		return fs.ToErrno(err)
	}
	defer p.close()
	return fs.ToErrno(unix.Lsetxattr(p.proc(), attr, data, int(flags)))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if layer.IsMark(attr) {
		return syscall.EPERM
	}
	if errno := n.copyUp(); errno != 0 {
		return errno
	}
	p, err := n.ov.up(n.rel())
	if err != nil {
		return fs.ToErrno(err)
	}
	defer p.close()
	return fs.ToErrno(unix.Lremovexattr(p.proc(), attr))
}

func (n *node) Statfs(ctx context.Context, out *gofuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Fstatfs(n.ov.upperFd, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}
