package fsutil_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/fsutil"
)

// BenchmarkRestoreCopy is the copy a restore makes of one small file from
// the store into the tree, with the hash check (CopyHash) and without it
// (CopyFile): what checking every content written back costs per file.
// The files are 3.5 KiB, the average small file of scripts/bench.sh's tree.
func BenchmarkRestoreCopy(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, make([]byte, 3584), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		copy func(dst, src *os.File) error
	}{
		{"CopyFile", fsutil.CopyFile},
		{"CopyHash", func(dst, src *os.File) error { _, _, err := fsutil.CopyHash(dst, src); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				in, err := os.Open(src)
				if err != nil {
					b.Fatal(err)
				}
				p := filepath.Join(dir, fmt.Sprintf("dst-%d", i%1000))
				out, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.copy(out, in); err != nil {
					b.Fatal(err)
				}
				out.Close()
				in.Close()
			}
		})
	}
}
