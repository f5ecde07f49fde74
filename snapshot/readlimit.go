package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Bounds on what is read from the store into memory: a damaged or hostile
// file (1 GiB of junk, a symlink to /dev/zero, a FIFO that never ends)
// must yield an error, never a hang or an allocation without limit.
const (
	maxRecordSize   = 16 << 20  // a snapshot record: its command line is the big part
	maxRunSize      = 256 << 20 // a pending run's record: it lists committed paths
	maxPayloadSize  = 1 << 20   // a target payload's settings (target.json)
	maxManifestSize = 1 << 30   // a manifest: about ten million entries
	maxIndexSize    = 1 << 30   // the stat cache: one entry per file, as a manifest
)

// errNotRegular: a store file is a symlink, a FIFO, a device or a directory.
var errNotRegular = errors.New("not a regular file")

// readLimited reads a regular file of at most max bytes. It refuses
// anything else without reading it: a symlink is not followed, and a FIFO
// is opened without blocking. Errors do not repeat the path: callers name
// the file in their own terms. (fsutil is getting an equivalent,
// ReadFileLimit, on another branch.)
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w (a symlink)", errNotRegular)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, pe.Err // (still matches fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", errNotRegular, st.Mode().Type())
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", errTooLarge, st.Size(), max)
	}
	// Sized from the stat: io.ReadAll would grow its buffer from 512
	// bytes, copying a 10 MB stat cache or manifest many times over.
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > max { // it grew while we read
		return nil, fmt.Errorf("%w: over the limit of %d bytes", errTooLarge, max)
	}
	return b, nil
}

// errTooLarge: a store file is larger than anything snapback writes there.
var errTooLarge = errors.New("too large")
