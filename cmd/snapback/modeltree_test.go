//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"pgregory.net/rapid"
)

// The model test's picture of a tree (see model_test.go): each path,
// relative to the root, mapped to what a verb promises to keep of it —
// type, permission bits, content, link target — as one comparable
// string. Times are left out: no verb the model drives promises them
// (undo restores them, but a command's own writes carry the moment it
// ran). The store is never part of it.
type tree map[string]string

// absent is the value of a path that does not exist, in a step's
// before or after.
const absent = ""

func fileEntry(mode fs.FileMode, content []byte) string {
	return fmt.Sprintf("file %04o %q", mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), content)
}

// walkTree reads root as the model sees it, and which files have more
// than one name (a run's in-place write to one of them is a documented
// limit of the overlay modes, so the generator avoids it).
func walkTree(root string) (tree, map[string]bool, error) {
	tr, multi := tree{}, map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if rel == ".snapback" {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsDir():
			tr[rel] = fmt.Sprintf("dir %04o", fi.Mode().Perm())
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			tr[rel] = "symlink " + target
		case fi.Mode().IsRegular():
			content, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tr[rel] = fileEntry(fi.Mode(), content)
			if rel == filepath.Join(".git", "index") {
				// Judged by what it stages, as snapback does: not by the
				// stat data git refreshes in it.
				cmd := exec.Command("git", "ls-files", "-s")
				cmd.Dir = root
				if out, err := cmd.Output(); err == nil {
					tr[rel] = fmt.Sprintf("git index %04o %q", fi.Mode().Perm(), out)
				}
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				multi[rel] = true
			}
		default:
			tr[rel] = "other " + fi.Mode().Type().String()
		}
		return nil
	})
	return tr, multi, err
}

func (tr tree) clone() tree {
	out := make(tree, len(tr))
	for p, e := range tr {
		out[p] = e
	}
	return out
}

func (tr tree) paths() []string {
	out := make([]string, 0, len(tr))
	for p := range tr {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (tr tree) isDir(p string) bool { return strings.HasPrefix(tr[p], "dir ") }

// changed lists the paths whose entries differ between a and b.
func changed(a, b tree) []string {
	var out []string
	for p, e := range a {
		if b[p] != e {
			out = append(out, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// pick is the entries of tr at paths (absent where tr has none).
func pick(tr tree, paths []string) tree {
	out := tree{}
	for _, p := range paths {
		out[p] = tr[p]
	}
	return out
}

// apply sets each path of vals in a copy of tr: absent removes it and
// everything below it.
func apply(tr tree, vals tree) tree {
	out := tr.clone()
	for p, e := range vals {
		if e == absent {
			delete(out, p)
			for q := range out {
				if under(q, p) {
					delete(out, q)
				}
			}
		}
	}
	for p, e := range vals {
		if e != absent {
			out[p] = e
		}
	}
	return out
}

// under says whether q is strictly below p.
func under(q, p string) bool { return strings.HasPrefix(q, p+"/") }

// foreign lists the paths of cur below a path of vals that vals
// removes or makes a non-directory, but that vals does not name: what
// writing vals would destroy without being asked to.
func foreign(cur, vals tree) []string {
	var out []string
	for q := range cur {
		if _, named := vals[q]; named {
			continue
		}
		for p, e := range vals {
			if under(q, p) && !strings.HasPrefix(e, "dir ") {
				out = append(out, q)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// diffLines describes how got differs from want, one line per path.
func diffLines(want, got tree) []string {
	var out []string
	for _, p := range changed(want, got) {
		w, g := want[p], got[p]
		if w == absent {
			w = "(absent)"
		}
		if g == absent {
			g = "(absent)"
		}
		out = append(out, fmt.Sprintf("%s: want %s, got %s", p, w, g))
	}
	return out
}

// shq quotes s for a POSIX shell.
func shq(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=@:%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
}

// The generator's vocabulary: few names, so that operations meet each
// other's paths; contents of equal length, so that an edit in place
// with the mtime kept is invisible to size and time alike.
var (
	modelNames    = []string{"a", "b", "c", "d"}
	modelContents = []string{"1", "2", "11", "22", "", "hello"}
	modelTargets  = []string{"a", "../a", "d/a", "/etc/hostname", "missing"}
	fileModes     = []string{"644", "600", "755"}
	dirModes      = []string{"755", "700"}
)

// genOp draws one shell command that changes the tree at cwd, as a
// person (or a command under run) would: written against tr, the tree
// it starts from; a command that fails (mkdir of an existing name) is
// harmless, as the reference runs the same command natively. ref is a
// scratch file outside the tree, for touch -r. inRun avoids writing in
// place to a file of several names (multi), a documented limit of the
// overlay modes.
func genOp(t *rapid.T, tr tree, multi map[string]bool, ref string, inRun bool) string {
	paths := tr.paths()
	var dirs, files []string
	dirs = append(dirs, "")
	for _, p := range paths {
		switch {
		case tr.isDir(p) && strings.Count(p, "/") < 2:
			dirs = append(dirs, p)
		case strings.HasPrefix(tr[p], "file ") && !(inRun && multi[p]):
			files = append(files, p)
		}
	}
	newPath := func(label string) string {
		dir := rapid.SampledFrom(dirs).Draw(t, label+"dir")
		name := rapid.SampledFrom(modelNames).Draw(t, label+"name")
		if dir != "" {
			name = dir + "/" + name
		}
		if inRun && multi[name] {
			name += "n" // never write into a file of several names
		}
		return name
	}
	existing := func(label string) string {
		if len(paths) == 0 {
			return newPath(label)
		}
		return rapid.SampledFrom(paths).Draw(t, label)
	}
	aFile := func() string {
		if len(files) == 0 {
			return newPath("file")
		}
		return rapid.SampledFrom(files).Draw(t, "file")
	}
	content := func() string { return shq(rapid.SampledFrom(modelContents).Draw(t, "content")) }
	kinds := []string{"write", "write", "inplace", "rename", "delete", "chmod", "symlink", "mkdir", "rmdir", "link", "age"}
	switch rapid.SampledFrom(kinds).Draw(t, "op") {
	case "write":
		return fmt.Sprintf("printf %%s %s > %s", content(), shq(newPath("w")))
	case "inplace":
		// The same length and mtime: only the ctime tells.
		f := aFile()
		return fmt.Sprintf("touch -r %s %s && printf %%s %s > %s && touch -r %s %s", shq(f), ref, content(), shq(f), ref, shq(f))
	case "rename":
		return fmt.Sprintf("mv -f %s %s", shq(existing("from")), shq(newPath("to")))
	case "delete":
		return "rm -rf " + shq(existing("rm"))
	case "chmod":
		p := existing("chmod")
		if inRun && multi[p] {
			return "true"
		}
		modes := fileModes
		if tr.isDir(p) {
			modes = dirModes
		}
		return fmt.Sprintf("chmod %s %s", rapid.SampledFrom(modes).Draw(t, "mode"), shq(p))
	case "symlink":
		return fmt.Sprintf("ln -s %s %s", shq(rapid.SampledFrom(modelTargets).Draw(t, "target")), shq(newPath("ln")))
	case "mkdir":
		return "mkdir " + shq(newPath("mkdir"))
	case "rmdir":
		return "rmdir " + shq(existing("rmdir"))
	case "link":
		return fmt.Sprintf("ln %s %s", shq(aFile()), shq(newPath("hl")))
	default: // age: an old mtime, so that the stat cache trusts it
		return "touch -h -d @1600000000 " + shq(existing("age"))
	}
}

// genScript draws 1–3 operations as one shell script, each failing
// harmlessly, ending with exit status.
func genScript(t *rapid.T, tr tree, multi map[string]bool, ref string, inRun bool, status int) string {
	n := rapid.IntRange(1, 3).Draw(t, "ops")
	ops := make([]string, 0, n+1)
	for i := 0; i < n; i++ {
		ops = append(ops, genOp(t, tr, multi, ref, inRun)+" 2>/dev/null")
	}
	ops = append(ops, fmt.Sprintf("exit %d", status))
	return strings.Join(ops, "; ")
}
