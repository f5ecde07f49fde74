package snapshot_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay/layer"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// TestChangeset reads upper layers of every shape against a real tree: the
// changeset is the new state of each changed path, with absent entries for
// what the layer deletes or hides, and nothing of overlayfs's own marks.
func TestChangeset(t *testing.T) {
	if !treetest.Require(t, "xattr", treetest.XattrsSupported(t.TempDir()), "user xattrs are not supported here") {
		return
	}
	root := os.Geteuid() == 0
	treetest.Require(t, "root", root, "0/0 whiteout devices need root")
	type files = map[string]string // path -> content; a path ending in / is a directory
	for _, c := range []struct {
		name  string
		root  bool // needs root
		tree  files
		upper func(t *testing.T, tree, up string)
		want  string // "path=what" of each entry, in the manifest's order
		err   string
	}{
		{name: "new file", upper: write("new.txt", "hi"), want: "new.txt=file:hi"},
		{name: "changed file", tree: files{"a.txt": "old"}, upper: write("a.txt", "newer"), want: "a.txt=file:newer"},
		{name: "copy-up that changed nothing", tree: files{"a.txt": "same"}, upper: copyUp("a.txt"), want: ""},
		{name: "whiteout device", root: true, tree: files{"a.txt": "x"}, upper: whiteout("a.txt", true), want: "a.txt=absent"},
		{name: "xwhiteout", tree: files{"a.txt": "x"}, upper: whiteout("a.txt", false), want: "a.txt=absent"},
		{name: "whiteout of a directory", tree: files{"d/x": "1", "d/y/z": "2"}, upper: whiteout("d", false),
			want: "d=absent d/x=absent d/y=absent d/y/z=absent"},
		{name: "opaque directory", tree: files{"d/x": "1", "d/keep": "2"}, upper: steps(mkdir("d"), opaque("d"), write("d/keep", "22")),
			want: "d=dir d/keep=file:22 d/x=absent"},
		{name: "file replaces a directory", tree: files{"d/x": "1"}, upper: write("d", "f"), want: "d=file:f d/x=absent"},
		{name: "directory replaces a file", tree: files{"d": "f"}, upper: steps(mkdir("d"), write("d/x", "1")), want: "d=dir d/x=file:1"},
		{name: "redirect, absolute", tree: files{"old/a": "1", "old/b": "2"},
			upper: steps(whiteout("old", false), mkdir("new"), redirect("new", "/old"), write("new/b", "22")),
			want:  "new=dir new/a=file:1 new/b=file:22 old=absent old/a=absent old/b=absent"},
		{name: "redirect, relative", tree: files{"p/": "", "p/old/a": "1"},
			upper: steps(mkdir("p"), whiteout("p/old", false), mkdir("p/new"), redirect("p/new", "old"), copyMeta("p")),
			want:  "p/new=dir p/new/a=file:1 p/old=absent p/old/a=absent"},
		{name: "redirect below a whiteout it covers", tree: files{"old/a": "1", "old/b": "2"},
			upper: steps(whiteout("old", false), mkdir("new"), redirect("new", "/old"), whiteout("new/a", false)),
			want:  "new=dir new/b=file:2 old=absent old/a=absent old/b=absent"}, // new/a: nothing to delete in the tree
		{name: "bad redirect", tree: files{"a/x": "1"}, upper: steps(mkdir("n"), redirect("n", "/../etc")), err: "bad redirect"},
		{name: "marks are no xattrs", upper: steps(mkdir("d"), opaque("d"), xattr("d", "user.note", "n"), write("f", ""), xattr("f", "user.overlay.origin", "o")),
			want: "d=dir[user.note] f=file:"},
		{name: "ignored paths are left out", upper: steps(write("trace.log", "audit"), write("kept", "k")), want: "kept=file:k"},
		{name: "link to a path the changeset lacks", tree: files{"a.txt": "same"}, upper: steps(copyUp("a.txt"), link("a.txt", "b.txt")),
			want: "b.txt=file:same"},
		{name: "link inside the changeset", upper: steps(write("a", "l"), link("a", "b")), want: "a=file:l b=file:l>a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.root && !root {
				return // Require above said why
			}
			tree, up := t.TempDir(), t.TempDir()
			for p, content := range c.tree {
				if strings.HasSuffix(p, "/") {
					treetest.Must(t, os.MkdirAll(filepath.Join(tree, p), 0o755))
				} else {
					treetest.Write(t, tree, p, content, 0o644)
				}
			}
			r := openRepo(t, tree, "*.log")
			c.upper(t, tree, up)
			ud, err := fsutil.OpenRoot(up)
			treetest.Must(t, err)
			defer ud.Close()
			m, err := r.Changeset(ud)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("changeset: %v, want an error saying %q", err, c.err)
				}
				return
			}
			treetest.Must(t, err)
			if got := describe(m); got != c.want {
				t.Errorf("changeset:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

// describe lists a changeset as "path=what": absent, dir (with its xattr
// names), or file:content (with >link).
func describe(m record.Manifest) string {
	var out []string
	for _, e := range m {
		s := e.Path + "="
		switch e.Type {
		case record.Absent:
			s += "absent"
		case record.Dir:
			s += "dir"
		case record.File:
			s += "file:" + contentOf(e.Object, e.Size)
		default:
			s += fmt.Sprint(e.Type)
		}
		if len(e.Xattrs) > 0 {
			var names []string
			for _, x := range e.Xattrs {
				names = append(names, x.Name)
			}
			s += "[" + strings.Join(names, ",") + "]"
		}
		if e.Link != "" {
			s += ">" + e.Link
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// contentOf names a small content by itself, from its hash.
var known = map[record.ObjectID]string{}

func contentOf(id record.ObjectID, size int64) string {
	for _, s := range []string{"", "1", "2", "22", "f", "hi", "k", "l", "newer", "same", "x"} {
		known[sha256.Sum256([]byte(s))] = s
	}
	if s, ok := known[id]; ok {
		return s
	}
	return fmt.Sprintf("<%d bytes>", size)
}

type step = func(t *testing.T, tree, up string)

func steps(s ...step) step {
	return func(t *testing.T, tree, up string) {
		for _, f := range s {
			f(t, tree, up)
		}
	}
}

func write(p, content string) step {
	return func(t *testing.T, _, up string) { treetest.Write(t, up, p, content, 0o644) }
}

func mkdir(p string) step {
	return func(t *testing.T, _, up string) { treetest.Must(t, os.MkdirAll(filepath.Join(up, p), 0o755)) }
}

func whiteout(p string, device bool) step {
	return func(t *testing.T, _, up string) {
		treetest.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(up, p)), 0o755))
		treetest.Must(t, layer.MakeWhiteout(filepath.Join(up, p), device))
	}
}

func opaque(p string) step {
	return func(t *testing.T, _, up string) { treetest.Must(t, layer.SetOpaque(filepath.Join(up, p))) }
}

// redirect stores a redirect value as is (relative ones too, which only
// the kernel writes).
func redirect(p, value string) step {
	return func(t *testing.T, _, up string) {
		treetest.Must(t, unix.Lsetxattr(filepath.Join(up, p), "user.overlay.redirect", []byte(value), 0))
	}
}

func xattr(p, name, value string) step {
	return func(t *testing.T, _, up string) {
		treetest.Must(t, unix.Lsetxattr(filepath.Join(up, p), name, []byte(value), 0))
	}
}

func link(from, to string) step {
	return func(t *testing.T, _, up string) {
		treetest.Must(t, os.Link(filepath.Join(up, from), filepath.Join(up, to)))
	}
}

// copyUp copies a tree file into the layer unchanged, as overlayfs does
// when a file is opened for writing and nothing is written.
func copyUp(p string) step {
	return func(t *testing.T, tree, up string) {
		b, err := os.ReadFile(filepath.Join(tree, p))
		treetest.Must(t, err)
		treetest.Write(t, up, p, string(b), 0o644)
		copyMeta(p)(t, tree, up)
	}
}

// copyMeta gives the layer's p the tree's mode and times.
func copyMeta(p string) step {
	return func(t *testing.T, tree, up string) {
		st, err := os.Lstat(filepath.Join(tree, p))
		treetest.Must(t, err)
		treetest.Must(t, os.Chmod(filepath.Join(up, p), st.Mode().Perm()))
		mt := st.ModTime()
		treetest.Must(t, os.Chtimes(filepath.Join(up, p), time.Now(), mt))
	}
}
