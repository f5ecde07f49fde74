//go:build linux

package fuse

import (
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// at names an entry of a layer for the *at system calls: a directory
// descriptor and a path relative to it. The server never builds absolute
// path strings: a path of the view up to PATH_MAX long (what the user's
// own relative calls reach) would pass PATH_MAX once the layer's
// directory is put in front of it, and fail with ENAMETOOLONG.
type at struct {
	dir  int    // the layer's root, or a directory found by walking to it
	name string // relative to dir; "." for dir itself
	own  bool   // dir was opened for this at: close releases it
}

// maxAt is the longest name an at holds: short enough that proc's
// "/proc/self/fd/N/" prefix still fits in PATH_MAX.
const maxAt = unix.PathMax - 64

// resolve names rel (slash-separated, relative to the directory root)
// for the *at calls. A path longer than maxAt is walked: its leading
// directories are opened (O_PATH) in pieces the kernel accepts. Close
// the result.
func resolve(root int, rel string) (at, error) {
	if rel == "" {
		return at{dir: root, name: "."}, nil
	}
	dir, own := root, false
	for len(rel) > maxAt {
		i := strings.LastIndexByte(rel[:maxAt], '/')
		if i <= 0 {
			if own {
				unix.Close(dir)
			}
			return at{}, syscall.ENAMETOOLONG
		}
		fd, err := unix.Openat(dir, rel[:i], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if own {
			unix.Close(dir) // only a walked-to directory: the root stays
		}
		if err != nil {
			return at{}, err
		}
		dir, own, rel = fd, true, rel[i+1:]
	}
	return at{dir: dir, name: rel, own: own}, nil
}

// close releases a walked-to directory.
func (a at) close() {
	if a.own {
		unix.Close(a.dir) // O_PATH: nothing to flush
	}
}

// proc is a path for the calls with no *at form (xattrs, and package
// layer's writers): through the directory descriptor's /proc link, always
// shorter than PATH_MAX.
func (a at) proc() string {
	return "/proc/self/fd/" + strconv.Itoa(a.dir) + "/" + a.name
}

// lstat is fstatat(AT_SYMLINK_NOFOLLOW) into a syscall.Stat_t, the type
// go-fuse takes (the same kernel struct as unix.Stat_t).
func (a at) lstat(st *syscall.Stat_t) error {
	return unix.Fstatat(a.dir, a.name, (*unix.Stat_t)(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW)
}

// exists reports whether the layer has an entry at a.
func (a at) exists() bool {
	var st syscall.Stat_t
	return a.lstat(&st) == nil
}
