package fsutil_test

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st unix.Stat_t
	treetest.Must(t, unix.Fstat(int(f.Fd()), &st))
	return st.Blocks * 512
}

func sparseFile(t *testing.T, dir string, size int64) (*os.File, [32]byte) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "src"))
	treetest.Must(t, err)
	want := make([]byte, size)
	for _, off := range []int64{0, size / 3, size - 5} {
		copy(want[off:], "data!")
		_, err := f.WriteAt([]byte("data!"), off)
		treetest.Must(t, err)
	}
	treetest.Must(t, f.Truncate(size))
	return f, sha256.Sum256(want)
}

// TestSparseCopyKeepsHoles copies a 256 MiB file holding 15 bytes of data:
// the copy must hash like the source and stay sparse.
func TestSparseCopyKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	const size = 256 << 20
	src, want := sparseFile(t, dir, size)
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, "dst"))
	treetest.Must(t, err)
	defer dst.Close()
	sum, n, err := fsutil.CopyHash(dst, src)
	treetest.Must(t, err)
	if n != size || sum != want {
		t.Fatalf("copy: %d bytes, sum %x; want %d, %x", n, sum, size, want)
	}
	if a := allocated(t, dst); a > 1<<20 {
		t.Fatalf("copy of a sparse file allocates %d bytes", a)
	}
	got, _, err := fsutil.HashFile(dst)
	treetest.Must(t, err)
	if got != want {
		t.Fatal("copy reads back differently")
	}
}

func TestCopyHashPlainFile(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000) // 4.8 MB, past one buffer
	treetest.Must(t, os.WriteFile(filepath.Join(dir, "src"), data, 0o644))
	if sum, n := copyHash(t, dir); n != int64(len(data)) || sum != sha256.Sum256(data) {
		t.Fatalf("copy of %d bytes: n=%d, wrong hash", len(data), n)
	}
	back, err := os.ReadFile(filepath.Join(dir, "dst"))
	treetest.Must(t, err)
	if !bytes.Equal(back, data) {
		t.Fatal("copy differs")
	}
}

// TestCloneOnBtrfs: where the filesystem has reflinks, a copy shares the
// source's blocks instead of writing new ones.
func TestCloneOnBtrfs(t *testing.T) {
	mnt := treetest.Btrfs(t, 512)
	data := bytes.Repeat([]byte("reflink me "), 64<<20/11)
	treetest.Must(t, os.WriteFile(filepath.Join(mnt, "src"), data, 0o644))
	free := func() int64 {
		unix.Sync()
		var st unix.Statfs_t
		treetest.Must(t, unix.Statfs(mnt, &st))
		return int64(st.Bavail) * int64(st.Bsize)
	}
	before := free()
	if sum, n := copyHash(t, mnt); n != int64(len(data)) || sum != sha256.Sum256(data) {
		t.Fatal("clone: wrong size or hash")
	}
	if used := before - free(); used > 8<<20 {
		t.Fatalf("a 64 MiB copy on btrfs used %d MiB: not cloned", used>>20)
	}
}

// copyHash copies dir/src to a new dir/dst with CopyHash.
func copyHash(t *testing.T, dir string) ([32]byte, int64) {
	t.Helper()
	src, err := os.Open(filepath.Join(dir, "src"))
	treetest.Must(t, err)
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, "dst"))
	treetest.Must(t, err)
	defer dst.Close()
	sum, n, err := fsutil.CopyHash(dst, src)
	treetest.Must(t, err)
	return sum, n
}
