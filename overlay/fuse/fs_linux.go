//go:build linux

package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	lower, upper, work string
	asRoot             bool // whiteouts as 0/0 devices; owners preserved

	// mu serializes copy-ups and the operations that change names, so a
	// copy-up never races an unlink or rename of the same path.
	mu      sync.Mutex
	aliasMu sync.Mutex
	alias   map[uint64]uint64 // upper inode number -> the view's inode number (after a copy-up)
	seq     atomic.Uint64
	gen     atomic.Uint64 // generations that tell lower hard links apart
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
	for _, d := range []string{lower, upper, work} {
		if st, err := os.Stat(d); err != nil {
			return nil, err
		} else if !st.IsDir() {
			return nil, fmt.Errorf("%s: not a directory", d)
		}
	}
	ov := &overlayFS{lower: lower, upper: upper, work: work, asRoot: os.Geteuid() == 0, alias: map[uint64]uint64{}}
	return &node{ov: ov, lowerOK: true}, nil // lower "": the root
}

// options are the go-fuse options of every view.
func options() *fs.Options {
	t := cacheTimeout
	return &fs.Options{
		EntryTimeout:    &t,
		AttrTimeout:     &t,
		NegativeTimeout: &t,
		MountOptions: gofuse.MountOptions{
			FsName:       "snapback",
			Name:         "snapback",
			MaxWrite:     1 << 20,
			AllowOther:   true,
			Options:      []string{"default_permissions"},
			MaxReadAhead: 1 << 20,
		},
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (ov *overlayFS) up(rel string) string  { return filepath.Join(ov.upper, rel) }
func (ov *overlayFS) low(rel string) string { return filepath.Join(ov.lower, rel) }

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

// path is where the node's current state is: upper when it has one.
func (n *node) path() string {
	rel := n.rel()
	if n.isDir() {
		if !n.lowerOK || exists(n.ov.up(rel)) {
			return n.ov.up(rel)
		}
		return n.ov.low(n.lower)
	}
	if n.inUpper.Load() {
		return n.ov.up(rel)
	}
	return n.ov.low(n.lower)
}

func exists(p string) bool {
	var st syscall.Stat_t
	return syscall.Lstat(p, &st) == nil
}

// isWhiteout reads both whiteout forms.
func isWhiteout(p string, st *syscall.Stat_t) bool {
	return layer.IsWhiteout(st.Mode, st.Rdev, st.Size, layer.PathGetter(p))
}

// upperState says what the upper layer has at p: nothing (ENOENT), a
// whiteout, or an entry.
func upperState(p string) (st syscall.Stat_t, has, whiteout bool) {
	if syscall.Lstat(p, &st) != nil {
		return st, false, false
	}
	if isWhiteout(p, &st) {
		return st, false, true
	}
	return st, true, false
}

// lowerHas reports whether the lower tree shows an entry name in n (a
// whiteout must then hide it).
func (n *node) lowerHas(name string) bool {
	return n.lowerOK && exists(n.ov.low(join(n.lower, name)))
}

// redirect reads an upper directory's overlay redirect: the lower
// directory it shows.
func redirect(p, parentLower string) (string, bool) {
	r, ok := layer.Redirect(layer.PathGetter(p))
	if !ok {
		return "", false
	}
	return layer.Origin(r, parentLower), true
}

func isLowerDir(p string) bool {
	var st syscall.Stat_t
	return syscall.Lstat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
}

func (ov *overlayFS) tmpName() string {
	return filepath.Join(ov.work, "fuse-"+strconv.FormatUint(ov.seq.Add(1), 10)+"-"+strconv.Itoa(os.Getpid()))
}

// makeWhiteout replaces whatever non-directory is at p with a whiteout.
func (ov *overlayFS) makeWhiteout(p string) error {
	tmp := ov.tmpName()
	if err := makeWhiteout(tmp, ov.asRoot); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
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
	if inUpper {
		id.Ino = n.ov.stable(id.Ino)
	} else if id.Mode != syscall.S_IFDIR && st.Nlink > 1 {
		// A lower hard link is a node of its own (a copy-up splits the
		// link), with the lower inode number: until then `cp -a` or tar
		// see the names as one file, as on overlayfs.
		id.Gen = n.ov.gen.Add(1)
	}
	c := &node{ov: n.ov, lower: lower, lowerOK: lowerOK}
	c.inUpper.Store(inUpper)
	ch := n.NewInode(ctx, c, id)
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

func (n *node) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel, ok := n.childRel(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	st, has, wh := upperState(n.ov.up(rel))
	if wh {
		return nil, syscall.ENOENT
	}
	lower := join(n.lower, name)
	if has {
		lowerOK := false
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR && !layer.IsOpaque(layer.PathGetter(n.ov.up(rel))) {
			if r, ok := redirect(n.ov.up(rel), n.lower); ok {
				lower, lowerOK = r, isLowerDir(n.ov.low(r))
			} else {
				lowerOK = n.lowerOK && isLowerDir(n.ov.low(lower))
			}
		}
		return n.newChild(ctx, &st, true, lower, lowerOK, out), 0
	}
	if !n.lowerOK {
		return nil, syscall.ENOENT
	}
	if err := syscall.Lstat(n.ov.low(lower), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, false, lower, st.Mode&syscall.S_IFMT == syscall.S_IFDIR, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	err := syscall.Lstat(n.path(), &st)
	if err != nil {
		if fg, ok := f.(fs.FileGetattrer); ok { // an open file whose name is gone
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
	read := func(dir string, upper bool) syscall.Errno {
		ds, errno := fs.NewLoopbackDirStream(dir)
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
				p := filepath.Join(dir, e.Name)
				var st syscall.Stat_t
				if syscall.Lstat(p, &st) == nil && isWhiteout(p, &st) {
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
	upperDir := exists(ov.up(rel))
	if upperDir {
		if errno := read(ov.up(rel), true); errno != 0 {
			return nil, errno
		}
	}
	if lowerOK {
		if errno := read(ov.low(lower), false); errno != 0 && (errno != syscall.ENOENT || !upperDir) {
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
	return &dirHandle{fs.NewListDirStream(ents).(fs.FileHandle), n}, gofuse.FOPEN_CACHE_DIR | gofuse.FOPEN_KEEP_CACHE, 0
}

// dirHandle is an open directory: its listing, and fsync.
type dirHandle struct {
	fs.FileHandle
	n *node
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	return d.FileHandle.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.FileHandle.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {}

// Fsyncdir makes the upper directory durable (a lower one has nothing
// of the run's to sync).
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	f, err := os.Open(d.n.ov.up(d.n.rel()))
	if err != nil {
		return 0
	}
	defer f.Close() // read-only
	return fs.ToErrno(f.Sync())
}

// copyUpDir makes sure the upper layer has directory d, copying it and
// its parents up from the lower tree where needed. Called with ov.mu held.
func (ov *overlayFS) copyUpDir(d *node) error {
	rel := d.rel()
	if rel == "" || exists(ov.up(rel)) {
		return nil
	}
	_, parent := d.Parent()
	if parent == nil {
		return syscall.ENOENT
	}
	pn := parent.Operations().(*node)
	if err := ov.copyUpDir(pn); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(ov.low(d.lower), &st); err != nil {
		return err
	}
	tmp := ov.tmpName()
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := ov.copyMeta(ov.low(d.lower), tmp, &st, false); err != nil {
		os.Remove(tmp)
		return err
	}
	return ov.install(tmp, rel, pn.lower, &st)
}

// copyMeta gives tmp the owner, mode and xattrs of the lower entry src
// (times are set by install, after the rename).
func (ov *overlayFS) copyMeta(src, tmp string, st *syscall.Stat_t, symlink bool) error {
	if ov.asRoot {
		if err := os.Lchown(tmp, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if !symlink {
		if err := syscall.Chmod(tmp, st.Mode&0o7777); err != nil {
			return err
		}
		if err := copyXattrs(src, tmp); err != nil {
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
func (ov *overlayFS) install(tmp, rel, parentLower string, st *syscall.Stat_t) error {
	parent := filepath.Dir(ov.up(rel))
	var pst, lpst syscall.Stat_t
	keep := syscall.Lstat(parent, &pst) == nil && syscall.Lstat(ov.low(parentLower), &lpst) == nil && pst.Mtim == lpst.Mtim
	if err := os.Rename(tmp, ov.up(rel)); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	ts := []unix.Timespec{unix.Timespec(st.Atim), unix.Timespec(st.Mtim)}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, ov.up(rel), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	var ust syscall.Stat_t
	if err := syscall.Lstat(ov.up(rel), &ust); err == nil && (st.Nlink <= 1 || st.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
		ov.aliasMu.Lock()
		ov.alias[ust.Ino] = st.Ino // (a lower hard link has a node of its own: no alias)
		ov.aliasMu.Unlock()
	}
	if keep {
		pts := []unix.Timespec{unix.Timespec(pst.Atim), unix.Timespec(pst.Mtim)}
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, parent, pts, unix.AT_SYMLINK_NOFOLLOW) // cosmetic: the parent then shows as changed
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
	if _, _, wh := upperState(ov.up(rel)); wh {
		return syscall.ENOENT // unlinked while this waited for the lock
	}
	src := ov.low(n.lower)
	var st syscall.Stat_t
	if err := syscall.Lstat(src, &st); err != nil {
		return fs.ToErrno(err)
	}
	tmp := ov.tmpName()
	var err error
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		err = copyData(src, tmp)
	case syscall.S_IFLNK:
		var target string
		if target, err = os.Readlink(src); err == nil {
			err = os.Symlink(target, tmp)
		}
	default:
		err = unix.Mknod(tmp, st.Mode, int(st.Rdev))
	}
	if err == nil {
		err = ov.copyMeta(src, tmp, &st, st.Mode&syscall.S_IFMT == syscall.S_IFLNK)
	}
	if err == nil {
		err = ov.install(tmp, rel, pn.lower, &st)
	}
	if err != nil {
		os.Remove(tmp)
		return fs.ToErrno(err)
	}
	n.inUpper.Store(true)
	return 0
}

// copyData copies a regular file's content (reflink or sparse copy).
func copyData(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close() // read-only
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := fsutil.CopyFile(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *gofuse.SetAttrIn, out *gofuse.AttrOut) syscall.Errno {
	if fsa, ok := f.(fs.FileSetattrer); ok && n.inUpper.Load() && n.rel() == orphan {
		return fsa.Setattr(ctx, in, out) // an open upper file without a name: its descriptor is the upper one
	}
	if errno := n.copyUp(); errno != 0 {
		return errno
	}
	// Always by path in the upper layer: a handle may be a read-only
	// descriptor of the lower file, which must never change.
	p := n.ov.up(n.rel())
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
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
		if err := unix.Fchownat(unix.AT_FDCWD, p, su, sg, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := syscall.Truncate(p, int64(sz)); err != nil {
			return fs.ToErrno(err)
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
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	n.setIno(&out.Attr)
	return 0
}

const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC | syscall.O_APPEND

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
	fd, err := syscall.Open(n.path(), int(flags)|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
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
	n     *node
	lower bool

	mu sync.Mutex
	up *os.File // the upper copy, opened read-only after a copy-up
}

var _ fs.FilePassthroughFder = (*file)(nil)

func newFile(fd int, n *node, lower bool) *file {
	return &file{LoopbackFile: fs.NewLoopbackFileFromOS(os.NewFile(uintptr(fd), "")), n: n, lower: lower}
}

// PassthroughFd declines passthrough (see file).
func (f *file) PassthroughFd() (int, bool) { return -1, false }

func (f *file) Read(ctx context.Context, buf []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	if f.lower && f.n.inUpper.Load() {
		f.mu.Lock()
		if f.up == nil {
			if up, err := os.Open(f.n.ov.up(f.n.rel())); err == nil {
				f.up = up
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
// tree had something there).
func (n *node) prepareNew(name string) (rel string, overWhiteout bool, errno syscall.Errno) {
	prel := n.rel()
	if prel == "" && name == storeName {
		return "", false, syscall.EPERM
	}
	if errno := n.copyUpLocked(); errno != 0 {
		return "", false, errno
	}
	rel = join(prel, name)
	if _, _, wh := upperState(n.ov.up(rel)); wh {
		if err := syscall.Unlink(n.ov.up(rel)); err != nil {
			return "", false, fs.ToErrno(err)
		}
		overWhiteout = true
	}
	return rel, overWhiteout, 0
}

// own gives a new upper entry the caller's uid and gid (the server runs
// as root), keeping a set-group-ID directory's group.
func (n *node) own(ctx context.Context, p string) {
	if !n.ov.asRoot {
		return
	}
	caller, ok := gofuse.FromContext(ctx)
	if !ok {
		return
	}
	gid := int(caller.Gid)
	var pst syscall.Stat_t
	if syscall.Lstat(filepath.Dir(p), &pst) == nil && pst.Mode&syscall.S_ISGID != 0 {
		gid = -1
	}
	_ = os.Lchown(p, int(caller.Uid), gid) // root can always chown
}

func (n *node) entryOut(ctx context.Context, p string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, true, "", false, out), 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *gofuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	rel, _, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	p := n.ov.up(rel)
	flags &^= syscall.O_APPEND | gofuse.FMODE_EXEC
	fd, err := syscall.Open(p, int(flags)|syscall.O_CREAT|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	n.own(ctx, p)
	ch, errno := n.entryOut(ctx, p, out)
	if errno != 0 {
		syscall.Close(fd)
		return nil, nil, 0, errno
	}
	return ch, newFile(fd, ch.Operations().(*node), false), gofuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, out, func(p string, overWhiteout bool) error {
		if err := syscall.Mkdir(p, mode); err != nil {
			return err
		}
		if overWhiteout {
			return layer.SetOpaque(p) // nothing of the lower directory shows through
		}
		return nil
	})
}

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, out, func(p string, _ bool) error { return unix.Mknod(p, mode, int(dev)) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, out, func(p string, _ bool) error { return os.Symlink(target, p) })
}

// make creates a new entry name in the upper layer with create (told
// whether it replaces a whiteout), owned by the caller.
func (n *node) make(ctx context.Context, name string, out *gofuse.EntryOut, create func(p string, overWhiteout bool) error) (*fs.Inode, syscall.Errno) {
	n.ov.mu.Lock()
	defer n.ov.mu.Unlock()
	rel, wh, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, errno
	}
	p := n.ov.up(rel)
	if err := create(p, wh); err != nil {
		return nil, fs.ToErrno(err)
	}
	n.own(ctx, p)
	return n.entryOut(ctx, p, out)
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
	rel, _, errno := n.prepareNew(name)
	if errno != 0 {
		return nil, errno
	}
	p := n.ov.up(rel)
	if err := os.Link(n.ov.up(t.rel()), p); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	t.setIno(&out.Attr)
	return t.EmbeddedInode(), 0 // the same file: one inode in the kernel too
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := os.Readlink(n.path())
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
	_, has, _ := upperState(n.ov.up(rel))
	if n.lowerHas(name) {
		if errno := n.copyUpLocked(); errno != 0 {
			return errno
		}
		return fs.ToErrno(n.ov.makeWhiteout(n.ov.up(rel)))
	}
	if !has {
		return syscall.ENOENT
	}
	return fs.ToErrno(syscall.Unlink(n.ov.up(rel)))
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
	_, has, _ := upperState(n.ov.up(rel))
	if has {
		if err := os.RemoveAll(n.ov.up(rel)); err != nil { // only whiteouts are left in it
			return fs.ToErrno(err)
		}
	}
	if n.lowerHas(name) {
		if errno := n.copyUpLocked(); errno != 0 {
			return errno
		}
		return fs.ToErrno(n.ov.makeWhiteout(n.ov.up(rel)))
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
	dst, dstHas, dstWh := upperState(ov.up(drel))
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
	if dstWh || dir && dstDir {
		if err := os.RemoveAll(ov.up(drel)); err != nil { // a whiteout, or a directory of whiteouts
			return fs.ToErrno(err)
		}
	}
	srcLower := n.lowerHas(name)
	if srcLower && ov.asRoot {
		if err := layer.RenameLeavingWhiteout(ov.up(srel), ov.up(drel)); err != nil {
			return fs.ToErrno(err)
		}
	} else {
		if err := os.Rename(ov.up(srel), ov.up(drel)); err != nil {
			return fs.ToErrno(err)
		}
		if srcLower {
			if err := ov.makeWhiteout(ov.up(srel)); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if dir && src.lowerOK {
		// Its lower children stay where they are: the redirect names them.
		if err := layer.SetRedirect(ov.up(drel), src.lower); err != nil {
			return fs.ToErrno(err)
		}
	} else if dir && dstLower {
		if err := layer.SetOpaque(ov.up(drel)); err != nil {
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
	return fs.ToErrno(unix.Renameat2(unix.AT_FDCWD, n.ov.up(srel), unix.AT_FDCWD, n.ov.up(drel), unix.RENAME_EXCHANGE))
}

// base is the last element of a view path.
func base(rel string) string { return rel[strings.LastIndexByte(rel, '/')+1:] }

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if layer.IsMark(attr) {
		return 0, syscall.ENODATA
	}
	sz, err := unix.Lgetxattr(n.path(), attr, dest)
	return uint32(sz), fs.ToErrno(err)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	p := n.path()
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
	return fs.ToErrno(unix.Lsetxattr(n.ov.up(n.rel()), attr, data, int(flags)))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if layer.IsMark(attr) {
		return syscall.EPERM
	}
	if errno := n.copyUp(); errno != 0 {
		return errno
	}
	return fs.ToErrno(unix.Lremovexattr(n.ov.up(n.rel()), attr))
}

func (n *node) Statfs(ctx context.Context, out *gofuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.ov.upper, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}
