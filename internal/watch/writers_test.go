//go:build linux

package watch

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestWritersMapped: a file mapped shared and writable is named, through
// PROCMAP_QUERY and through the map's text alike, as is one open for
// writing (a name with a newline included); one mapped privately or
// read-only, or one whose name is gone, is not.
func TestWritersMapped(t *testing.T) {
	root := t.TempDir()
	mapFile := func(name string, prot, flags int) {
		f, err := os.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // the mapping holds the file
		if err := f.Truncate(4096); err != nil {
			t.Fatal(err)
		}
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, prot, flags)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Munmap(b) })
	}
	mapFile("shared", syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	mapFile("new\nline", syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	mapFile("private", syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	mapFile("readonly", syscall.PROT_READ, syscall.MAP_SHARED)
	mapFile("gone", syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err := os.Remove(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(filepath.Join(root, "written"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := []string{"new\nline", "shared", "written"}
	for _, text := range []bool{false, true} {
		got := writersBelow(root, text)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("writers (maps as text: %v) = %q, want %q", text, got, want)
		}
	}
}
