package snapshot

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// FuzzStoreLayout plants hostile things at the parts of a real store (the
// ones Open checks, the ones a snap made, and names from the input) and
// runs what the CLI runs on a store: listing, locking, recovering a
// journal (which sweeps tmp), history, a snap, gc and check. Nothing may
// change a file outside the project through a planted link, nothing may
// wait on a planted FIFO, and every refusal names a path in the store.
//
// The input is a program: per op a kind byte, a path byte (a known part,
// or else a name of up to 15 input bytes, '/' nesting it), and for a
// regular file a size byte and its bytes.
func FuzzStoreLayout(f *testing.F) {
	// Seeds: the known dangerous cases (kinds as in plant below).
	f.Add(seedOp(opLinkFile, "lock"))
	f.Add(seedOp(opLinkDir, "tmp"))
	f.Add(seedOp(opLinkDir, "objects"))
	f.Add(seedOp(opLinkDir, "."))
	f.Add(seedOp(opFIFO, "lock"))
	f.Add(seedOp(opFIFO, "journal.json"))
	f.Add(append(seedOp(opFile, "journal.json"), 13, '{', '"', 'o', 'p', '"', ':', '"', 'u', 'n', 'd', 'o', '"', '}'))
	f.Add(append(seedOp(opLinkDir, "runs/20260101-000000-abcdef"), seedOp(opLinkFile, "index")...))
	f.Add(append(seedOp(opRemove, IdentityFile), seedOp(opLinkFile, "journal.json")...))
	f.Add(seedOp(opForeign, "snapshots"))
	f.Add([]byte{opLinkDir, 255, 5, 't', 'm', 'p', '/', 'x'})
	f.Add(seedOp(opLinkDir, packsDir))
	f.Add(append(seedOp(opFile, packsDir+"/"+strings.Repeat("0", 64)+packSuffix), 0xf0, 's', 'n', 'a', 'p'))
	f.Add(append(seedOp(opFile, packsDir+"/"+strings.Repeat("0", 64)+packSuffix), 64, 's', 'n', 'a', 'p', 'b', 'a', 'c', 'k', '-', 'p', 'a', 'c', 'k', '/', '1', '\n'))

	tmpl := newStoreTemplate(f)
	f.Fuzz(func(t *testing.T, prog []byte) {
		base, err := os.MkdirTemp(fuzzTempBase(), "fuzzstore-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		root, sentinel := tmpl.instance(t, base)
		before := hashTree(t, sentinel)
		store := filepath.Join(root, StoreDir)
		for _, op := range decodeOps(prog, tmpl.parts) {
			op.plant(store, sentinel)
		}

		done := make(chan []error, 1)
		go func() { done <- exerciseStore(root) }()
		var errs []error
		select {
		case errs = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("store operations still running after 10s (waiting on a planted FIFO?); ops %v", decodeOps(prog, tmpl.parts))
		}
		for _, err := range errs {
			checkRefusal(t, err, store)
		}
		if after := hashTree(t, sentinel); after != before {
			t.Fatalf("the tree outside the project changed:\nbefore %s\nafter  %s\nops %v", before, after, decodeOps(prog, tmpl.parts))
		}
	})
}

// exerciseStore runs, on the store of root, the library calls of a
// read-only verb and of a changing one; it returns their errors.
func exerciseStore(root string) []error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if s, err := openStore(root, "", false); err != nil {
		note("open read-only", err)
	} else {
		_, err := s.List()
		note("list", err)
	}
	r, err := openRepo(root, "", nil, false)
	if err != nil {
		return append(errs, fmt.Errorf("open for changing: %w", err))
	}
	defer r.Close()
	if err := r.Lock(0, "fuzz"); err != nil {
		return append(errs, fmt.Errorf("lock: %w", err))
	}
	_, err = r.JournalOp()
	note("journal op", err)
	_, err = r.Recover()
	note("recover", err)
	_, err = r.PendingRuns()
	note("pending runs", err)
	_, err = r.History()
	note("history", err)
	_, err = r.Snap(record.KindSnap, "fuzz")
	note("snap", err)
	_, err = r.GC(1000, nil)
	note("gc", err)
	_, err = r.Check(CheckOptions{ReadData: true})
	note("check", err)
	return errs
}

// checkRefusal: a refusal of the store names a path inside it.
func checkRefusal(t *testing.T, err error, store string) {
	t.Helper()
	var ue *UntrustedError
	if errors.As(err, &ue) {
		if ue.Path != store && !strings.HasPrefix(ue.Path, store+"/") {
			t.Fatalf("refusal names %q, not a path in the store %s: %v", ue.Path, store, err)
		}
		return
	}
	if errors.Is(err, ErrUntrusted) && !strings.Contains(err.Error(), store) {
		t.Fatalf("refusal names no path in the store %s: %v", store, err)
	}
}

// Kinds of planting.
const (
	opLinkDir  = iota // a symlink to the sentinel directory
	opLinkFile        // a symlink to the sentinel file
	opFIFO
	opDir
	opFile // a regular file of input bytes
	opRemove
	opForeign // owned by uid 65534 (root only; else skipped)
	opKinds
)

var opNames = [...]string{"link-dir", "link-file", "fifo", "dir", "file", "remove", "foreign"}

type plantOp struct {
	kind int
	rel  string // in the store, slash-separated; "." is the store itself
	data []byte
}

func (o plantOp) String() string { return fmt.Sprintf("%s %q", opNames[o.kind], o.rel) }

// seedOp encodes one op on a known part by name.
func seedOp(kind int, rel string) []byte {
	for i, p := range knownParts() {
		if p == rel {
			return []byte{byte(kind), byte(i)}
		}
	}
	return append([]byte{byte(kind), 255, byte(len(rel))}, rel...)
}

// knownParts are the paths Open checks (trust.go's lists), in a fixed order
// so that a seed keeps its meaning.
func knownParts() []string {
	parts := []string{"."}
	parts = append(parts, storeDirs...)
	files := make([]string, 0, len(storeFiles))
	for f := range storeFiles {
		files = append(files, f)
	}
	sort.Strings(files)
	parts = append(parts, files...)
	const run = "runs/20260101-000000-abcdef"
	parts = append(parts, run)
	rf := make([]string, 0, len(runFiles))
	for f := range runFiles {
		rf = append(rf, run+"/"+f)
	}
	sort.Strings(rf)
	parts = append(parts, rf...)
	parts = append(parts, run+"/upper", run+"/work", "agent/turn", "targets/db", "objects/00", "tmp/stage-x")
	// A pack of a valid name that snapback did not write (a planted file
	// there is a hostile pack: its index is read at the first lookup).
	return append(parts, packsDir+"/"+strings.Repeat("0", 64)+packSuffix)
}

const maxOps = 8

func decodeOps(prog []byte, parts []string) []plantOp {
	var ops []plantOp
	next := func() (byte, bool) {
		if len(prog) == 0 {
			return 0, false
		}
		b := prog[0]
		prog = prog[1:]
		return b, true
	}
	take := func(n int) []byte {
		n = min(n, len(prog))
		b := prog[:n]
		prog = prog[n:]
		return b
	}
	for len(ops) < maxOps {
		k, ok := next()
		if !ok {
			break
		}
		sel, ok := next()
		if !ok {
			break
		}
		op := plantOp{kind: int(k) % opKinds}
		if int(sel) < len(parts) {
			op.rel = parts[sel]
		} else {
			n, _ := next()
			op.rel = cleanRel(take(int(n) % 16))
			if op.rel == "" {
				continue
			}
		}
		if op.kind == opFile {
			n, _ := next()
			size := int(n)
			if n >= 0xf0 { // large (to 1 MiB): past the 64 KiB bounds of the small files
				size = int(n-0xf0+1) << 16
			}
			d := take(min(size, 64))
			op.data = make([]byte, size)
			for i := range op.data {
				if len(d) > 0 {
					op.data[i] = d[i%len(d)]
				}
			}
		}
		ops = append(ops, op)
	}
	return ops
}

// cleanRel makes input bytes a relative path in the store: odd bytes kept
// (but NUL, which no path holds), no "." or ".." steps, which would leave
// it.
func cleanRel(b []byte) string {
	var steps []string
	for _, s := range strings.Split(strings.ReplaceAll(string(b), "\x00", "\x01"), "/") {
		if s != "" && s != "." && s != ".." {
			steps = append(steps, s)
		}
	}
	return strings.Join(steps, "/")
}

// plant puts op's thing at its path, never following a link: a parent
// that is not a plain directory (an earlier op may have planted one)
// makes the op a no-op, so the planting itself cannot reach outside.
func (o plantOp) plant(store, sentinel string) {
	p := store
	if o.rel != "." {
		if fi, err := os.Lstat(store); err != nil || !fi.IsDir() {
			return // the store itself was replaced by an earlier op
		}
		steps := strings.Split(o.rel, "/")
		for _, s := range steps[:len(steps)-1] {
			p = filepath.Join(p, s)
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				err = os.Mkdir(p, 0o700)
			} else if err == nil && !fi.IsDir() {
				return
			}
			if err != nil {
				return
			}
		}
		p = filepath.Join(p, steps[len(steps)-1])
	}
	if o.kind == opForeign {
		if os.Geteuid() != 0 {
			return
		}
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			_ = os.WriteFile(p, []byte("foreign\n"), 0o600) // p's parent is a plain directory
		}
		_ = os.Lchown(p, 65534, 65534)
		return
	}
	_ = os.RemoveAll(p) // removes a link, never what it points to
	switch o.kind {
	case opLinkDir:
		_ = os.Symlink(filepath.Join(sentinel, "dir"), p)
	case opLinkFile:
		_ = os.Symlink(filepath.Join(sentinel, "file"), p)
	case opFIFO:
		_ = unix.Mkfifo(p, 0o600)
	case opDir:
		_ = os.Mkdir(p, 0o700)
	case opFile:
		_ = os.WriteFile(p, o.data, 0o600)
	}
}

// storeTemplate is a project with a store holding one snap, made once
// and copied for each input (a snap per input would be too slow).
type storeTemplate struct {
	dir   string
	parts []string // knownParts, then every path the snap left in the store
}

func newStoreTemplate(f *testing.F) *storeTemplate {
	dir, err := os.MkdirTemp(fuzzTempBase(), "fuzzstore-tmpl-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "project")
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "b.txt"), []byte("beta\n"), 0o644))
	r, err := openRepo(root, "", nil, true)
	must(err)
	must(r.Lock(time.Second, "fuzz template"))
	_, err = r.Snap(record.KindSnap, "one")
	must(err)
	must(os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha 2\n"), 0o644))
	_, err = r.Snap(record.KindSnap, "two")
	must(err)
	r.Close()

	t := &storeTemplate{dir: root, parts: knownParts()}
	store := filepath.Join(root, StoreDir)
	must(filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == store {
			return err
		}
		rel, _ := filepath.Rel(store, p)
		t.parts = append(t.parts, filepath.ToSlash(rel))
		return nil
	}))
	return t
}

// instance copies the template under base, with a sentinel tree beside
// the project, and writes the copy's identity record for its own inodes.
func (tm *storeTemplate) instance(t *testing.T, base string) (root, sentinel string) {
	root = filepath.Join(base, "project")
	if err := copyTree(tm.dir, root); err != nil {
		t.Fatal(err)
	}
	// New content, for the snap to store (through tmp and objects).
	if err := os.WriteFile(filepath.Join(root, "new.txt"), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	sentinel = filepath.Join(base, "sentinel")
	for _, d := range []string{"dir/sub"} {
		if err := os.MkdirAll(filepath.Join(sentinel, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"file": "outside\n", "dir/x": "x\n", "dir/sub/y": "y\n", "dir/lock": "held\n"} {
		if err := os.WriteFile(filepath.Join(sentinel, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Store{Root: root, Dir: filepath.Join(root, StoreDir)}
	var st, rst unix.Stat_t
	if err := unix.Lstat(s.Dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(root, &rst); err != nil {
		t.Fatal(err)
	}
	if err := s.writeIdentity(identity{Version: 1, Root: root, RootIno: rst.Ino, StoreIno: st.Ino, Dev: uint64(st.Dev)}); err != nil {
		t.Fatal(err)
	}
	return root, sentinel
}

// copyTree copies the directories and regular files below src (all a
// fresh store holds).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, fi.Mode().Perm())
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, fi.Mode().Perm())
		}
		return fmt.Errorf("copy %s: not a directory or a regular file", p)
	})
}

// hashTree sums the names, kinds, modes, owners, times and contents
// below dir.
func hashTree(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		// The times too: a file made and moved away again through a
		// link leaves its directory's mtime changed.
		fmt.Fprintf(h, "%q %o %d %d %d %v %v\n", p, st.Mode, st.Uid, st.Gid, st.Size, st.Mtim, st.Ctim)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// fuzzTempBase is tmpfs where there is one: a store per input is cheap there.
func fuzzTempBase() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
