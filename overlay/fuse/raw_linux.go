//go:build linux

package fuse

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// rawFS is the node tree's request bridge with zero-message opens. For
// directories: OPENDIR answers ENOSYS, so the kernel
// (FUSE_NO_OPENDIR_SUPPORT) never sends OPENDIR or RELEASEDIR again and
// caches every listing (FOPEN_CACHE_DIR is its default then). go-fuse's
// fs package cannot say that itself: its READDIR needs a handle. So the
// handle lives here, on the server's side: READDIR(PLUS) at offset 0
// opens one for the directory (a fresh listing), later offsets continue
// it, the end of the listing releases it. For files: OPEN, CREATE and
// FLUSH answer ENOSYS (FUSE_NO_OPEN_SUPPORT), and the nodes serve
// requests without handles (noopen_linux.go). On a kernel that cannot
// do without opens, the bridge answers them as it would.
type rawFS struct {
	gofuse.RawFileSystem

	srv  *gofuse.Server
	ov   *overlayFS
	mu   sync.Mutex
	dirs map[uint64]*dirRef // node id -> its listing being read
}

// dirRef is a listing opened in the bridge, released once stale (a new
// listing replaced it, it reached its end, the node was forgotten) and
// no request reads it any more.
type dirRef struct {
	node  uint64
	fh    uint64
	users int
	stale bool
}

func newRawFS(root *node, opts *fs.Options) *rawFS {
	return &rawFS{RawFileSystem: fs.NewNodeFS(root, opts), ov: root.ov, dirs: map[uint64]*dirRef{}}
}

// mayWrite is called before serving any request that may change the
// upper layer: from then on, lookups and listings read it
// (overlayFS.upperEmpty). Every such request of the protocol passes
// here, whether or not the node tree implements it.
func (r *rawFS) mayWrite() {
	if r.ov.upperEmpty.Load() {
		r.ov.upperEmpty.Store(false)
	}
}

func (r *rawFS) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.SetAttr(cancel, in, out)
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (r *rawFS) Unlink(cancel <-chan struct{}, in *gofuse.InHeader, name string) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Unlink(cancel, in, name)
}

func (r *rawFS) Rmdir(cancel <-chan struct{}, in *gofuse.InHeader, name string) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Rmdir(cancel, in, name)
}

func (r *rawFS) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (r *rawFS) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Link(cancel, in, name, out)
}

func (r *rawFS) Symlink(cancel <-chan struct{}, in *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Symlink(cancel, in, target, name, out)
}

func (r *rawFS) SetXAttr(cancel <-chan struct{}, in *gofuse.SetXAttrIn, attr string, data []byte) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (r *rawFS) RemoveXAttr(cancel <-chan struct{}, in *gofuse.InHeader, attr string) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.RemoveXAttr(cancel, in, attr)
}

func (r *rawFS) Tmpfile(cancel <-chan struct{}, in *gofuse.CreateIn, out *gofuse.CreateOut) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Tmpfile(cancel, in, out)
}

func (r *rawFS) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	r.mayWrite()
	return r.RawFileSystem.Write(cancel, in, data)
}

func (r *rawFS) Writev(cancel <-chan struct{}, in *gofuse.WriteIn, data [][]byte) (uint32, gofuse.Status) {
	r.mayWrite()
	return r.RawFileSystem.Writev(cancel, in, data)
}

func (r *rawFS) CopyFileRange(cancel <-chan struct{}, in *gofuse.CopyFileRangeIn) (uint32, gofuse.Status) {
	r.mayWrite()
	return r.RawFileSystem.CopyFileRange(cancel, in)
}

func (r *rawFS) Ioctl(cancel <-chan struct{}, in *gofuse.IoctlIn, inbuf []byte, out *gofuse.IoctlOut, outbuf []byte) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (r *rawFS) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Fsync(cancel, in)
}

func (r *rawFS) Fallocate(cancel <-chan struct{}, in *gofuse.FallocateIn) gofuse.Status {
	r.mayWrite()
	return r.RawFileSystem.Fallocate(cancel, in)
}

// reset drops every listing being read (a kept view between runs).
func (r *rawFS) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.dirs {
		r.unlist(id)
	}
}

func (r *rawFS) Init(srv *gofuse.Server) {
	r.srv = srv
	r.RawFileSystem.Init(srv)
}

func (r *rawFS) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	if r.srv.KernelSettings().Flags64()&gofuse.CAP_NO_OPENDIR_SUPPORT == 0 {
		return r.RawFileSystem.OpenDir(cancel, in, out) // an older kernel: ENOSYS would fail the open
	}
	return gofuse.ENOSYS
}

func (r *rawFS) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return r.readDir(cancel, in, out, r.RawFileSystem.ReadDir)
}

func (r *rawFS) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return r.readDir(cancel, in, out, r.RawFileSystem.ReadDirPlus)
}

type readDirFunc func(<-chan struct{}, *gofuse.ReadIn, *gofuse.DirEntryList) gofuse.Status

func (r *rawFS) readDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList, read readDirFunc) gofuse.Status {
	if in.Fh != 0 { // opened before the kernel learnt ENOSYS: a handle of its own
		return read(cancel, in, out)
	}
	r.mu.Lock()
	d := r.dirs[in.NodeId]
	if d != nil && in.Offset == 0 { // a new reading: a fresh listing
		r.unlist(in.NodeId)
		d = nil
	}
	if d == nil {
		r.mu.Unlock()
		fh, st := r.open(cancel, in)
		if st != gofuse.OK {
			return st
		}
		r.mu.Lock()
		r.unlist(in.NodeId) // another reader may have started one meanwhile
		d = &dirRef{node: in.NodeId, fh: fh}
		r.dirs[in.NodeId] = d
	}
	d.users++
	r.mu.Unlock()

	withFh := *in
	withFh.Fh = d.fh
	st := read(cancel, &withFh, out)

	r.mu.Lock()
	defer r.mu.Unlock()
	d.users--
	if st != gofuse.OK || len(out.Bytes()) == 0 { // the end of the listing (or a failure)
		if r.dirs[in.NodeId] == d {
			delete(r.dirs, in.NodeId)
		}
		d.stale = true
	}
	r.maybeRelease(d)
	return st
}

// unlist marks the node's listing stale. Called with r.mu held.
func (r *rawFS) unlist(nodeid uint64) {
	if d := r.dirs[nodeid]; d != nil {
		delete(r.dirs, nodeid)
		d.stale = true
		r.maybeRelease(d)
	}
}

// maybeRelease releases a stale listing nobody reads. Called with r.mu
// held.
func (r *rawFS) maybeRelease(d *dirRef) {
	if d.stale && d.users == 0 {
		r.RawFileSystem.ReleaseDir(&gofuse.ReleaseIn{InHeader: gofuse.InHeader{NodeId: d.node}, Fh: d.fh})
	}
}

// open opens the node's listing in the bridge.
func (r *rawFS) open(cancel <-chan struct{}, in *gofuse.ReadIn) (uint64, gofuse.Status) {
	oin := gofuse.OpenIn{InHeader: in.InHeader, Flags: syscall.O_RDONLY | syscall.O_DIRECTORY}
	var oout gofuse.OpenOut
	if st := r.RawFileSystem.OpenDir(cancel, &oin, &oout); st != gofuse.OK {
		return 0, st
	}
	return oout.Fh, gofuse.OK
}

// Open answers ENOSYS where the kernel can take it: no OPEN, RELEASE or
// FLUSH is sent for any file from then on (see noopen_linux.go).
func (r *rawFS) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	if !r.noOpen() {
		r.mayWrite() // an open for writing copies up
		return r.RawFileSystem.Open(cancel, in, out)
	}
	return gofuse.ENOSYS
}

func (r *rawFS) noOpen() bool {
	return r.srv.KernelSettings().Flags64()&gofuse.CAP_NO_OPEN_SUPPORT != 0
}

// Create answers ENOSYS where the kernel runs without opens: it then
// makes new files with MKNOD and opens them without a message (one
// request, as CREATE was, but no RELEASE after it; a CREATE would have
// to hand back a handle before the kernel learns, at its first OPEN,
// that none are needed).
func (r *rawFS) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	if !r.noOpen() {
		r.mayWrite()
		return r.RawFileSystem.Create(cancel, in, name, out)
	}
	return gofuse.ENOSYS
}

// Release ignores handle 0 (no handle: go-fuse's bridge keeps an entry
// of its own there).
func (r *rawFS) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	if in.Fh != 0 {
		r.RawFileSystem.Release(cancel, in)
	}
}

// Flush without a handle answers ENOSYS: the kernel then sends no FLUSH
// again. Nothing is left to flush at close: every write has reached the
// upper file, and locks are the kernel's own (go-fuse does not take
// them).
func (r *rawFS) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	if in.Fh == 0 {
		return gofuse.ENOSYS
	}
	r.mayWrite()
	return r.RawFileSystem.Flush(cancel, in)
}

// FsyncDir without a handle syncs through one opened for the call.
func (r *rawFS) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	r.mayWrite()
	if in.Fh != 0 {
		return r.RawFileSystem.FsyncDir(cancel, in)
	}
	rin := gofuse.ReadIn{InHeader: in.InHeader}
	fh, st := r.open(cancel, &rin)
	if st != gofuse.OK {
		return st
	}
	defer r.RawFileSystem.ReleaseDir(&gofuse.ReleaseIn{InHeader: in.InHeader, Fh: fh})
	withFh := *in
	withFh.Fh = fh
	return r.RawFileSystem.FsyncDir(cancel, &withFh)
}

// Forget drops the node's listing (go-fuse may give a forgotten node's
// id to another node). BATCH_FORGET comes here too.
func (r *rawFS) Forget(nodeid, nlookup uint64) {
	r.drop(nodeid)
	r.RawFileSystem.Forget(nodeid, nlookup)
}

func (r *rawFS) drop(nodeid uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlist(nodeid)
}
