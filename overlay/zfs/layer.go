//go:build linux

package zfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/overlay/layer"
	"golang.org/x/sys/unix"
)

// WriteLayer writes into upper (an empty directory) what differs in view
// from base, both the project's root in a clone of the same snapshot, as
// an upper layer of overlayfs: an entry whose stat differs (or is new) is
// copied whole, its hard links within the layer kept; a name of base gone
// from view is a whiteout; a directory holding either is made with the
// view's owner, mode and times. The store's name at the root is passed
// over on both sides. A directory of view that replaced one of base (a
// new inode) gets a whiteout for each name of the old one it lacks:
// zfs-fuse keeps no xattrs, so no opaque mark. Every entry of view is
// stat'ed; only what differs is read.
//
// taken is when the snapshot was taken (Unix seconds): zfs-fuse keeps
// times in whole seconds, so a file rewritten within the second of the
// snapshot, to the same size, keeps its stat; a file whose ctime is not
// older than taken is compared by content too.
func WriteLayer(base, view, upper string, taken int64) error {
	w := &writer{links: map[uint64]string{}, taken: taken}
	var err error
	if w.base, err = fsutil.OpenRoot(base); err != nil {
		return err
	}
	defer w.base.Close()
	if w.view, err = fsutil.OpenRoot(view); err != nil {
		return err
	}
	defer w.view.Close()
	if w.upper, err = fsutil.OpenRoot(upper); err != nil {
		return err
	}
	defer w.upper.Close()
	vst, err := w.view.Lstat(".")
	if err != nil {
		return err
	}
	bst, err := w.base.Lstat(".")
	if err != nil {
		return err
	}
	if _, err := w.dir("", &bst, func() error { return nil }, false); err != nil {
		return err
	}
	if !same(&vst, &bst) {
		// The root's own owner and mode are the upper directory's (a
		// view's merged root takes them from it); its times too.
		return w.meta(w.upper, ".", "", &vst)
	}
	return nil
}

type writer struct {
	base, view, upper *fsutil.Dir
	links             map[uint64]string // view inode → its first path in the layer
	taken             int64             // the snapshot's second
}

// same reports whether an entry of the view is untouched since the
// snapshot its base was cloned from: a clone keeps inode numbers and
// times, and any change moves the ctime.
func same(v, b *unix.Stat_t) bool {
	return v.Ino == b.Ino && v.Mode == b.Mode && v.Ctim == b.Ctim && v.Mtim == b.Mtim &&
		v.Size == b.Size && v.Uid == b.Uid && v.Gid == b.Gid && v.Nlink == b.Nlink
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// dir writes what differs in the directory rel of view from base's
// (bst: base's directory there, nil when it has none that is the same
// directory, so that each of its names is gone). ensure makes rel's
// parent in the layer, and its parents; force makes rel there even if
// nothing below it differs. It reports whether it made rel, whose
// owner, mode and times the caller then sets.
func (w *writer) dir(rel string, bst *unix.Stat_t, ensure func() error, force bool) (bool, error) {
	made := false
	mk := func() error {
		if made {
			return nil
		}
		if err := ensure(); err != nil {
			return err
		}
		made = true
		if rel == "" {
			return nil
		}
		fsutil.Mutating()
		if err := unix.Mkdirat(w.upper.Fd(), rel, 0o700); err != nil {
			return fmt.Errorf("layer: mkdir %s: %w", rel, err)
		}
		return nil
	}
	if force {
		if err := mk(); err != nil {
			return made, err
		}
	}
	vd, err := w.view.OpenDir(rel)
	if err != nil {
		return made, err
	}
	defer vd.Close()
	names, err := vd.ReadDirNames()
	if err != nil {
		return made, err
	}
	slices.Sort(names)
	var bd *fsutil.Dir
	if bst != nil {
		if bd, err = w.base.OpenDir(rel); err != nil {
			return made, err
		}
		defer bd.Close()
		bnames, err := bd.ReadDirNames()
		if err != nil {
			return made, err
		}
		slices.Sort(bnames)
		for _, n := range bnames {
			if _, found := slices.BinarySearch(names, n); found || (rel == "" && n == layout.StoreDir) {
				continue
			}
			if err := mk(); err != nil {
				return made, err
			}
			fsutil.Mutating()
			if err := layer.MakeWhiteout(w.upperPath(join(rel, n)), true); err != nil {
				return made, fmt.Errorf("layer: whiteout %s: %w", join(rel, n), err)
			}
		}
	}
	for _, n := range names {
		if rel == "" && n == layout.StoreDir {
			continue
		}
		p := join(rel, n)
		vst, err := vd.Lstat(n)
		if err != nil {
			return made, err
		}
		var b *unix.Stat_t
		if bd != nil {
			if st, err := bd.Lstat(n); err == nil {
				b = &st
			} else if !errors.Is(err, unix.ENOENT) {
				return made, err
			}
		}
		if vst.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Base's directory of that name, even one this replaced: what
			// the view lacks of it is gone either way, and an entry of the
			// same inode and stat is the same content at the same path.
			var sub *unix.Stat_t
			if b != nil && b.Mode&unix.S_IFMT == unix.S_IFDIR {
				sub = b
			}
			subMade, err := w.dir(p, sub, mk, b == nil || !same(&vst, b))
			if err != nil {
				return made, err
			}
			if subMade {
				if err := w.meta(w.upper, p, p, &vst); err != nil {
					return made, err
				}
			}
			continue
		}
		if b != nil && same(&vst, b) {
			if vst.Ctim.Sec < w.taken || vst.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			eq, err := sameContent(vd, bd, n)
			if err != nil {
				return made, err
			}
			if eq {
				continue
			}
		}
		if err := mk(); err != nil {
			return made, err
		}
		if err := w.copy(vd, n, p, &vst); err != nil {
			return made, err
		}
	}
	return made, nil
}

func (w *writer) upperPath(rel string) string { return w.upper.Name() + "/" + rel }

// copy copies the entry name of vd (at p, stat vst) into the layer whole;
// a further name of a file already copied is linked to it.
func (w *writer) copy(vd *fsutil.Dir, name, p string, vst *unix.Stat_t) error {
	fd := w.upper.Fd()
	if vst.Nlink > 1 && vst.Mode&unix.S_IFMT != unix.S_IFDIR {
		if first, ok := w.links[vst.Ino]; ok {
			fsutil.Mutating()
			if err := unix.Linkat(fd, first, fd, p, 0); err != nil {
				return fmt.Errorf("layer: link %s: %w", p, err)
			}
			return nil
		}
		w.links[vst.Ino] = p
	}
	switch vst.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		src, err := vd.Open(name, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer src.Close() // read-only
		dst, err := w.upper.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if err := fsutil.CopyFile(dst, src); err != nil {
			dst.Close()
			return fmt.Errorf("layer: copy %s: %w", p, err)
		}
		if err := dst.Close(); err != nil {
			return fmt.Errorf("layer: %w", err)
		}
	case unix.S_IFLNK:
		target, err := vd.Readlink(name)
		if err != nil {
			return err
		}
		fsutil.Mutating()
		if err := unix.Symlinkat(target, fd, p); err != nil {
			return fmt.Errorf("layer: symlink %s: %w", p, err)
		}
	default: // fifo, socket, device
		fsutil.Mutating()
		if err := unix.Mknodat(fd, p, vst.Mode&unix.S_IFMT|0o600, int(vst.Rdev)); err != nil {
			return fmt.Errorf("layer: mknod %s: %w", p, err)
		}
	}
	if xs, err := vd.Xattrs(name); err != nil {
		return err
	} else if len(xs) > 0 && vst.Mode&unix.S_IFMT == unix.S_IFREG {
		f, err := w.upper.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		err = fsutil.SetXattrs(int(f.Fd()), p, xs)
		f.Close()
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
	}
	return w.meta(w.upper, p, p, vst)
}

// meta gives the entry rel of d (p for messages) vst's owner, mode and
// times: owner first, since a chown clears set-ID bits.
func (w *writer) meta(d *fsutil.Dir, rel, p string, vst *unix.Stat_t) error {
	fsutil.Mutating()
	if err := unix.Fchownat(d.Fd(), rel, int(vst.Uid), int(vst.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("layer: chown %s: %w", p, err)
	}
	if vst.Mode&unix.S_IFMT != unix.S_IFLNK {
		fsutil.Mutating()
		if err := unix.Fchmodat(d.Fd(), rel, vst.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("layer: chmod %s: %w", p, err)
		}
	}
	fsutil.Mutating()
	ts := []unix.Timespec{vst.Atim, vst.Mtim}
	if err := unix.UtimesNanoAt(d.Fd(), rel, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("layer: times of %s: %w", p, err)
	}
	return nil
}

// sameContent reports whether the files name of x and y hold the same
// bytes.
func sameContent(x, y *fsutil.Dir, name string) (bool, error) {
	f, err := x.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer f.Close() // read-only
	g, err := y.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer g.Close() // read-only
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, errA := io.ReadFull(f, a)
		m, errB := io.ReadFull(g, b)
		if n != m || !bytes.Equal(a[:n], b[:m]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == io.EOF || errB == io.ErrUnexpectedEOF, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}
