//go:build linux

package fuse

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay/fuse/uring"
)

// BenchmarkView measures what the server's own work costs per request,
// on a fresh mount each time (nothing in the kernel's caches): walking a
// lower tree (LOOKUP and GETATTR per entry, a listing per directory,
// reading every file) and making, writing and removing files in the
// upper layer. Each op is one FUSE request or a few: the server's path
// handling (directory descriptors and *at calls) is what differs
// between versions of this package.
//
// Where the kernel offers FUSE over io_uring, each runs twice: served
// through /dev/fuse reads ("device") and through the rings ("ring"); the
// benchmark process is both the server and the client here, unlike a
// run's (scripts/overlay-bench.sh measures those).
func BenchmarkView(b *testing.B) {
	ok, why := Available()
	if !ok {
		b.Skip(why)
	}
	if ok, _ := uring.Enabled(); !ok {
		benchView(b)
		return
	}
	defer func() { ringOff = false }()
	for _, tr := range []struct {
		name string
		off  bool
	}{{"device", true}, {"ring", false}} {
		ringOff = tr.off
		b.Run(tr.name, benchView)
	}
}

func benchView(b *testing.B) {
	dir := b.TempDir()
	lower := filepath.Join(dir, "lower")
	for d := 0; d < 20; d++ {
		for f := 0; f < 50; f++ {
			treetest.Write(b, lower, fmt.Sprintf("a/b%02d/c/d/f%02d", d, f), "content\n", 0o644)
		}
	}
	mount := func(b *testing.B, i int) (mnt string, unmount func()) {
		base := filepath.Join(dir, fmt.Sprint(b.Name(), i))
		upper, work, mnt := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "mnt")
		for _, d := range []string{upper, work, mnt} {
			treetest.Must(b, os.MkdirAll(d, 0o755))
		}
		srv, err := Mount(lower, upper, work, mnt)
		treetest.Must(b, err)
		if srv.Ring() == ringOff {
			b.Fatalf("the view's transport is not the one benchmarked (ring %v)", srv.Ring())
		}
		return mnt, func() { treetest.Must(b, srv.Unmount()) }
	}
	b.Run("walk-read-fresh", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mnt, unmount := mount(b, i)
			n := 0
			treetest.Must(b, filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if _, err := os.Lstat(p); err != nil {
					return err
				}
				if d.Type().IsRegular() {
					if _, err := os.ReadFile(p); err != nil {
						return err
					}
					n++
				}
				return nil
			}))
			if n != 1000 {
				b.Fatalf("walked %d files, want 1000", n)
			}
			unmount()
		}
	})
	b.Run("create-write-remove", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mnt, unmount := mount(b, i)
			d := filepath.Join(mnt, "a/b00/c/d/new")
			treetest.Must(b, os.Mkdir(d, 0o755))
			for f := 0; f < 500; f++ {
				treetest.Must(b, os.WriteFile(filepath.Join(d, fmt.Sprint(f)), []byte("x\n"), 0o644))
			}
			for f := 0; f < 50; f++ { // copy-ups of deep lower files
				treetest.Must(b, os.WriteFile(filepath.Join(mnt, fmt.Sprintf("a/b01/c/d/f%02d", f)), []byte("y\n"), 0o644))
			}
			treetest.Must(b, os.RemoveAll(d))
			unmount()
		}
	})
}
