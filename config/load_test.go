package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// TestLoadOddFiles: a snapback.toml that is not a small regular file is
// refused at once with one line naming it, never read until memory runs
// out (/dev/zero, a huge file) or waited on (a FIFO with no writer).
func TestLoadOddFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, p string) error
		err  error
		msg  string
	}{
		{"fifo", func(_ *testing.T, p string) error { return syscall.Mkfifo(p, 0o644) },
			fsutil.ErrNotRegular, "not a regular file (a named pipe)"},
		{"dev-zero-link", func(_ *testing.T, p string) error { return os.Symlink("/dev/zero", p) },
			fsutil.ErrNotRegular, "not a regular file (a character device)"},
		{"directory", func(_ *testing.T, p string) error { return os.Mkdir(p, 0o755) },
			fsutil.ErrNotRegular, "not a regular file (a directory)"},
		{"2MiB", func(_ *testing.T, p string) error {
			// Valid TOML all through: only the size is wrong.
			return os.WriteFile(p, []byte(strings.Repeat("# padding\n", 2<<20/10)), 0o644)
		}, fsutil.ErrTooLarge, "over the size limit of 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, FileName)
			if err := tc.make(t, p); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := Load(root)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Load has not returned after 5 s")
			}
			var ce *Error
			if !errors.As(err, &ce) || !errors.Is(err, tc.err) {
				t.Fatalf("Load: error %T %v, want a *config.Error wrapping %v", err, err, tc.err)
			}
			if want := p + ": " + tc.msg; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

// TestLoadFollowsLink: a snapback.toml kept elsewhere and linked to is
// read like the file itself.
func TestLoadFollowsLink(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	real := filepath.Join(elsewhere, "shared.toml")
	if err := os.WriteFile(real, []byte("[snapshot]\nmode = \"copy\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(root, FileName)); err != nil {
		t.Fatal(err)
	}
	c, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.Mode != "copy" {
		t.Errorf("mode %q, want copy (from the linked file)", c.Snapshot.Mode)
	}
}
