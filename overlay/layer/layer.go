// Package layer is the one reader and writer of the upper-layer format of
// Linux overlayfs. Every overlay mode of `snapback run` leaves its upper
// layer in it (the kernel's overlayfs, and the fuse mode's server, which
// writes it through this package); the changeset reader of the snapshot
// package reads it through this package. Nothing else knows the format:
//
//   - a character device 0/0 is a whiteout: the path was deleted; so is
//     an empty regular file with the xattr user.overlay.whiteout or
//     trusted.overlay.whiteout (overlayfs's "xwhiteout" form, which the
//     fuse server writes when it cannot make device nodes);
//   - a directory whose xattr user.overlay.opaque or
//     trusted.overlay.opaque is "y" replaced the directory below it:
//     nothing of the lower directory shows through;
//   - a directory with the xattr user.overlay.redirect (or trusted.…) was
//     renamed: its contents are the lower directory the redirect names
//     (relative to the parent's own lower directory, or absolute from the
//     root when it starts with "/"), under what the layer itself holds;
//   - every other xattr in the user.overlay. and trusted.overlay.
//     namespaces (origin, impure, …) is overlayfs's bookkeeping: a mark,
//     never part of a file's own state;
//   - anything else is the whole new state of its path (a copied-up file
//     holds all of its content, not a delta).
//
// Paths here are slash-separated and relative to the root, "" being the
// root itself.
package layer

import (
	"strings"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// The two namespaces of overlayfs's marks: trusted.* is the kernel's
// default (root only), user.* its "userxattr" form (an unprivileged mount,
// and the fuse server, whose marks the changeset reader reads without
// privileges).
const (
	trustedNS = "trusted.overlay."
	userNS    = "user.overlay."
)

// The marks this package reads and writes, without their namespace.
const (
	markWhiteout = "whiteout"
	markOpaque   = "opaque"
	markRedirect = "redirect"
)

// IsMark reports whether an xattr is one of overlayfs's marks: never part
// of a file's own state, never shown in a view, never copied.
func IsMark(name string) bool {
	return strings.HasPrefix(name, trustedNS) || strings.HasPrefix(name, userNS)
}

// Getter reads one xattr of an entry of the layer; ok is false when the
// entry has none of that name (or it cannot be read: an unreadable mark
// counts as no mark).
type Getter func(name string) (value []byte, ok bool)

// PathGetter reads the xattrs of the entry at path p, not following a
// symbolic link.
func PathGetter(p string) Getter {
	return func(name string) ([]byte, bool) {
		buf := make([]byte, 4096) // a redirect is a path: PATH_MAX at most
		n, err := unix.Lgetxattr(p, name, buf)
		if err != nil {
			return nil, false
		}
		return buf[:n], true
	}
}

// ListGetter reads from xattrs already listed.
func ListGetter(xs []fsutil.Xattr) Getter {
	return func(name string) ([]byte, bool) {
		for _, x := range xs {
			if x.Name == name {
				return x.Value, true
			}
		}
		return nil, false
	}
}

// mark reads a mark in either namespace (trusted first, as overlayfs
// without userxattr does).
func mark(get Getter, m string) ([]byte, bool) {
	if v, ok := get(trustedNS + m); ok {
		return v, true
	}
	return get(userNS + m)
}

// MayBeWhiteout reports whether an entry of type typ (mode & S_IFMT, or
// a directory listing's type) can be a whiteout: only character devices
// and regular files can.
func MayBeWhiteout(typ uint32) bool {
	return typ == unix.S_IFCHR || typ == unix.S_IFREG
}

// IsWhiteout reports whether an entry of the layer, with the stat fields
// mode, rdev and size, is a whiteout. get is called only for an empty
// regular file, the one shape an xwhiteout has.
func IsWhiteout(mode uint32, rdev uint64, size int64, get Getter) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return rdev == 0
	case unix.S_IFREG:
		if size != 0 || get == nil {
			return false
		}
		_, ok := mark(get, markWhiteout)
		return ok
	}
	return false
}

// IsOpaque reports whether a directory of the layer is opaque.
func IsOpaque(get Getter) bool {
	v, ok := mark(get, markOpaque)
	return ok && string(v) == "y" // "x" (a directory holding xwhiteouts) is not opaque
}

// Redirect returns a directory's redirect as stored, and whether it has
// one (an empty value is none).
func Redirect(get Getter) (string, bool) {
	v, ok := mark(get, markRedirect)
	if !ok || len(v) == 0 {
		return "", false
	}
	return string(v), true
}

// Origin is the lower path a redirect names, for a directory whose parent
// shows the lower directory parentLower.
func Origin(redirect, parentLower string) string {
	if strings.HasPrefix(redirect, "/") {
		return strings.Trim(redirect, "/")
	}
	if parentLower == "" {
		return redirect
	}
	return parentLower + "/" + redirect
}

// MakeWhiteout makes a whiteout at p, which must not exist: a character
// device 0/0 when device is set (it takes CAP_MKNOD), else an xwhiteout
// readable by its owner (user.* xattrs are read only where the file can
// be, and the changeset reader runs without capabilities).
func MakeWhiteout(p string, device bool) error {
	if device {
		return unix.Mknod(p, unix.S_IFCHR, 0)
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd) // nothing written: nothing to lose
	if err := unix.Lsetxattr(p, userNS+markWhiteout, []byte("y"), 0); err != nil {
		unix.Unlink(p) // best effort: the caller reports err
		return err
	}
	return nil
}

// SetOpaque makes the directory at p opaque.
func SetOpaque(p string) error {
	return unix.Lsetxattr(p, userNS+markOpaque, []byte("y"), 0)
}

// SetRedirect makes the directory at p show the lower directory lower
// (from the root), as overlayfs with redirect_dir records a rename.
func SetRedirect(p, lower string) error {
	return unix.Lsetxattr(p, userNS+markRedirect, []byte("/"+lower), 0)
}

// dirMarks are the marks overlayfs leaves on directories.
var dirMarks = []string{markOpaque, markRedirect, "origin", "impure"}

// ClearDirMarks removes overlayfs's directory marks from the directory
// open as fd, once it leaves the layer for the real tree.
func ClearDirMarks(fd int) {
	for _, m := range dirMarks {
		fsutil.Mutating()
		_ = unix.Fremovexattr(fd, trustedNS+m) // absent on most directories
		fsutil.Mutating()
		_ = unix.Fremovexattr(fd, userNS+m)
	}
}
