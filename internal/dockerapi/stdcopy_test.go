package dockerapi

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func frame(stream byte, payload []byte) []byte {
	hdr := make([]byte, 8, 8+len(payload))
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	return append(hdr, payload...)
}

// TestStdCopy: frames go to their stream however the reads split them
// (a byte at a time, and halves: headers and payloads cut across reads);
// a bad header, a frame or header cut short, and the daemon's own error
// frame are errors.
func TestStdCopy(t *testing.T) {
	big := make([]byte, 200<<10)
	_, _ = rand.Read(big)
	var stream []byte
	stream = append(stream, frame(1, []byte("hello "))...)
	stream = append(stream, frame(2, []byte("oops\n"))...)
	stream = append(stream, frame(1, big)...)
	stream = append(stream, frame(1, nil)...)
	stream = append(stream, frame(2, []byte("again\n"))...)
	wantOut := append([]byte("hello "), big...)
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	}
	for name, wrap := range readers {
		var out, errb bytes.Buffer
		n, err := StdCopy(&out, &errb, wrap(bytes.NewReader(stream)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(out.Bytes(), wantOut) || errb.String() != "oops\nagain\n" || n != int64(len(wantOut)+len("oops\nagain\n")) {
			t.Errorf("%s: %d bytes out, stderr %q, written %d", name, out.Len(), errb.String(), n)
		}
	}

	bad := map[string][]byte{
		"unknown stream":   append(frame(7, []byte("x")), frame(1, []byte("y"))...),
		"padding not zero": {1, 0, 1, 0, 0, 0, 0, 1, 'x'},
	}
	for name, b := range bad {
		var out bytes.Buffer
		if _, err := StdCopy(&out, io.Discard, iotest.OneByteReader(bytes.NewReader(b))); err == nil || !strings.Contains(err.Error(), "bad frame header") {
			t.Errorf("%s: %v", name, err)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %q", name, out.String())
		}
	}
	for name, b := range map[string][]byte{"frame": frame(1, big)[:1000], "header": frame(1, big)[:5]} {
		if _, err := StdCopy(io.Discard, io.Discard, iotest.HalfReader(bytes.NewReader(b))); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s cut short: %v", name, err)
		}
	}
	if _, err := StdCopy(io.Discard, io.Discard, bytes.NewReader(frame(3, []byte("the daemon failed")))); err == nil || !strings.Contains(err.Error(), "the daemon failed") {
		t.Errorf("the daemon's error frame: %v", err)
	}
	if n, err := StdCopy(io.Discard, io.Discard, bytes.NewReader(nil)); n != 0 || err != nil {
		t.Errorf("empty stream: %d %v", n, err)
	}
}

// TestReadProgress: an error reported in an import's progress stream is
// returned. A stream literal stands for the daemon's: dockerd reports a
// failed import as an error response before the stream starts, so the
// in-stream error cannot be caused for real.
func TestReadProgress(t *testing.T) {
	ok := `{"status":"sha256:0123"}` + "\n" + `{"status":"done"}` + "\n"
	if err := readProgress(iotest.OneByteReader(strings.NewReader(ok))); err != nil {
		t.Errorf("a good stream: %v", err)
	}
	failed := `{"status":"importing"}` + "\n" + `{"errorDetail":{"message":"no space\nleft"},"error":"no space\nleft"}` + "\n"
	if err := readProgress(strings.NewReader(failed)); err == nil || err.Error() != "no space left" {
		t.Errorf("a failed stream: %v", err)
	}
	if err := readProgress(strings.NewReader(`{"status":`)); err == nil {
		t.Error("a stream cut short: no error")
	}
}
