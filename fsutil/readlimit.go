package fsutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
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
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
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
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	tooLarge := &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w of %s", ErrTooLarge, sizeName(max))}
	if st.Size() > max {
		return nil, tooLarge
	}
	// The size said fits; read one byte past the bound all the same, in
	// case the file grew since.
	var buf bytes.Buffer
	buf.Grow(int(st.Size()) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(buf.Len()) > max {
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

func notRegular(path string, m fs.FileMode) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, typeName(m))}
}

// typeName says what kind of non-regular file a mode is, for an error.
func typeName(m fs.FileMode) string {
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
