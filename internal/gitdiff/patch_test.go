package gitdiff

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestPatchAndStatAgainstGit: FilePatch and WriteStat write what real
// git writes for the same change in a repository, byte for byte: a file
// edited, created, deleted, made executable, one only made executable,
// a symlink retargeted, a binary file, and names git quotes.
func TestPatchAndStatAgainstGit(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir, "COLUMNS=100",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return string(out)
	}
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("line\n", 30)
	git("init", "-q")
	write("edited.go", "package x\n\nfunc A() {\n"+long+"}\n", 0o644)
	write("gone.txt", "bye\n", 0o644)
	write("tool.sh", "echo 1\n", 0o644)
	write("modeonly.sh", "echo 2\n", 0o644)
	write("bin.dat", "a\x00b", 0o644)
	write("sp ace \"q\" \xc3\xa9.txt", "old\n", 0o644)
	if err := os.Symlink("edited.go", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-qm", "c0")
	old := map[string]*Side{}
	for _, name := range strings.Split(strings.TrimSuffix(git("ls-files", "-z"), "\x00"), "\x00") {
		old[name] = side(t, dir, name)
	}
	write("edited.go", "package x\n\nfunc A() {\n"+long+"\tchanged()\n}\n", 0o644)
	if err := os.Remove(filepath.Join(dir, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	write("tool.sh", "echo 1\necho 3\n", 0o755)
	write("modeonly.sh", "echo 2\n", 0o755)
	write("bin.dat", "a\x00c", 0o644)
	write("sp ace \"q\" \xc3\xa9.txt", "new\n", 0o644)
	write("new.txt", "hello\n", 0o644)
	write("new space.txt", "hello\n", 0o644)
	if err := os.Remove(filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("new.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	names := []string{"new.txt", "new space.txt"}
	for name := range old {
		names = append(names, name)
	}
	sort.Strings(names)
	var patch strings.Builder
	var stat []StatLine
	for _, name := range names {
		o, n := old[name], side(t, dir, name)
		same := o != nil && n != nil && o.ID == n.ID
		FilePatch(&patch, name, o, n, same)
		l := StatLine{Name: Quote(name)}
		if !o.textual() || !n.textual() {
			l.Binary = !same
			l.OldSize, l.NewSize = int64(len(o.text())), int64(len(n.text()))
			if o != nil && !o.Textual {
				l.OldSize = size(t, dir, "HEAD:"+name, git)
			}
			if n != nil && !n.Textual {
				l.NewSize = int64(len(readFile(t, filepath.Join(dir, name))))
			}
		} else {
			l.Added, l.Deleted = Count(Lines(o.text()), Lines(n.text()))
		}
		stat = append(stat, l)
	}
	if want := git("diff", "--cached", "--no-color", "--no-ext-diff"); patch.String() != want {
		t.Errorf("patch differs from git's:\n%s\ngit:\n%s\nours:\n%s", firstDifference(want, patch.String()), want, patch.String())
	}
	var sb bytes.Buffer
	WriteStat(&sb, stat, 100)
	if want := git("diff", "--cached", "--stat=100", "--no-color"); sb.String() != want {
		t.Errorf("--stat differs from git's:\n%s\ngit:\n%s\nours:\n%s", firstDifference(want, sb.String()), want, sb.String())
	}
}

// side is what git knows of name in dir's work tree (nil: absent).
func side(t *testing.T, dir, name string) *Side {
	t.Helper()
	p := filepath.Join(dir, name)
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		return &Side{Mode: "120000", Text: target, Textual: true, ID: BlobID([]byte(target))}
	}
	b := readFile(t, p)
	mode := "100644"
	if fi.Mode()&0o100 != 0 {
		mode = "100755"
	}
	return &Side{Mode: mode, Text: string(b), Textual: bytes.IndexByte(b, 0) < 0, ID: BlobID(b)}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func size(t *testing.T, dir, obj string, git func(...string) string) int64 {
	return int64(len(git("cat-file", "-p", obj)))
}

// TestQuote: names as git's core.quotePath quotes them.
func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain/name.go":  "plain/name.go",
		"sp ace":         "sp ace",
		"q\"uote":        `"q\"uote"`,
		"back\\slash":    `"back\\slash"`,
		"new\nline\ttab": `"new\nline\ttab"`,
		"\xc3\xa9":       `"\303\251"`,
		"\x7f":           `"\177"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
