package dockerapi

import (
	"encoding/binary"
	"fmt"
	"io"
)

// StdCopy demultiplexes an attached container's output (without a
// terminal): frames of an 8-byte header, the stream (1 stdout, 2 stderr;
// 0, stdin echoed, goes to stdout, and 3 is the daemon's own error), three
// zero bytes and the payload's length in big-endian, then the payload. It
// copies each payload to stdout or stderr until src ends, returning the
// bytes written. A frame cut short is io.ErrUnexpectedEOF (the SDK's
// stdcopy ignored it, which would pass a truncated archive as whole); a
// header naming no stream is an error.
func StdCopy(stdout, stderr io.Writer, src io.Reader) (int64, error) {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	var written int64
	for {
		if _, err := io.ReadFull(src, hdr[:]); err == io.EOF {
			return written, nil
		} else if err != nil {
			return written, err
		}
		if hdr[1] != 0 || hdr[2] != 0 || hdr[3] != 0 {
			return written, fmt.Errorf("bad frame header % x in the container's output stream", hdr)
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		var w io.Writer
		switch hdr[0] {
		case 0, 1:
			w = stdout
		case 2:
			w = stderr
		case 3:
			msg, err := io.ReadAll(io.LimitReader(src, min(size, 64<<10)))
			if err != nil {
				return written, err
			}
			return written, fmt.Errorf("error from the daemon in the stream: %s", msg)
		default:
			return written, fmt.Errorf("bad frame header % x in the container's output stream", hdr)
		}
		n, err := io.CopyBuffer(w, io.LimitReader(src, size), buf)
		written += n
		if err != nil {
			return written, err
		}
		if n < size {
			return written, fmt.Errorf("frame of %d bytes ends after %d: %w", size, n, io.ErrUnexpectedEOF)
		}
	}
}
