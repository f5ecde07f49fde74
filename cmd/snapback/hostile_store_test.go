//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
)

// TestHostileStore plants, at every path the store uses, in turn a
// symbolic link to outside the project, a FIFO, a directory, a file of
// another user and a huge (sparse) file, and runs every verb against the
// store: nothing outside the project changes (a sentinel tree's checksum),
// nothing hangs, every refusal is one line naming the path, and after
// `check --repair` every verb accepts the store again.
func TestHostileStore(t *testing.T) {
	// A file of another user can only be made by root.
	root := treetest.Require(t, "root", os.Geteuid() == 0, "planting a file owned by another user needs root")
	bin := snapbackBinary(t)
	// The paths the store uses (snapshot/trust.go lists the layout); ""
	// is the store itself. OBJ, MAN and REC stand for a content object, a
	// manifest and a record of the project's history, PACK for the pack
	// that holds the small content of sub/b.
	paths := []string{
		"", "lock", "tmp", "objects", "objects/OBJDIR", "objects/OBJ", "objects/MAN",
		"packs", "packs/PACK",
		"snapshots", "snapshots/REC", "journal.json", "index", "identity", ".gitignore",
		"agent", "agent/turn-00000000000000000000000000000000.json", "runs", "targets",
		"damaged", "treerun.lock",
	}
	kinds := []string{"symlink", "fifo", "dir", "huge"}
	if root {
		kinds = append(kinds, "foreign")
	}
	sem := make(chan struct{}, 4) // processes mostly wait on the disk
	for _, p := range paths {
		for _, k := range kinds {
			name := strings.ReplaceAll(p, "/", "_") + "-" + k
			if p == "" {
				name = "store-" + k
			}
			if p == "" && k == "dir" {
				continue // the store is one
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				hostileCase(t, bin, p, k)
			})
		}
	}
}

// hostileVerbs are run in this order against a planted store, reading
// and changing ones alike. S1 stands for the first snapshot's id.
var hostileVerbs = [][]string{
	{"list"}, {"status"}, {"diff"}, {"check"}, {"snap", "-m", "h"}, {"undo"}, {"redo"},
	{"restore", "S1"}, {"gc", "--keep", "10"}, {"recover"},
	{"checkpoint", "begin", "-m", "c"}, {"checkpoint", "end"},
	{"run", "--mode", "copy", "--", "sh", "-c", "echo z > c"},
}

type hostileResult struct {
	code   int
	stderr string
}

func hostileCase(t *testing.T, bin, rel, kind string) {
	dir := t.TempDir()
	root := filepath.Join(dir, "p")
	out := filepath.Join(dir, "outside")
	treetest.Must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	treetest.Must(t, os.MkdirAll(out, 0o755))
	treetest.Must(t, os.WriteFile(filepath.Join(out, "victim"), []byte("outside the project\n"), 0o644))
	treetest.Must(t, os.WriteFile(filepath.Join(root, "a"), []byte("a1\n"), 0o644))
	treetest.Must(t, os.WriteFile(filepath.Join(root, "sub", "b"), []byte("b\n"), 0o644))
	run := func(args ...string) hostileResult { return hostileRun(t, bin, root, args...) }
	if r := run("snap", "-m", "s1"); r.code != 0 {
		t.Fatalf("setup snap: %s", r.stderr)
	}
	treetest.Must(t, os.WriteFile(filepath.Join(root, "a"), hostileA2, 0o644))
	if r := run("snap", "-m", "s2"); r.code != 0 {
		t.Fatalf("setup snap: %s", r.stderr)
	}
	store := filepath.Join(root, ".snapback")
	treetest.Must(t, os.MkdirAll(filepath.Join(store, "agent"), 0o700))
	treetest.Must(t, os.WriteFile(filepath.Join(store, "agent", "turn-00000000000000000000000000000000.json"), []byte(`{"version":1}`), 0o600))
	s1, s2 := storeRecords(t, filepath.Join(store, "snapshots"))
	rel = hostileResolve(t, store, rel, s2+".json")
	target := filepath.Join(store, rel)
	plantHostile(t, target, filepath.Join(out, "planted"), kind)
	before := treeSum(t, out)

	verbs := func(phase string) map[string]hostileResult {
		res := map[string]hostileResult{}
		for _, v := range hostileVerbs {
			args := append([]string{}, v...)
			for i := range args {
				if args[i] == "S1" {
					args[i] = s1
				}
			}
			r := run(args...)
			res[strings.Join(v, " ")] = r
			checkRefusal(t, phase, args, r, rel)
		}
		return res
	}
	verbs("planted " + kind + " at .snapback/" + rel)
	if got := treeSum(t, out); got != before {
		t.Fatalf("planted %s at .snapback/%s: the tree outside the project changed", kind, rel)
	}
	if r := run("check", "--repair"); r.code > 1 {
		t.Fatalf("check --repair: exit %d: %s", r.code, r.stderr)
	}
	after := verbs("after check --repair")
	for v, r := range after {
		// A history set aside whole (a foreign store, snapshots/ not a
		// directory) has no S1 any more, and packs/ or s1's pack set
		// aside took s1's a1, which no file of the tree holds now (check
		// said so: restoring S1 is refused); anything else must work.
		lost := strings.Contains(r.stderr, "no such snapshot") ||
			strings.HasPrefix(rel, "packs") && strings.Contains(r.stderr, "object missing from the store")
		if (r.code == 2 || r.code == 125) && !lost {
			t.Errorf("after check --repair, %s still fails: exit %d: %s", v, r.code, r.stderr)
		}
	}
	if got := treeSum(t, out); got != before {
		t.Fatalf("planted %s at .snapback/%s: after repair, the tree outside the project changed", kind, rel)
	}
}

// hostileA2 is a's content in s2: large enough to be a loose object (OBJ),
// not packed.
var hostileA2 = []byte("a2\n" + strings.Repeat("x", 20<<10))

// hostileResolve turns the placeholders of a store path into the names
// of this store's files.
func hostileResolve(t *testing.T, store, rel, rec string) string {
	t.Helper()
	if rel == "packs/PACK" {
		sum := sha256.Sum256([]byte("b\n"))
		o, ok, err := findObject(store, hex.EncodeToString(sum[:]))
		treetest.Must(t, err)
		if !ok || !o.packed {
			t.Fatalf("no pack holds the content of sub/b")
		}
		return "packs/" + filepath.Base(o.path)
	}
	if !strings.Contains(rel, "OBJ") && !strings.Contains(rel, "MAN") && !strings.Contains(rel, "REC") {
		return rel
	}
	b, err := os.ReadFile(filepath.Join(store, "snapshots", rec))
	treetest.Must(t, err)
	man := regexp.MustCompile(`"manifest":\s*"([0-9a-f]{64})"`).FindSubmatch(b)
	if man == nil {
		t.Fatalf("record %s names no manifest: %s", rec, b)
	}
	sum := sha256.Sum256(hostileA2)
	obj := hex.EncodeToString(sum[:])
	switch rel {
	case "snapshots/REC":
		return "snapshots/" + rec
	case "objects/MAN":
		m := string(man[1])
		return "objects/" + m[:2] + "/" + m[2:]
	case "objects/OBJDIR":
		return "objects/" + obj[:2]
	}
	return "objects/" + obj[:2] + "/" + obj[2:]
}

// plantHostile puts kind at path; a symlink leads to sentinel (outside
// the project), which takes over what path held, so that whatever follows
// the link finds a store part that looks right.
func plantHostile(t *testing.T, path, sentinel, kind string) {
	t.Helper()
	st, err := os.Lstat(path)
	exists := err == nil
	switch kind {
	case "symlink":
		if exists {
			treetest.Must(t, os.Rename(path, sentinel))
		} else {
			treetest.Must(t, os.WriteFile(sentinel, []byte(`{"op":"restore","scope":"tree"}`), 0o644))
		}
		treetest.Must(t, os.Symlink(sentinel, path))
	case "fifo":
		treetest.Must(t, os.RemoveAll(path))
		treetest.Must(t, syscall.Mkfifo(path, 0o600))
	case "dir":
		if exists && st.IsDir() {
			// Already a directory: put a directory where a file of it is
			// expected instead (lock files, records come back as such).
			treetest.Must(t, os.Mkdir(filepath.Join(path, "lock"), 0o700))
			return
		}
		treetest.Must(t, os.RemoveAll(path))
		treetest.Must(t, os.Mkdir(path, 0o700))
	case "foreign":
		if !exists {
			treetest.Must(t, os.WriteFile(path, []byte("{}"), 0o600))
		}
		treetest.Must(t, os.Lchown(path, 65534, 65534))
	case "huge":
		treetest.Must(t, os.RemoveAll(path))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
		treetest.Must(t, err)
		size := int64(8 << 30)
		if filepath.Base(filepath.Dir(filepath.Dir(path))) == "objects" {
			// An object: just over every bound of a whole read (1 GiB).
			// `check` re-hashes every object in full, so 8 GiB would cost
			// it seconds of reading zeros at each call.
			size = 1<<30 + 1
		}
		treetest.Must(t, f.Truncate(size))
		treetest.Must(t, f.Close())
	}
}

// hostileRun runs one verb with a timeout: a verb that waits on a FIFO
// fails the test instead of hanging it.
func hostileRun(t *testing.T, bin, root string, args ...string) hostileResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-C", root}, args...)...)
	// No tree watcher: one a checkpoint begin starts detached makes its
	// files in the store while the test's temporary directory is being
	// removed ("directory not empty"); the watcher has its own tests.
	cmd.Env = append(os.Environ(), "SNAPBACK_LOCK_WAIT=2s", "SNAPBACK_WATCH=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("snapback %s: still running after 30 s (it hangs)", strings.Join(args, " "))
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("snapback %s: %v", strings.Join(args, " "), err)
	}
	return hostileResult{code, stderr.String()}
}

// checkRefusal: a verb that fails says so in one line that names the
// planted path (or, for an object, its id); exit 2 for a refused store.
func checkRefusal(t *testing.T, phase string, args []string, r hostileResult, rel string) {
	t.Helper()
	verb := strings.Join(args, " ")
	if args[0] == "run" && r.code == 125 {
		r.code = 2 // run's own failure (its command's statuses are the others)
	}
	if r.code > 2 {
		t.Errorf("%s: snapback %s: exit %d (want 0, 1 or 2): %s", phase, verb, r.code, r.stderr)
		return
	}
	if r.code == 0 {
		return
	}
	var errs []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, "snapback: warning:") && !strings.HasPrefix(l, "hint:") && !strings.HasPrefix(l, "snapback: hint:") && l != "" {
			errs = append(errs, l)
		}
	}
	if r.code == 1 {
		return // refused with nothing changed (nothing to undo, a conflict, damage found)
	}
	if len(errs) != 1 {
		t.Errorf("%s: snapback %s: exit 2 with %d error lines, want 1:\n%s", phase, verb, len(errs), r.stderr)
		return
	}
	if strings.HasPrefix(phase, "after") {
		return
	}
	names := []string{"/.snapback/" + rel}
	if rel == "" {
		names = []string{"/.snapback"}
	}
	if id, ok := strings.CutPrefix(rel, "objects/"); ok {
		names = append(names, strings.ReplaceAll(id, "/", ""))
	}
	for _, n := range names {
		if strings.Contains(errs[0], n) {
			return
		}
	}
	t.Errorf("%s: snapback %s: the error does not name %q:\n%s", phase, verb, names[0], r.stderr)
}

// storeRecords returns the ids of the records of messages s1 and s2.
func storeRecords(t *testing.T, dir string) (s1, s2 string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	treetest.Must(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		treetest.Must(t, err)
		id := strings.TrimSuffix(e.Name(), ".json")
		switch {
		case regexp.MustCompile(`"message":\s*"s1"`).Match(b):
			s1 = id
		case regexp.MustCompile(`"message":\s*"s2"`).Match(b):
			s2 = id
		}
	}
	if s1 == "" || s2 == "" {
		t.Fatalf("want the records of s1 and s2 in %s", dir)
	}
	return s1, s2
}

// treeSum is a checksum of every name, type, mode, owner, size and content
// below dir (a huge file is hashed by its stat: it is not read).
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		fmt.Fprintf(h, "%s %v %d %d %d %d\n", p, info.Mode(), st.Uid, info.Size(), st.Ino, info.ModTime().UnixNano())
		if info.Mode().IsRegular() && info.Size() < 1<<20 {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			fmt.Fprintf(h, "-> %s\n", l)
		}
		return nil
	})
	treetest.Must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}
