package fsutil

import (
	"bytes"
	"errors"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

func noXattrs(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// Xattrs lists name's extended attributes, sorted by name, without
// following a symlink. A filesystem without xattrs yields none.
func (d *Dir) Xattrs(name string) ([]Xattr, error) {
	p := d.xattrPath(name)
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if err != nil && !noXattrs(err) {
			return nil, d.err("listxattr", name, err)
		}
		return nil, nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		if noXattrs(err) || errors.Is(err, unix.ERANGE) {
			return nil, nil // changed under us; the next snapshot sees it
		}
		return nil, d.err("listxattr", name, err)
	}
	var out []Xattr
	for _, n := range bytes.Split(buf[:size], []byte{0}) {
		if len(n) == 0 {
			continue
		}
		an := string(n)
		vs, err := unix.Lgetxattr(p, an, nil)
		if err != nil {
			continue // removed meanwhile, or not readable by us: skip it
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, an, v)
		if err != nil {
			continue
		}
		out = append(out, Xattr{Name: an, Value: v[:vs]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetXattrs makes the open file fd carry exactly xs: attributes not in xs
// are removed. Attributes outside the user namespace are set where the
// kernel lets us (root) and otherwise left alone.
func SetXattrs(fd int, name string, xs []Xattr) error {
	want := map[string]bool{}
	for _, x := range xs {
		want[x.Name] = true
		Mutating()
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil {
			if !strings.HasPrefix(x.Name, "user.") && noXattrs(err) {
				continue // security.* / trusted.* need privileges we may not have
			}
			return &xattrError{name, x.Name, err}
		}
	}
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		return nil // nothing to remove (or no xattr support at all)
	}
	buf := make([]byte, size)
	size, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil // changed under us: what we set is in place
	}
	for _, n := range bytes.Split(buf[:size], []byte{0}) {
		if len(n) == 0 || want[string(n)] {
			continue
		}
		Mutating()
		if err := unix.Fremovexattr(fd, string(n)); err != nil && !noXattrs(err) && !strings.HasPrefix(string(n), "security.") {
			return &xattrError{name, string(n), err}
		}
	}
	return nil
}

type xattrError struct {
	path, attr string
	err        error
}

func (e *xattrError) Error() string {
	return "xattr " + e.attr + " on " + e.path + ": " + e.err.Error()
}
func (e *xattrError) Unwrap() error { return e.err }
