package fsutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errors of [ReadFileLimit] and [ReadFileLimitFollow], under an
// *fs.PathError naming the file.
var (
	// ErrNotRegular: the path is a FIFO, a device, a directory, a socket
	// or (for ReadFileLimit) a symbolic link.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the caller's bound.
	ErrTooLarge = errors.New("over the size limit")
)

// ReadFileLimit reads a small file snapback keeps (a store record, a
// journal) and refuses anything else before it can hurt: a symbolic link
// (never followed), a FIFO or device (opened non-blocking, so a FIFO with
// no writer cannot hang the caller, then refused without a read, so
// /dev/zero cannot exhaust memory), or a file over max bytes (read no
// further than max+1, so a file that grows meanwhile is caught too).
func ReadFileLimit(path string, max int64) ([]byte, error) {
	return readFileLimit(path, max, syscall.O_NOFOLLOW)
}

// ReadFileLimitFollow is [ReadFileLimit] for a file a user may keep
// elsewhere and link to, such as snapback.toml: symbolic links are
// followed, and what they lead to must be a regular file.
func ReadFileLimitFollow(path string, max int64) ([]byte, error) {
	return readFileLimit(path, max, 0)
}

func readFileLimit(path string, max int64, flags int) ([]byte, error) {
	// O_NONBLOCK makes opening a FIFO or a device that waits (a serial
	// line, say) return at once; a regular file's reads ignore it. Go
	// adds O_CLOEXEC itself.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|flags, 0)
	if err != nil {
		// Some kinds fail to open at all (a symbolic link under
		// O_NOFOLLOW: ELOOP; a socket: ENXIO): say what the path is
		// rather than the errno.
		stat := os.Stat
		if flags&syscall.O_NOFOLLOW != 0 {
			stat = os.Lstat
		}
		if st, serr := stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, notRegular(path, st.Mode())
		}
		return nil, err // already an *fs.PathError naming the path
	}
	defer f.Close() // read-only: nothing to flush
	return readOpened(f, path, max, nil)
}

// ReadFileLimit is [ReadFileLimit] for the file at rel below d (a
// slash-separated relative path): no component is followed if it is a
// symbolic link, so the read never leaves d. When check is set, it hears
// the open file's stat before anything is read and may refuse it (an
// owner the caller does not trust, say); its error is returned under an
// *fs.PathError naming the file.
func (d *Dir) ReadFileLimit(rel string, max int64, check func(st *unix.Stat_t) error) ([]byte, error) {
	dir, name := ".", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	sub, err := d.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer sub.Close() // read-only
	path := sub.join(name)
	if !ValidName(name) {
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrEscape}
	}
	f, err := sub.Open(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if st, serr := sub.Lstat(name); serr == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, notRegular(path, modeOf(uint32(st.Mode)))
		}
		return nil, err
	}
	defer f.Close() // read-only
	return readOpened(f, path, max, check)
}

// readOpened reads the open file f, refusing anything but a regular file
// of at most max bytes (and what check refuses).
func readOpened(f *os.File, path string, max int64, check func(st *unix.Stat_t) error) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular(path, modeOf(uint32(st.Mode)))
	}
	if check != nil {
		if err := check(&st); err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
	}
	tooLarge := &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w of %s", ErrTooLarge, sizeName(max))}
	if st.Size > max {
		return nil, tooLarge
	}
	// The size said fits; read one byte past the bound all the same, in
	// case the file grew since. Sized from the stat: growing from 512
	// bytes would copy a 10 MB manifest many times over.
	var buf bytes.Buffer
	buf.Grow(int(st.Size) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(buf.Len()) > max {
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

// modeOf turns a stat's type bits into an fs.FileMode's.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

func notRegular(path string, m fs.FileMode) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, TypeName(m))}
}

// TypeName says what kind of non-regular file a mode is, for an error:
// "a directory", "a named pipe", "a symbolic link, not followed".
func TypeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link, not followed"
	}
	return "type " + m.Type().String()
}

// sizeName writes a bound the way a user would: 1 MiB, 64 KiB, 100 bytes.
func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
