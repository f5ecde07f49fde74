package fsutil_test

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// readWithin runs read and fails the test if it has not returned in
// five seconds: a FIFO must be refused, not waited on.
func readWithin(t *testing.T, read func(string, int64) ([]byte, error), path string, max int64) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := read(path, max)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("reading %s has not returned after 5 s", path)
		return nil, nil
	}
}

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		treetest.Must(t, os.WriteFile(p, bytes.Repeat([]byte("x"), size), 0o644))
		return p
	}
	small := write("small", 100)
	exact := write("exact", 1024)
	over := write("over", 1025)
	treetest.Must(t, os.Symlink("small", filepath.Join(dir, "link-small")))
	treetest.Must(t, os.Symlink("/dev/zero", filepath.Join(dir, "link-zero")))
	fifo := filepath.Join(dir, "fifo")
	treetest.Must(t, syscall.Mkfifo(fifo, 0o644))
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	treetest.Must(t, err)
	defer l.Close()

	both := map[string]func(string, int64) ([]byte, error){
		"ReadFileLimit":       fsutil.ReadFileLimit,
		"ReadFileLimitFollow": fsutil.ReadFileLimitFollow,
		"Dir.ReadFileLimit": func(path string, max int64) ([]byte, error) {
			d, err := fsutil.OpenRoot(filepath.Dir(path))
			if err != nil {
				return nil, err
			}
			defer d.Close()
			return d.ReadFileLimit(filepath.Base(path), max, nil)
		},
	}
	for fname, read := range both {
		for _, tc := range []struct {
			path    string
			follows bool   // the outcome differs when links are followed
			want    int    // bytes read, when no error
			err     error  // else the error it must match
			msg     string // and a part of its text
		}{
			{path: small, want: 100},
			{path: exact, want: 1024},
			{path: over, err: fsutil.ErrTooLarge, msg: over + ": over the size limit of 1 KiB"},
			{path: fifo, err: fsutil.ErrNotRegular, msg: fifo + ": not a regular file (a named pipe)"},
			{path: "/dev/zero", err: fsutil.ErrNotRegular, msg: "/dev/zero: not a regular file (a character device)"},
			{path: dir, err: fsutil.ErrNotRegular, msg: "(a directory)"},
			{path: sock, err: fsutil.ErrNotRegular},
			{path: filepath.Join(dir, "missing"), err: fs.ErrNotExist},
			{path: filepath.Join(dir, "link-small"), follows: true},
			{path: filepath.Join(dir, "link-zero"), follows: true},
		} {
			if tc.follows {
				switch {
				case fname != "ReadFileLimitFollow":
					tc.err, tc.msg = fsutil.ErrNotRegular, ": not a regular file (a symbolic link, not followed)"
				case strings.HasSuffix(tc.path, "small"):
					tc.want = 100
				default:
					tc.err, tc.msg = fsutil.ErrNotRegular, "link-zero: not a regular file (a character device)"
				}
			}
			b, err := readWithin(t, read, tc.path, 1024)
			switch {
			case tc.err == nil && err != nil:
				t.Errorf("%s(%s): %v", fname, tc.path, err)
			case tc.err == nil && len(b) != tc.want:
				t.Errorf("%s(%s): %d bytes, want %d", fname, tc.path, len(b), tc.want)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Errorf("%s(%s): error %v, want %v", fname, tc.path, err, tc.err)
			case tc.err != nil && !strings.Contains(err.Error(), tc.msg):
				t.Errorf("%s(%s): error %q, want it to say %q", fname, tc.path, err, tc.msg)
			case tc.err != nil && !strings.Contains(err.Error(), tc.path):
				t.Errorf("%s(%s): error %q does not name the path", fname, tc.path, err)
			}
		}
	}
}

// TestReadFileLimitHugeDevice: a device that never ends (/dev/zero) with a
// bound that would take all memory is refused without reading it.
func TestReadFileLimitHugeDevice(t *testing.T) {
	if _, err := fsutil.ReadFileLimitFollow("/dev/zero", 1<<62); !errors.Is(err, fsutil.ErrNotRegular) {
		t.Fatalf("error %v, want ErrNotRegular", err)
	}
}

// TestDirReadFileLimit: below a Dir, no component of the path is followed
// if it is a symbolic link (a store directory swapped for a link to
// elsewhere), and the caller's check sees the file before it is read.
func TestDirReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	treetest.Must(t, os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o600))
	treetest.Must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	treetest.Must(t, os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("inside"), 0o600))
	treetest.Must(t, os.Symlink(outside, filepath.Join(dir, "link")))
	d, err := fsutil.OpenRoot(dir)
	treetest.Must(t, err)
	defer d.Close()
	if b, err := d.ReadFileLimit("sub/f", 100, nil); err != nil || string(b) != "inside" {
		t.Fatalf("sub/f: %q, %v", b, err)
	}
	if b, err := d.ReadFileLimit("link/f", 100, nil); !errors.Is(err, fsutil.ErrEscape) {
		t.Fatalf("link/f: %q, %v; want ErrEscape", b, err)
	}
	if _, err := d.ReadFileLimit("../f", 100, nil); !errors.Is(err, fsutil.ErrEscape) {
		t.Fatalf("../f: %v; want ErrEscape", err)
	}
	refuse := errors.New("not yours")
	_, err = d.ReadFileLimit("sub/f", 100, func(st *unix.Stat_t) error { return refuse })
	if !errors.Is(err, refuse) || !strings.Contains(err.Error(), filepath.Join(dir, "sub", "f")) {
		t.Fatalf("check: %v; want the check's error naming the path", err)
	}
}
