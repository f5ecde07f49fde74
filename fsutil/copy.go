package fsutil

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

const copyBuf = 1 << 20

var (
	// zeros is read only, for holes. An array, not a slice made at
	// init: no MiB on the heap of every process (the first collection
	// would come at start-up, before a verb's work), and its pages are
	// mapped only once read.
	zeros [copyBuf]byte
	// bufs recycles copy buffers: a fresh MiB per file would cost more
	// (zeroing it) than copying a small file.
	bufs = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}
)

// CopyHash copies all of src into dst (an empty file) and returns the
// SHA-256 of the bytes dst now holds and their count. It clones (FICLONE)
// where the filesystem allows it and otherwise copies data regions only, so
// a sparse file stays sparse. The hash is of what was written, so a source
// changing during the copy can never make the hash lie about dst.
func CopyHash(dst, src *os.File) (sum [32]byte, size int64, err error) {
	if cloneFile(dst, src) == nil {
		return HashFile(dst)
	}
	h := sha256.New()
	size, err = sparseCopy(dst, src, h)
	if err != nil {
		return sum, 0, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, size, nil
}

// HashFile returns the SHA-256 and length of f's content, reading only its
// data regions (holes hash as the zeros they read as).
func HashFile(f *os.File) (sum [32]byte, size int64, err error) {
	h := sha256.New()
	size, err = sparseCopy(nil, f, h)
	if err != nil {
		return sum, 0, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, size, nil
}

// sparseCopy walks src's data regions with SEEK_DATA/SEEK_HOLE, writing them
// to dst (when not nil) at the same offsets and feeding h every byte,
// zeros for holes. It reads until EOF rather than trusting a stat size.
func sparseCopy(dst, src *os.File, h hash.Hash) (int64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	fd := int(src.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", src.Name(), err)
	}
	end := st.Size
	dstEnd := int64(0) // dst's size before the copy
	if dst != nil {
		var dt unix.Stat_t
		if err := unix.Fstat(int(dst.Fd()), &dt); err != nil {
			return 0, fmt.Errorf("stat %s: %w", dst.Name(), err)
		}
		dstEnd = dt.Size
	}
	var off int64
	for {
		data := off
		if off < end {
			d, err := unix.Seek(fd, off, unix.SEEK_DATA)
			switch {
			case err == nil:
				data = d
			case errors.Is(err, unix.ENXIO): // no data after off: the rest is a hole
				data = end
			default: // filesystem without SEEK_DATA: treat everything as data
				data = off
			}
		}
		if data > off { // a hole
			if err := hashZeros(h, data-off); err != nil {
				return 0, err
			}
			off = data
		}
		// Copy until EOF or the next hole.
		hole := int64(-1)
		if off < end {
			if hs, err := unix.Seek(fd, off, unix.SEEK_HOLE); err == nil {
				hole = hs
			}
		}
		n, err := copyRange(dst, src, h, buf, off, hole, dstEnd)
		off += n
		if err != nil {
			return 0, err
		}
		if hole < 0 || off < hole {
			break // EOF (the file may have grown or shrunk since the stat)
		}
	}
	if dst != nil {
		Mutating()
		if err := dst.Truncate(off); err != nil {
			return 0, fmt.Errorf("truncate %s: %w", dst.Name(), err)
		}
	}
	return off, nil
}

// copyRange copies [off, limit) (limit < 0: to EOF) and returns the bytes
// copied; it stops early at EOF.
func copyRange(dst, src *os.File, h hash.Hash, buf []byte, off, limit, dstEnd int64) (int64, error) {
	var n int64
	for limit < 0 || off+n < limit {
		want := int64(len(buf))
		if limit >= 0 && limit-(off+n) < want {
			want = limit - (off + n)
		}
		r, err := src.ReadAt(buf[:want], off+n)
		if r > 0 {
			h.Write(buf[:r])
			// Past dst's old end, a block of zeros is left a hole (the
			// final truncate makes it read as zeros): where SEEK_DATA is
			// missing (zfs-fuse), a sparse file stays sparse.
			if dst != nil && !(off+n >= dstEnd && allZero(buf[:r])) {
				Mutating()
				if _, werr := dst.WriteAt(buf[:r], off+n); werr != nil {
					return n, fmt.Errorf("write %s: %w", dst.Name(), werr)
				}
			}
			n += int64(r)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", src.Name(), err)
		}
	}
	return n, nil
}

func hashZeros(h hash.Hash, n int64) error {
	for n > 0 {
		c := int64(len(zeros))
		if n < c {
			c = n
		}
		h.Write(zeros[:c])
		n -= c
	}
	return nil
}

// Clone makes dst (empty) share src's blocks, where the filesystem can
// (btrfs, xfs, APFS); elsewhere it fails and the caller copies.
func Clone(dst, src *os.File) error { return cloneFile(dst, src) }

// CopyFile copies src to dst like CopyHash, for callers that do not need
// the hash (restores from the store, whose objects are already verified
// by name).
func CopyFile(dst, src *os.File) error {
	if cloneFile(dst, src) == nil {
		return nil
	}
	_, err := sparseCopy(dst, src, discardHash{})
	return err
}

// discardHash is a hash.Hash that does nothing: the cheap path of CopyFile.
type discardHash struct{}

func (discardHash) Write(p []byte) (int, error) { return len(p), nil }
func (discardHash) Sum(b []byte) []byte         { return b }
func (discardHash) Reset()                      {}
func (discardHash) Size() int                   { return 0 }
func (discardHash) BlockSize() int              { return 1 }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
