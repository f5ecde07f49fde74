//go:build linux

package fuse

import (
	"context"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// Zero-message file opens: OPEN answers ENOSYS (rawFS), so the kernel
// (FUSE_NO_OPEN_SUPPORT) sends no OPEN, RELEASE or FLUSH for any file
// again, and every READ, WRITE, FSYNC and FALLOCATE comes without a
// handle. The node serves them by name: a read opens the node's current
// entry (the upper copy once there is one, so a reader never sees the
// lower file after a copy-up), a write copies up first, as opening for
// writing did. A file whose name goes (unlink, a rename over it) while
// the kernel may still have it open keeps its content through a
// descriptor held by the node until the kernel forgets it (detach).

var (
	_ fs.NodeReader      = (*node)(nil)
	_ fs.NodeWriter      = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
	_ fs.NodeAllocater   = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)

// detachedFile is the held descriptor of a node without a name.
type detachedFile struct {
	mu sync.Mutex
	f  *file
}

// handle is the handle to serve a request with: the kernel's (opened
// before it learnt OPEN's ENOSYS, or on a kernel without
// FUSE_NO_OPEN_SUPPORT), else the node's detached descriptor, else nil
// (serve by name).
func (n *node) handle(f fs.FileHandle) fs.FileHandle {
	if f != nil {
		return f
	}
	n.detached.mu.Lock()
	defer n.detached.mu.Unlock()
	if n.detached.f != nil {
		return n.detached.f
	}
	return nil
}

// detach holds a descriptor of the file of child name before its name
// goes: the kernel may have it open. An upper file's is opened for
// writing; a lower file's only for reading (a write gives it a private
// copy first, copyUpDetached). Called with ov.mu held.
func (n *node) detach(name string) {
	ch := n.GetChild(name)
	if ch == nil {
		return
	}
	c, ok := ch.Operations().(*node)
	if !ok || c.StableAttr().Mode != syscall.S_IFREG {
		return
	}
	p, err := c.path()
	if err != nil {
		return
	}
	upper := c.inUpper.Load()
	mode := unix.O_RDONLY
	if upper {
		mode = unix.O_RDWR
	}
	fd, err := unix.Openat(p.dir, p.name, mode|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil && upper {
		// An ordinary user's server may not write a read-only file: its
		// readers keep their content at least.
		mode = unix.O_RDONLY
		fd, err = unix.Openat(p.dir, p.name, mode|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	p.close()
	if err != nil {
		return // (not a file any more)
	}
	c.setDetached(newFile(fd, c, !upper))
}

// orphanAttr answers GETATTR for a file without a name from its held
// descriptor (its link count 0, as the kernel has it for an open
// unlinked file).
func (n *node) orphanAttr(ctx context.Context, out *gofuse.AttrOut) (bool, syscall.Errno) {
	n.detached.mu.Lock()
	h := n.detached.f
	n.detached.mu.Unlock()
	if h == nil || n.rel() != orphan {
		return false, 0
	}
	errno := h.Getattr(ctx, out)
	if h.lower {
		out.Nlink = 0 // the lower file still has its name there
	}
	n.setIno(&out.Attr)
	return true, errno
}

func (n *node) setDetached(f *file) {
	n.detached.mu.Lock()
	old := n.detached.f
	n.detached.f = f
	n.detached.mu.Unlock()
	if old != nil {
		old.Release(context.Background())
	}
}

// OnForget closes the detached descriptor: the kernel has no open file
// of the node any more.
func (n *node) OnForget() { n.setDetached(nil) }

func (n *node) Read(ctx context.Context, f fs.FileHandle, buf []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	if h, ok := n.handle(f).(fs.FileReader); ok {
		return h.Read(ctx, buf, off)
	}
	p, err := n.path()
	if err != nil {
		return retry(n, err, func(h fs.FileHandle) (gofuse.ReadResult, syscall.Errno) {
			return h.(fs.FileReader).Read(ctx, buf, off)
		})
	}
	fd, err := unix.Openat(p.dir, p.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	p.close()
	if err != nil {
		return retry(n, err, func(h fs.FileHandle) (gofuse.ReadResult, syscall.Errno) {
			return h.(fs.FileReader).Read(ctx, buf, off)
		})
	}
	defer unix.Close(fd) // read-only
	nr, err := unix.Pread(fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return gofuse.ReadResultData(buf[:nr]), 0
}

// retry serves a request whose by-name open failed with the detached
// descriptor, if the name went meanwhile.
func retry[T any](n *node, err error, serve func(fs.FileHandle) (T, syscall.Errno)) (T, syscall.Errno) {
	if h := n.handle(nil); h != nil {
		return serve(h)
	}
	var zero T
	return zero, fs.ToErrno(err)
}

// writable returns an upper descriptor to change the node's content
// through, copying up first; release it when done.
func (n *node) writable(ctx context.Context, f fs.FileHandle) (*file, bool, syscall.Errno) {
	if h := n.handle(f); h != nil {
		if hf, ok := h.(*file); ok && hf.lower {
			if f != nil {
				return nil, false, syscall.EBADF // a handle the kernel opened read-only
			}
			if errno := n.copyUpDetached(hf); errno != 0 {
				return nil, false, errno
			}
			return n.writable(ctx, nil)
		}
		hf, ok := h.(*file)
		if !ok {
			return nil, false, syscall.EBADF
		}
		return hf, false, 0
	}
	if errno := n.copyUp(); errno != 0 {
		if h := n.handle(nil); h != nil { // the name went meanwhile
			return n.writable(ctx, nil)
		}
		return nil, false, errno
	}
	u, err := n.ov.up(n.rel())
	if err != nil {
		return nil, false, fs.ToErrno(err)
	}
	fd, err := unix.Openat(u.dir, u.name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	u.close()
	if err != nil {
		if h := n.handle(nil); h != nil {
			return n.writable(ctx, nil)
		}
		return nil, false, fs.ToErrno(err)
	}
	return newFile(fd, n, false), true, 0
}

// copyUpDetached gives a lower file that lost its name a private copy
// (an unnamed file in the work directory) before it is written.
func (n *node) copyUpDetached(lower *file) syscall.Errno {
	fd, err := unix.Openat(n.ov.workFd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fs.ToErrno(err)
	}
	dup, err := unix.Dup(lower.fd)
	if err != nil {
		unix.Close(fd)
		return fs.ToErrno(err)
	}
	in := os.NewFile(uintptr(dup), "lower")
	defer in.Close() // read-only
	out := os.NewFile(uintptr(fd), "copy")
	var st unix.Stat_t
	err = unix.Fstat(dup, &st)
	if err == nil {
		err = fsutil.CopyFile(out, in)
	}
	if err == nil && n.ov.asRoot {
		err = unix.Fchown(fd, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = unix.Fchmod(fd, st.Mode&0o7777)
	}
	if err != nil {
		out.Close()
		return fs.ToErrno(err)
	}
	fd2, err := unix.Dup(fd)
	out.Close() // (the copy lives on through fd2)
	if err != nil {
		return fs.ToErrno(err)
	}
	n.setDetached(newFile(fd2, n, false))
	return 0
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	w, own, errno := n.writable(ctx, f)
	if errno != 0 {
		return 0, errno
	}
	if own {
		defer w.Release(ctx)
	}
	return w.Write(ctx, data, off)
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	w, own, errno := n.writable(ctx, f)
	if errno != 0 {
		return errno
	}
	if own {
		defer w.Release(ctx)
	}
	return w.Allocate(ctx, off, size, mode)
}

// Fsync syncs the upper entry (the lower one has nothing of the run's).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := n.handle(f).(fs.FileFsyncer); ok {
		return h.Fsync(ctx, flags)
	}
	if !n.isDir() && !n.inUpper.Load() {
		return 0
	}
	u, err := n.ov.up(n.rel())
	if err != nil {
		return fs.ToErrno(err)
	}
	fd, err := unix.Openat(u.dir, u.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	u.close()
	if err != nil {
		if n.isDir() && err == unix.ENOENT {
			return 0 // a lower directory
		}
		return fs.ToErrno(err)
	}
	defer unix.Close(fd) // read-only
	return fs.ToErrno(unix.Fsync(fd))
}
