package gitdiff

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The corpus tests compare Unified and Count with real git's
// `git diff --no-index` on the same two files, byte for byte.

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("SNAPBACK_REQUIRE") != "" {
			t.Fatal("git is required")
		}
		t.Skip("no git")
	}
}

// gitHunks is git's patch of a → b from its first hunk on, and its
// --numstat counts.
func gitHunks(t *testing.T, dir, a, b string) (hunks string, added, deleted int) {
	t.Helper()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(pa, []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "core.quotepath=off", "diff", "--no-index", "--no-color", "--no-ext-diff"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir)
		out, err := cmd.Output()
		if err != nil && cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("git diff: %v", err)
		}
		return string(out)
	}
	p := run("a", "b")
	if i := strings.Index(p, "\n@@ "); i >= 0 {
		hunks = p[i+1:]
	}
	if ns := run("--numstat", "a", "b"); ns != "" {
		if _, err := fmt.Sscanf(ns, "%d\t%d", &added, &deleted); err != nil {
			t.Fatalf("numstat %q: %v", ns, err)
		}
	}
	return hunks, added, deleted
}

func ours(a, b string) (string, int, int) {
	la, lb := Lines(a), Lines(b)
	var sb strings.Builder
	Unified(&sb, la, lb)
	ad, de := Count(la, lb)
	return sb.String(), ad, de
}

func compare(t *testing.T, dir, name, a, b string) bool {
	t.Helper()
	want, wa, wd := gitHunks(t, dir, a, b)
	got, ga, gd := ours(a, b)
	if got == want && ga == wa && gd == wd {
		return true
	}
	t.Errorf("%s: differs from git (numstat git %d/%d, ours %d/%d)\n%s", name, wa, wd, ga, gd, firstDifference(want, got))
	return false
}

// firstDifference shows where two outputs part.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n git:  %q\n ours: %q", i+1, wl, gl)
		}
	}
	return "(same lines)"
}

// randomText is n lines drawn from a small vocabulary (so that lines
// repeat, as braces and blank lines do in code), some indented.
func randomText(r *rand.Rand, n int) []string {
	vocab := []string{"", "}", "{", "\treturn nil", "x := 1", "if err != nil {", "func f() {", "\t}", "  foo", "bar", "// comment", "\t\tcall()"}
	lines := make([]string, n)
	for i := range lines {
		if r.Intn(4) == 0 {
			lines[i] = fmt.Sprintf("line %d", r.Intn(1000))
		} else {
			lines[i] = vocab[r.Intn(len(vocab))]
		}
	}
	return lines
}

// edit changes lines at random: deletions, insertions, replacements,
// duplications of blocks, in a few places.
func edit(r *rand.Rand, lines []string) []string {
	out := append([]string(nil), lines...)
	for k := r.Intn(6) + 1; k > 0; k-- {
		at := 0
		if len(out) > 0 {
			at = r.Intn(len(out) + 1)
		}
		n := r.Intn(5) + 1
		switch r.Intn(4) {
		case 0: // delete
			out = append(out[:at], out[min(at+n, len(out)):]...)
		case 1: // insert
			out = append(out[:at], append(randomText(r, n), out[at:]...)...)
		case 2: // replace
			end := min(at+n, len(out))
			out = append(out[:at], append(randomText(r, n), out[end:]...)...)
		case 3: // duplicate a block
			end := min(at+n, len(out))
			block := append([]string(nil), out[at:end]...)
			out = append(out[:end], append(block, out[end:]...)...)
		}
	}
	return out
}

func join(lines []string, r *rand.Rand) string {
	s := strings.Join(lines, "\n")
	if len(lines) > 0 && r.Intn(5) != 0 {
		s += "\n"
	}
	return s
}

func TestRandomAgainstGit(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	r := rand.New(rand.NewSource(1))
	n := 400
	if testing.Short() {
		n = 50
	}
	bad := 0
	for i := 0; i < n && bad < 5; i++ {
		size := r.Intn(60)
		if i%10 == 0 {
			size = r.Intn(2000)
		}
		a := randomText(r, size)
		b := edit(r, a)
		if !compare(t, dir, fmt.Sprintf("case %d", i), join(a, r), join(b, r)) {
			bad++
		}
	}
}

// TestGoSourceAgainstGit diffs real files (Go's own source) against
// codemod-like edits of them: a rename everywhere, a line dropped in
// every function, blocks moved.
func TestGoSourceAgainstGit(t *testing.T) {
	needGit(t)
	files, _ := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", "*", "*.go"))
	if len(files) == 0 {
		t.Skip("no Go source under GOROOT")
	}
	if testing.Short() && len(files) > 40 {
		files = files[:40]
	}
	if len(files) > 300 {
		files = files[:300]
	}
	dir := t.TempDir()
	r := rand.New(rand.NewSource(2))
	bad := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			continue
		}
		a := string(data)
		edits := map[string]string{
			"rename err":   strings.ReplaceAll(a, "err", "e"),
			"drop returns": dropLines(a, func(l string) bool { return strings.TrimSpace(l) == "return" }),
			"drop blanks":  dropLines(a, func(l string) bool { return r.Intn(3) == 0 && strings.TrimSpace(l) == "" }),
			"random":       join(edit(r, strings.Split(strings.TrimSuffix(a, "\n"), "\n")), r),
		}
		for name, b := range edits {
			if !compare(t, dir, filepath.Base(f)+": "+name, a, b) {
				bad++
			}
		}
		if bad >= 5 {
			break
		}
	}
}

func dropLines(s string, drop func(string) bool) string {
	var sb strings.Builder
	for _, l := range Lines(s) {
		if !drop(l) {
			sb.WriteString(l)
		}
	}
	return sb.String()
}

func TestBlobID(t *testing.T) {
	// git hash-object of an empty file and of "hello\n".
	if got := BlobID(nil); got != "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" {
		t.Errorf("empty blob: %s", got)
	}
	if got := BlobID([]byte("hello\n")); got != "ce013625030ba8dba906f756967f9e9ca394464a" {
		t.Errorf("hello blob: %s", got)
	}
}

// TestCostlyAgainstGit: files far apart, where the search gives up on a
// shortest script (xdiff's cost limits and its snake heuristic).
func TestCostlyAgainstGit(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	r := rand.New(rand.NewSource(3))
	n := 30
	if testing.Short() {
		n = 5
	}
	bad := 0
	for i := 0; i < n && bad < 5; i++ {
		a := randomText(r, 1000+r.Intn(4000))
		var b []string
		switch i % 3 {
		case 0: // unrelated
			b = randomText(r, 1000+r.Intn(4000))
		case 1: // many edits
			b = a
			for k := 0; k < 60; k++ {
				b = edit(r, b)
			}
		case 2: // long shared runs between unrelated stretches
			for k := 0; k < 10; k++ {
				b = append(b, randomText(r, 200)...)
				at := r.Intn(len(a) - 50)
				b = append(b, a[at:at+30+r.Intn(20)]...)
			}
		}
		if i%10 == 9 {
			// Large enough (tens of thousands of lines) that the cost
			// limit rises past where the snake heuristic starts.
			a = randomText(r, 40000)
			b = a
			for k := 0; k < 300; k++ {
				b = edit(r, b)
			}
		}
		if !compare(t, dir, fmt.Sprintf("costly %d", i), join(a, r), join(b, r)) {
			bad++
		}
	}
}
