//go:build linux

package snapshot_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/internal/watch"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// TestMain lets the test binary be the tree's watcher that checkpoint
// begin starts (watch.Start runs this program with watch.ServeVerb).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == watch.ServeVerb {
		os.Exit(watch.Serve(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// watched opens a repository whose checkpoints use the tree's watcher
// (this test binary), stopped when the test ends.
func watched(t *testing.T, root string, ignore ...string) *snapshot.Repo {
	t.Helper()
	snapshot.WatchTree = true
	t.Cleanup(func() { snapshot.WatchTree = false })
	t.Setenv("SNAPBACK_WATCH_IDLE", "2m") // a watcher the test leaves behind does not stay
	r := openRepo(t, root, ignore...)
	t.Cleanup(func() { watch.Stop(r.Dir) })
	return r
}

// waitWatcher waits until the watcher gives tokens.
func waitWatcher(t *testing.T, r *snapshot.Repo) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if _, err := watch.Mark(r.Dir); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the watcher gave no token in 5 s")
}

// fuzzOps changes a small tree at random in every way a checkpoint
// records: contents, modes, times, renames of files and directories,
// removals, symlinks, hard links, new directories, a directory replaced
// by a file and a file by a directory.
type fuzzOps struct {
	t    *testing.T
	root string
	rnd  *rand.Rand
	n    int
}

func (f *fuzzOps) path() string {
	depth := 1 + f.rnd.Intn(3)
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = fmt.Sprintf("%c%d", "dfx"[f.rnd.Intn(3)], f.rnd.Intn(3))
	}
	return filepath.Join(parts...)
}

func (f *fuzzOps) do() string {
	f.n++
	p, q := f.path(), f.path()
	abs, absq := filepath.Join(f.root, p), filepath.Join(f.root, q)
	var what string
	var err error
	switch f.rnd.Intn(13) {
	case 0, 1:
		what = "write " + p
		if err = os.MkdirAll(filepath.Dir(abs), 0o755); err == nil {
			err = os.WriteFile(abs, []byte(fmt.Sprintf("content %d\n", f.n)), 0o644)
		}
	case 2:
		what = "append " + p
		var fh *os.File
		if fh, err = os.OpenFile(abs, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0); err == nil {
			_, err = fmt.Fprintf(fh, "more %d\n", f.n)
			fh.Close()
		}
	case 3:
		what = "rename " + p + " " + q
		if err = os.MkdirAll(filepath.Dir(absq), 0o755); err == nil {
			err = os.Rename(abs, absq)
		}
	case 4:
		what = "remove " + p
		err = os.RemoveAll(abs)
	case 5:
		what = "chmod " + p
		err = syscall.Chmod(abs, uint32(0o600+f.rnd.Intn(2)*0o44))
	case 6:
		what = "symlink " + p
		if err = os.MkdirAll(filepath.Dir(abs), 0o755); err == nil {
			err = os.Symlink(q, abs)
		}
	case 7:
		what = "link " + p + " " + q
		if err = os.MkdirAll(filepath.Dir(absq), 0o755); err == nil {
			err = os.Link(abs, absq)
		}
	case 8:
		what = "mkdir " + p
		err = os.MkdirAll(abs, 0o755)
	case 9:
		what = "dir to file " + p
		if st, e := os.Lstat(abs); e == nil && st.IsDir() {
			if err = os.RemoveAll(abs); err == nil {
				err = os.WriteFile(abs, []byte("was a dir\n"), 0o644)
			}
		}
	case 10:
		what = "file to dir " + p
		if st, e := os.Lstat(abs); e == nil && st.Mode().IsRegular() {
			if err = os.Remove(abs); err == nil {
				err = os.WriteFile(filepath.Join(abs, "in"), []byte("was a file\n"), 0o644)
				if err != nil {
					err = os.MkdirAll(abs, 0o755)
				}
			}
		}
	case 11:
		what = "touch " + p
		when := time.Unix(1_700_000_000+int64(f.rnd.Intn(1000)), 0)
		err = os.Chtimes(abs, when, when)
	case 12:
		what = "replace " + p + " by a rename"
		tmp := abs + ".tmp"
		if err = os.WriteFile(tmp, []byte(fmt.Sprintf("replaced %d\n", f.n)), 0o644); err == nil {
			err = os.Rename(tmp, abs)
			os.Remove(tmp) // when the rename failed; gone otherwise
		}
	}
	if err != nil {
		what += " (failed: " + strings.SplitN(err.Error(), ": ", 2)[0] + ")"
	}
	return what
}

// seedOf reads SNAPBACK_WATCH_SEED, else picks one.
func seedOf(t *testing.T) int64 {
	if s := os.Getenv("SNAPBACK_WATCH_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		treetest.Must(t, err)
		return n
	}
	return time.Now().UnixNano()
}

// Every watched checkpoint begin and end records exactly what a scan of
// the whole tree records, over random turns of random changes (and
// changes between turns, a person's), with another session's checkpoint
// open across some of them (each asks with its own token), while the
// watcher is started, stopped and killed at random moments: a stretch
// the watcher cannot vouch for is read whole.
// SNAPBACK_WATCH_TURNS sets the number of turns (scripts/fuzz.sh watch
// runs many), SNAPBACK_WATCH_SEED repeats a run.
func TestWatchedCheckpointExact(t *testing.T) {
	turns := 300
	if testing.Short() {
		turns = 60
	}
	if s := os.Getenv("SNAPBACK_WATCH_TURNS"); s != "" {
		var err error
		turns, err = strconv.Atoi(s)
		treetest.Must(t, err)
	}
	seed := seedOf(t)
	t.Logf("seed %d (SNAPBACK_WATCH_SEED repeats it)", seed)
	// Blocks of a few entries: the begins and ends cut, join, drop and
	// find across many blocks.
	snapshot.SmallBlocks(t, 200)
	root := t.TempDir()
	rnd := rand.New(rand.NewSource(seed))
	f := &fuzzOps{t: t, root: root, rnd: rnd}
	for i := 0; i < 30; i++ {
		f.do()
	}
	r := watched(t, root, "x2/", "*.tmp")
	var warned []string
	r.Warn = func(m string) { warned = append(warned, m) }
	nWatched, nBegins, ops := 0, 0, 0
	var other *record.Meta // another session's open checkpoint
	otherKilled := false
	for turn := 0; turn < turns; turn++ {
		var log []string
		// begin opens session's checkpoint, and checks that the state it
		// recorded is what a scan of the tree reads.
		begin := func(session string) *record.Meta {
			m, _, err := r.BeginCheckpoint(session, fmt.Sprint("turn ", turn))
			treetest.Must(t, err)
			beganWatched := r.LastWatched
			scanned, err := r.ScanTree(true)
			treetest.Must(t, err)
			// (A watched begin records its state blocked: compared
			// joined, as every reader but the end reads it.)
			got, err := r.LoadManifest(m.Manifest)
			treetest.Must(t, err)
			if !bytes.Equal(record.EncodeManifest(got), record.EncodeManifest(scanned)) {
				t.Fatalf("seed %d turn %d (begin watched %v): the begin recorded\n %s\nthe full scan\n %s", seed, turn, beganWatched, paths(got), paths(scanned))
			}
			if beganWatched {
				nBegins++
			}
			return m
		}
		// Another session's checkpoint, open across some of these turns:
		// each asks the watcher with its own token.
		if other == nil && rnd.Intn(4) == 0 {
			other, otherKilled = begin("other"), false
		}
		m := begin("turn")
		killed := false
		for i, n := 0, rnd.Intn(12); i < n; i++ {
			log = append(log, f.do())
			ops++
			switch rnd.Intn(80) {
			case 0: // killed in the middle of the turn
				if pid := watch.Pid(r.Dir); pid > 0 && watch.Running(r.Dir) {
					syscall.Kill(pid, syscall.SIGKILL)
					log = append(log, "(watcher killed)")
					killed = true
				}
			case 1: // stopped
				treetest.Must(t, watch.Stop(r.Dir))
				log = append(log, "(watcher stopped)")
				killed = true
			}
		}
		otherKilled = otherKilled || killed
		// end compares session's end with a scan of the whole tree, then
		// closes it.
		end := func(session string, m *record.Meta, killed bool) {
			asEnd, full, wasWatched, err := snapshot.NarrowBoth(r, m)
			if err != nil {
				t.Fatalf("seed %d turn %d: %v\n%s", seed, turn, err, strings.Join(log, "\n"))
			}
			if asEnd != full {
				b1, _ := r.LoadManifest(asEnd[0])
				a1, _ := r.LoadManifest(asEnd[1])
				b2, _ := r.LoadManifest(full[0])
				a2, _ := r.LoadManifest(full[1])
				t.Fatalf("seed %d turn %d, session %s (watched %v): the end recorded\n before %s\n after %s\nthe full scan\n before %s\n after %s\nafter:\n%s",
					seed, turn, session, wasWatched, paths(b1), paths(a1), paths(b2), paths(a2), strings.Join(log, "\n"))
			}
			if killed && wasWatched {
				t.Fatalf("seed %d turn %d: the watcher stopped during session %s's turn, yet its end was watched", seed, turn, session)
			}
			if wasWatched {
				nWatched++
			}
			if _, _, err := r.EndCheckpoint(session); err != nil {
				t.Fatalf("seed %d turn %d: end: %v", seed, turn, err)
			}
		}
		end("turn", m, killed)
		if other != nil && rnd.Intn(3) == 0 {
			end("other", other, otherKilled)
			other = nil
		}
		// A person's changes between turns, sometimes while the watcher
		// starts (the begin before started it).
		for i, n := 0, rnd.Intn(3); i < n; i++ {
			f.do()
		}
		if rnd.Intn(30) == 0 {
			if pid := watch.Pid(r.Dir); pid > 0 && watch.Running(r.Dir) {
				syscall.Kill(pid, syscall.SIGKILL)
				otherKilled = true
			}
		}
	}
	t.Logf("%d turns, %d changes, %d ends and %d begins watched; warnings: %d", turns, ops, nWatched, nBegins, len(warned))
	for _, w := range warned {
		t.Log(w)
	}
	if nWatched < turns/3 || nBegins < turns/3 {
		t.Fatalf("only %d ends and %d begins of %d turns were watched: the test tests little", nWatched, nBegins, turns)
	}
}

func paths(m record.Manifest) string {
	var out []string
	for _, e := range m {
		s := e.Path + ":" + e.Type.String()
		if e.Link != "" {
			s += "=>" + e.Link
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// A watcher whose kernel queue overflowed cannot vouch for the stretch
// it lost events in: that end reads the whole tree and says why, and the
// next turn is watched again. The queue is made small for the test
// (fs.inotify.max_queued_events, read when an inotify instance is made:
// set back as soon as the watcher has made its own), and the watcher is
// stopped (SIGSTOP) while the turn makes more changes than it holds.
func TestWatchOverflowReadsWhole(t *testing.T) {
	const knob = "/proc/sys/fs/inotify/max_queued_events"
	if !treetest.Require(t, "root", os.Geteuid() == 0, "setting "+knob+" needs root") {
		t.Skip("SNAPBACK_REQUIRE does not name root")
	}
	root := t.TempDir()
	for i := 0; i < 20; i++ {
		treetest.Write(t, root, fmt.Sprintf("d/f%02d", i), "start\n", 0o644)
	}
	r := watched(t, root)
	var warned []string
	r.Warn = func(m string) { warned = append(warned, m) }
	was, err := os.ReadFile(knob)
	treetest.Must(t, err)
	treetest.Must(t, os.WriteFile(knob, []byte("16\n"), 0o644))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			treetest.Must(t, os.WriteFile(knob, was, 0o644))
		}
	}
	defer restore()
	m, _, err := r.BeginCheckpoint("", "starts the watcher")
	treetest.Must(t, err)
	waitWatcher(t, r)
	restore()
	_, _, err = r.EndCheckpoint("")
	treetest.Must(t, err)

	m, _, err = r.BeginCheckpoint("", "overflows")
	treetest.Must(t, err)
	pid := watch.Pid(r.Dir)
	treetest.Stop(t, pid)
	for i := 0; i < 20; i++ {
		treetest.Write(t, root, fmt.Sprintf("d/f%02d", i), "turn\n", 0o644)
	}
	treetest.Must(t, syscall.Kill(pid, syscall.SIGCONT))
	asEnd, full, wasWatched, err := snapshot.NarrowBoth(r, m)
	treetest.Must(t, err)
	if wasWatched || asEnd != full {
		t.Fatalf("after an overflow: watched %v, records equal %v", wasWatched, asEnd == full)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "overflowed") {
		t.Fatalf("warnings %q, want one naming the overflow", warned)
	}
	_, _, err = r.EndCheckpoint("")
	treetest.Must(t, err)

	// A new generation vouches again, once it has added its watches.
	waitWatcher(t, r)
	m, _, err = r.BeginCheckpoint("", "watched")
	treetest.Must(t, err)
	treetest.Write(t, root, "d/f00", "again\n", 0o644)
	asEnd, full, wasWatched, err = snapshot.NarrowBoth(r, m)
	treetest.Must(t, err)
	if !wasWatched || asEnd != full {
		t.Fatalf("the turn after: watched %v, records equal %v (warnings %q)", wasWatched, asEnd == full, warned)
	}
}

// A directory that appears where the ignore rules leave it out is no
// part of a watched checkpoint, nor is anything in it, as for a scan of
// the whole tree; one that is not ignored is there with all it holds.
func TestWatchedIgnoredDirectory(t *testing.T) {
	root := t.TempDir()
	treetest.Write(t, root, "keep.txt", "k\n", 0o644)
	r := watched(t, root, "build/", "*.log")
	for i := 0; i < 2; i++ { // the first starts the watcher
		_, _, err := r.BeginCheckpoint("", "")
		treetest.Must(t, err)
		_, _, err = r.EndCheckpoint("")
		treetest.Must(t, err)
	}
	waitWatcher(t, r)
	m, _, err := r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	treetest.Must(t, os.MkdirAll(filepath.Join(root, "build", "out"), 0o755))
	treetest.Write(t, root, "build/out/a.o", "obj\n", 0o644)
	treetest.Write(t, root, "src/b.log", "log\n", 0o644)
	treetest.Write(t, root, "src/c.go", "package c\n", 0o644)
	asEnd, full, wasWatched, err := snapshot.NarrowBoth(r, m)
	treetest.Must(t, err)
	if !wasWatched {
		t.Fatal("the end was not watched: the test tests nothing")
	}
	after, err := r.LoadManifest(asEnd[1])
	treetest.Must(t, err)
	if asEnd != full || paths(after) != "src:dir src/c.go:file" {
		t.Fatalf("watched end's after: %s; equal to the full scan's: %v", paths(after), asEnd == full)
	}
}

// TestWatchedMappedWrite: a write through a shared mapping is no inotify
// event; the close is, once the file's last descriptor and mapping are
// gone. A watched end must read the file whatever the events say, as a
// scan of the whole tree does: the file mapped and its descriptor closed
// before the begin, written in the turn and unmapped before the end (the
// close is heard at the unmap); mapped in the turn, its descriptor
// closed before the write, still mapped at the end (no event: only
// watch.Writers tells); written through a mapping undone before the end
// while the descriptor stays open (the same).
func TestWatchedMappedWrite(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"a.db", "b.db", "c.db"} {
		treetest.Write(t, root, name, strings.Repeat("0", 4096), 0o644)
		old := time.Now().Add(-time.Hour)
		treetest.Must(t, os.Chtimes(filepath.Join(root, name), old, old))
	}
	r := watched(t, root)
	for i := 0; i < 2; i++ { // the first starts the watcher
		_, _, err := r.BeginCheckpoint("", "")
		treetest.Must(t, err)
		_, _, err = r.EndCheckpoint("")
		treetest.Must(t, err)
	}
	waitWatcher(t, r)
	mapFile := func(name string) (*os.File, []byte) {
		f, err := os.OpenFile(filepath.Join(root, name), os.O_RDWR, 0)
		treetest.Must(t, err)
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		treetest.Must(t, err)
		return f, b
	}
	check := func(m *record.Meta, want string) {
		t.Helper()
		asEnd, full, wasWatched, err := snapshot.NarrowBoth(r, m)
		treetest.Must(t, err)
		if !wasWatched {
			t.Fatal("the end was not watched: the test tests nothing")
		}
		after, err := r.LoadManifest(full[1])
		treetest.Must(t, err)
		if paths(after) != want {
			t.Fatalf("the full scan's after: %s, want %s", paths(after), want)
		}
		if asEnd != full {
			t.Fatalf("the watched end differs from the full scan (%s)", want)
		}
	}

	// a.db: mapped, descriptor closed, before the begin.
	f, a := mapFile("a.db")
	treetest.Must(t, f.Close())
	m, _, err := r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	copy(a, "written through a mapping")
	treetest.Must(t, syscall.Munmap(a))
	check(m, "a.db:file")
	_, _, err = r.EndCheckpoint("")
	treetest.Must(t, err)

	// b.db: mapped in the turn, descriptor closed before the write.
	m, _, err = r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	f, b := mapFile("b.db")
	treetest.Must(t, f.Close())
	copy(b, "written after the close")
	check(m, "b.db:file")
	treetest.Must(t, syscall.Munmap(b))
	_, _, err = r.EndCheckpoint("")
	treetest.Must(t, err)

	// c.db: written through a mapping undone before the end, the
	// descriptor open still.
	m, _, err = r.BeginCheckpoint("", "")
	treetest.Must(t, err)
	f, c := mapFile("c.db")
	copy(c, "mapping gone, descriptor open")
	treetest.Must(t, syscall.Munmap(c))
	check(m, "c.db:file")
	treetest.Must(t, f.Close())
}
