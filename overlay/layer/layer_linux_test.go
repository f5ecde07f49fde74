package layer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// TestRead reads every shape of the format from real files, through both
// getters (a path's xattrs, and xattrs already listed as the changeset
// reader has them): each must give the same answer.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	if !treetest.Require(t, "xattr", treetest.XattrsSupported(dir), "user xattrs are not supported on "+dir) {
		return
	}
	root := os.Geteuid() == 0
	treetest.Require(t, "root", root, "0/0 devices and trusted.* xattrs need root")
	type xa = [2]string
	for _, c := range []struct {
		name     string
		root     bool // needs root to make
		make     func(p string) error
		xattrs   []xa
		whiteout bool
		opaque   bool
		redirect string // as stored; "" for none
		parent   string // the parent's lower path, for origin
		origin   string
	}{
		{name: "device 0/0", root: true, make: mknod(0), whiteout: true},
		{name: "device 1/3", root: true, make: mknod(unix.Mkdev(1, 3))},
		{name: "xwhiteout user", make: file(""), xattrs: []xa{{"user.overlay.whiteout", "y"}}, whiteout: true},
		{name: "xwhiteout trusted", root: true, make: file(""), xattrs: []xa{{"trusted.overlay.whiteout", "y"}}, whiteout: true},
		{name: "xwhiteout mark with content", make: file("data"), xattrs: []xa{{"user.overlay.whiteout", "y"}}},
		{name: "empty file", make: file("")},
		{name: "empty file, other xattr", make: file(""), xattrs: []xa{{"user.overlay.opaque", "y"}, {"user.note", "n"}}},
		{name: "whiteout mark on a directory", make: mkdir, xattrs: []xa{{"user.overlay.whiteout", "y"}}},
		{name: "opaque user", make: mkdir, xattrs: []xa{{"user.overlay.opaque", "y"}}, opaque: true},
		{name: "opaque trusted", root: true, make: mkdir, xattrs: []xa{{"trusted.overlay.opaque", "y"}}, opaque: true},
		{name: "opaque x holds xwhiteouts", make: mkdir, xattrs: []xa{{"user.overlay.opaque", "x"}}},
		{name: "plain directory", make: mkdir, xattrs: []xa{{"user.note", "y"}}},
		{name: "redirect absolute", make: mkdir, xattrs: []xa{{"user.overlay.redirect", "/a/b"}}, redirect: "/a/b", parent: "x", origin: "a/b"},
		{name: "redirect relative", make: mkdir, xattrs: []xa{{"user.overlay.redirect", "c"}}, redirect: "c", parent: "x/y", origin: "x/y/c"},
		{name: "redirect relative at the root", make: mkdir, xattrs: []xa{{"user.overlay.redirect", "c"}}, redirect: "c", origin: "c"},
		{name: "redirect trusted", root: true, make: mkdir, xattrs: []xa{{"trusted.overlay.redirect", "/d"}}, redirect: "/d", origin: "d"},
		{name: "redirect empty", make: mkdir, xattrs: []xa{{"user.overlay.redirect", ""}}},
		{name: "redirect and opaque", make: mkdir, xattrs: []xa{{"user.overlay.redirect", "/e"}, {"user.overlay.opaque", "y"}}, opaque: true, redirect: "/e", origin: "e"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root && !root {
				return // Require above said why
			}
			p := filepath.Join(dir, filepath.Base(t.Name()))
			treetest.Must(t, c.make(p))
			for _, x := range c.xattrs {
				treetest.Must(t, unix.Lsetxattr(p, x[0], []byte(x[1]), 0))
			}
			var st unix.Stat_t
			treetest.Must(t, unix.Lstat(p, &st))
			d, err := fsutil.OpenRoot(dir)
			treetest.Must(t, err)
			defer d.Close()
			xs, err := d.Xattrs(filepath.Base(p))
			treetest.Must(t, err)
			for _, g := range []struct {
				what string
				get  Getter
			}{{"path", PathGetter(p)}, {"list", ListGetter(xs)}} {
				if got := IsWhiteout(st.Mode, st.Rdev, st.Size, g.get); got != c.whiteout {
					t.Errorf("%s getter: whiteout %v, want %v", g.what, got, c.whiteout)
				}
				if st.Mode&unix.S_IFMT != unix.S_IFDIR {
					if !MayBeWhiteout(st.Mode&unix.S_IFMT) && c.whiteout {
						t.Errorf("MayBeWhiteout says no to a whiteout")
					}
					continue
				}
				if got := IsOpaque(g.get); got != c.opaque {
					t.Errorf("%s getter: opaque %v, want %v", g.what, got, c.opaque)
				}
				r, ok := Redirect(g.get)
				if r != c.redirect || ok != (c.redirect != "") {
					t.Errorf("%s getter: redirect %q %v, want %q", g.what, r, ok, c.redirect)
				}
				if ok {
					if o := Origin(r, c.parent); o != c.origin {
						t.Errorf("origin of %q under %q: %q, want %q", r, c.parent, o, c.origin)
					}
				}
			}
		})
	}
}

func TestIsMark(t *testing.T) {
	for name, want := range map[string]bool{
		"user.overlay.whiteout":   true,
		"trusted.overlay.opaque":  true,
		"user.overlay.origin":     true,
		"trusted.overlay.impure":  true,
		"user.overlayfoo":         false,
		"user.note":               false,
		"security.selinux":        false,
		"trusted.overlay":         false,
		"system.posix_acl_access": false,
	} {
		if IsMark(name) != want {
			t.Errorf("IsMark(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestWrite writes each shape and reads it back; ClearDirMarks leaves a
// directory's own xattrs.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if !treetest.Require(t, "xattr", treetest.XattrsSupported(dir), "user xattrs are not supported on "+dir) {
		return
	}
	at := func(n string) string { return filepath.Join(dir, n) }
	isWhiteout := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && IsWhiteout(st.Mode, st.Rdev, st.Size, PathGetter(p))
	}
	treetest.Must(t, MakeWhiteout(at("xw"), false))
	if !isWhiteout(at("xw")) {
		t.Error("an xwhiteout made is not read as a whiteout")
	}
	if st, err := os.Lstat(at("xw")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("xwhiteout: %v %v, want mode 0600 (its owner reads the mark)", st.Mode(), err)
	}
	if treetest.Require(t, "root", os.Geteuid() == 0, "0/0 devices need root") {
		treetest.Must(t, MakeWhiteout(at("dev"), true))
		if !isWhiteout(at("dev")) {
			t.Error("a whiteout device made is not read as a whiteout")
		}
		treetest.Must(t, os.WriteFile(at("from"), []byte("x"), 0o644))
		treetest.Must(t, RenameLeavingWhiteout(at("from"), at("to")))
		if !isWhiteout(at("from")) || isWhiteout(at("to")) {
			t.Error("a rename leaving a whiteout: no whiteout at its source, or one at its destination")
		}
	}
	d := at("d")
	treetest.Must(t, os.Mkdir(d, 0o755))
	treetest.Must(t, unix.Lsetxattr(d, "user.note", []byte("kept"), 0))
	treetest.Must(t, SetOpaque(d))
	treetest.Must(t, SetRedirect(d, "a/b"))
	treetest.Must(t, unix.Lsetxattr(d, "user.overlay.origin", []byte("o"), 0))
	r, ok := Redirect(PathGetter(d))
	if !IsOpaque(PathGetter(d)) || !ok || Origin(r, "elsewhere") != "a/b" {
		t.Errorf("written opaque and redirect to a/b read back as %v, %q %v", IsOpaque(PathGetter(d)), r, ok)
	}
	f, err := os.Open(d)
	treetest.Must(t, err)
	ClearDirMarks(int(f.Fd()))
	f.Close()
	sz, err := unix.Llistxattr(d, nil)
	treetest.Must(t, err)
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(d, buf)
	treetest.Must(t, err)
	if got := string(buf[:sz]); got != "user.note\x00" {
		t.Errorf("after ClearDirMarks the xattrs are %q, want user.note alone", got)
	}
}

func mknod(dev uint64) func(string) error {
	return func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o600, int(dev)) }
}

func file(content string) func(string) error {
	return func(p string) error { return os.WriteFile(p, []byte(content), 0o644) }
}

func mkdir(p string) error { return os.Mkdir(p, 0o755) }
