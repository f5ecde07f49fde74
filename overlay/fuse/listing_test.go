//go:build linux

package fuse

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestListingAttributes: a listing carries its entries' attributes only
// where they will likely be used (listing_linux.go): a directory's
// always, another entry's once its caller has looked up a name in a
// directory listed without them; what every caller sees is the lower
// tree either way. The server's nodes tell which entries carried
// attributes (the kernel made an inode of each).
func TestListingAttributes(t *testing.T) {
	dirs := []string{"a", "b", "c"}
	m, lower, _, mnt, _ := mountedView(t, func(lower string) {
		for _, d := range dirs {
			for i := 0; i < 20; i++ {
				treetest.Write(t, lower, fmt.Sprintf("%s/f%02d", d, i), fmt.Sprint(d, i), 0o640)
			}
			for i := 0; i < 3; i++ {
				treetest.Must(t, os.Mkdir(filepath.Join(lower, d, fmt.Sprint("s", i)), 0o750))
			}
			treetest.Must(t, os.Symlink("f00", filepath.Join(lower, d, "l")))
		}
	})

	// carried lists d's entries the server has a node for.
	carried := func(d string) (dirs, others int) {
		n := m.root.GetChild(d)
		if n == nil {
			t.Fatalf("no node for %s", d)
		}
		for name, c := range n.Children() {
			if c.StableAttr().Mode == syscall.S_IFDIR {
				dirs++
			} else if name != "" {
				others++
			}
		}
		return dirs, others
	}
	// list lists d through the view and checks each entry's name and type
	// against the lower tree's.
	list := func(d string) {
		t.Helper()
		got, err := os.ReadDir(filepath.Join(mnt, d))
		treetest.Must(t, err)
		want, err := os.ReadDir(filepath.Join(lower, d))
		treetest.Must(t, err)
		if len(got) != len(want) {
			t.Fatalf("%s lists %d entries, want %d", d, len(got), len(want))
		}
		for i := range got {
			if got[i].Name() != want[i].Name() || got[i].Type() != want[i].Type() {
				t.Errorf("%s: entry %s %v, want %s %v", d, got[i].Name(), got[i].Type(), want[i].Name(), want[i].Type())
			}
		}
	}
	// in runs f on a thread of its own (the kernel names a request's
	// caller by thread), which stays taken until the test ends.
	in := func(f func()) {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			f()
			close(done)
			select {} // keep the thread: a later caller must be another
		}()
		<-done
	}

	in(func() {
		list("a") // a walker that reads names and types only
		if dirs, others := carried("a"); dirs != 3 || others != 0 {
			t.Errorf("a walker's listing carried %d directories and %d other entries, want 3 and 0", dirs, others)
		}
		// It stats a listed name: it is a caller that uses attributes.
		var st syscall.Stat_t
		treetest.Must(t, syscall.Lstat(filepath.Join(mnt, "a/f00"), &st))
		list("b")
		if dirs, others := carried("b"); dirs != 3 || others != 21 {
			t.Errorf("the listing of a caller that stats carried %d directories and %d other entries, want 3 and 21", dirs, others)
		}
	})
	in(func() {
		list("c") // another caller: it has not stated anything
		if dirs, others := carried("c"); dirs != 3 || others != 0 {
			t.Errorf("another caller's listing carried %d directories and %d other entries, want 3 and 0", dirs, others)
		}
	})
	// Whatever a listing carried, every entry's attributes are the lower
	// tree's.
	for _, d := range dirs {
		ents, err := os.ReadDir(filepath.Join(lower, d))
		treetest.Must(t, err)
		for _, e := range ents {
			var got, want syscall.Stat_t
			treetest.Must(t, syscall.Lstat(filepath.Join(mnt, d, e.Name()), &got))
			treetest.Must(t, syscall.Lstat(filepath.Join(lower, d, e.Name()), &want))
			if got.Mode != want.Mode || got.Size != want.Size || got.Mtim != want.Mtim || got.Nlink != want.Nlink || got.Ino != want.Ino {
				t.Errorf("%s/%s: mode %o size %d mtime %v nlink %d ino %d, want %o %d %v %d %d", d, e.Name(),
					got.Mode, got.Size, got.Mtim, got.Nlink, got.Ino, want.Mode, want.Size, want.Mtim, want.Nlink, want.Ino)
			}
		}
	}
}
