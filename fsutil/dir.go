package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrEscape is returned when a path would leave its root: an absolute path,
// a ".." component, or a component that is a symlink (or not a directory).
var ErrEscape = errors.New("path escapes the root or crosses a symlink")

// Dir is an open directory. Its methods act on names directly inside it and
// never follow a symlink in the final component; [Dir.OpenDir] walks a
// relative path one component at a time with O_NOFOLLOW. Together they make
// every operation stay beneath the directory it started from, even while
// other processes rename things around it.
//
// A Dir is safe for concurrent use; Close it once.
type Dir struct {
	fd   int
	name string // for error messages only
}

// OpenRoot opens path as a root. Symlinks in path itself are followed (the
// user named it); nothing below it ever is.
func OpenRoot(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, name: path}, nil
}

// Name is the path the directory was opened as (for messages).
func (d *Dir) Name() string { return d.name }

// Fd is the directory's file descriptor, valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

func (d *Dir) join(name string) string {
	if d.name == "" {
		return name
	}
	return d.name + "/" + name
}

func (d *Dir) err(op, name string, err error) error {
	return &os.PathError{Op: op, Path: d.join(name), Err: err}
}

// ValidName reports whether name is a single path component.
func ValidName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

// OpenDir opens the directory at rel (slash-separated, relative, "" or "."
// meaning d itself) without following any symlink on the way.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	fd, err := unix.Dup(d.fd)
	if err != nil {
		return nil, d.err("dup", rel, err)
	}
	unix.CloseOnExec(fd)
	name := d.name
	if rel != "" && rel != "." {
		for _, c := range strings.Split(rel, "/") {
			if !ValidName(c) {
				unix.Close(fd)
				return nil, d.err("open", rel, ErrEscape)
			}
			nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				if err == unix.ELOOP || err == unix.ENOTDIR {
					err = fmt.Errorf("%w (%s)", ErrEscape, err)
				}
				return nil, d.err("open", rel, err)
			}
			fd = nfd
		}
		name = d.join(rel)
	}
	return &Dir{fd: fd, name: name}, nil
}

// Lstat stats name without following it.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return st, d.err("lstat", name, err)
	}
	return st, nil
}

// Open opens name with O_NOFOLLOW added to flags.
func (d *Dir) Open(name string, flags int, perm uint32) (*os.File, error) {
	if flags&(unix.O_CREAT|unix.O_TRUNC) != 0 {
		Mutating()
	}
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, d.err("open", name, err)
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// ReadDirNames lists the names in d (without "." and "..").
func (d *Dir) ReadDirNames() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.err("open", ".", err)
	}
	f := os.NewFile(uintptr(fd), d.name)
	defer f.Close() // read-only
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, d.err("readdir", ".", err)
	}
	return names, nil
}

// Rename renames oldname in d to newname in to, replacing newname.
func (d *Dir) Rename(oldname string, to *Dir, newname string) error {
	Mutating()
	if err := unix.Renameat(d.fd, oldname, to.fd, newname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(oldname), New: to.join(newname), Err: err}
	}
	return nil
}

// RenameNoReplace renames oldname in d to newname in to, failing with
// EEXIST when newname exists (never replacing it).
func (d *Dir) RenameNoReplace(oldname string, to *Dir, newname string) error {
	Mutating()
	if err := renameNoReplace(d, oldname, to, newname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(oldname), New: to.join(newname), Err: err}
	}
	return nil
}

// RenamePathNoReplace renames oldpath to newpath, failing with an error
// that is EEXIST when newpath exists (never replacing it). It goes by
// path: for a directory the caller made and holds (a store being born).
func RenamePathNoReplace(oldpath, newpath string) error {
	Mutating()
	if err := renamePathNoReplace(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// Link makes newname in to a hard link to oldname in d (never following).
func (d *Dir) Link(oldname string, to *Dir, newname string) error {
	Mutating()
	if err := unix.Linkat(d.fd, oldname, to.fd, newname, 0); err != nil {
		return &os.LinkError{Op: "link", Old: d.join(oldname), New: to.join(newname), Err: err}
	}
	return nil
}

// Unlink removes a non-directory.
func (d *Dir) Unlink(name string) error {
	Mutating()
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return d.err("unlink", name, err)
	}
	return nil
}

// Rmdir removes an empty directory.
func (d *Dir) Rmdir(name string) error {
	Mutating()
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return d.err("rmdir", name, err)
	}
	return nil
}

// RemoveAll removes name and, if it is a directory, everything below it,
// never following a symlink. A missing name is not an error.
func (d *Dir) RemoveAll(name string) error {
	st, err := d.Lstat(name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err := d.Unlink(name)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	sub, err := d.OpenDir(name)
	if err != nil {
		return err
	}
	names, err := sub.ReadDirNames()
	if err == nil {
		for _, n := range names {
			if err = sub.RemoveAll(n); err != nil {
				break
			}
		}
	}
	sub.Close()
	if err != nil {
		return err
	}
	err = d.Rmdir(name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// Mkdir creates a directory.
func (d *Dir) Mkdir(name string, perm uint32) error {
	Mutating()
	if err := unix.Mkdirat(d.fd, name, perm); err != nil {
		return d.err("mkdir", name, err)
	}
	return nil
}

// Symlink creates name as a symlink to target.
func (d *Dir) Symlink(target, name string) error {
	Mutating()
	if err := unix.Symlinkat(target, d.fd, name); err != nil {
		return d.err("symlink", name, err)
	}
	return nil
}

// Readlink reads the target of the symlink name.
func (d *Dir) Readlink(name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", d.err("readlink", name, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, len(buf)*4)
	}
}

// Mkfifo creates a named pipe.
func (d *Dir) Mkfifo(name string, perm uint32) error {
	Mutating()
	if err := mkfifoat(d, name, perm); err != nil {
		return d.err("mkfifo", name, err)
	}
	return nil
}

// SetTimes sets the modification (and access) time of name, not following
// a symlink.
func (d *Dir) SetTimes(name string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	Mutating()
	if err := unix.UtimesNanoAt(d.fd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return d.err("utimes", name, err)
	}
	return nil
}

// Lchown changes the owner of name, not following a symlink.
func (d *Dir) Lchown(name string, uid, gid int) error {
	Mutating()
	if err := unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return d.err("chown", name, err)
	}
	return nil
}

// Chmod changes the permission bits of name, which must not be a symlink.
// It opens the entry with O_NOFOLLOW and changes the open file, so a
// symlink swapped in meanwhile is never followed.
func (d *Dir) Chmod(name string, mode uint32) error {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		Mutating()
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
	} else if err == unix.EACCES {
		// Unreadable (mode 0000 and not root): the entry was checked not to
		// be a symlink by the caller; fchmodat on a symlink would follow it,
		// so check again right before.
		var st unix.Stat_t
		if err = unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = syscall.ELOOP
			} else {
				Mutating()
				err = unix.Fchmodat(d.fd, name, mode, 0)
			}
		}
	}
	if err != nil {
		return d.err("chmod", name, err)
	}
	return nil
}

// Sync fsyncs the directory itself.
func (d *Dir) Sync() error {
	Mutating()
	if err := unix.Fsync(d.fd); err != nil {
		return d.err("fsync", ".", err)
	}
	return nil
}

// RemoveAll removes path and everything below it, never following a
// symlink, one system call at a time (so each is a kill point of the
// crash tests). A missing path is not an error.
func RemoveAll(path string) error {
	parent, err := OpenRoot(filepath.Dir(path))
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.RemoveAll(filepath.Base(path))
}

// Walk calls fn for every entry below d, parents before their children,
// with the directory holding it, its name there, its path relative to d
// and its stat; fn returns whether to enter a directory. It works from
// directory descriptors, so no path is too long for it (an absolute
// path string, as filepath.WalkDir builds, passes PATH_MAX where the
// tree's own relative paths do not). An entry removed meanwhile is
// skipped.
func (d *Dir) Walk(fn func(d *Dir, name, rel string, st *unix.Stat_t) (enter bool, err error)) error {
	return d.walk("", fn)
}

func (d *Dir) walk(prefix string, fn func(d *Dir, name, rel string, st *unix.Stat_t) (bool, error)) error {
	names, err := d.ReadDirNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		st, err := d.Lstat(name)
		if errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return err
		}
		enter, err := fn(d, name, prefix+name, &st)
		if err != nil {
			return err
		}
		if !enter || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := d.OpenDir(name)
		if errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return err
		}
		err = sub.walk(prefix+name+"/", fn)
		sub.Close() // read-only
		if err != nil {
			return err
		}
	}
	return nil
}
