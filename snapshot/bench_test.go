package snapshot_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// Benchmarks of the snapshot store on a tree of small files (see also
// scripts/bench.sh for the whole CLI on a 100k-file, 1 GiB tree):
//
//	go test ./snapshot -run '^$' -bench . -benchtime 5x
//	go test ./snapshot -run '^$' -bench SnapUnchanged -cpuprofile cpu.out

const (
	benchFiles   = 10000
	benchPerDir  = 100
	benchMaxSize = 4096
)

// benchTree writes benchFiles small files (1–4 KiB, distinct contents) in
// nested directories below a fresh temp dir and returns it with the file
// paths, relative to it.
func benchTree(b *testing.B) (string, []string) {
	b.Helper()
	root := b.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, benchMaxSize)
	paths := make([]string, 0, benchFiles)
	for i := 0; i < benchFiles; i++ {
		d := i / benchPerDir
		rel := fmt.Sprintf("d%02d/e%02d/f%05d.txt", d/10, d%10, i)
		p := filepath.Join(root, rel)
		if i%benchPerDir == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		n := 1024 + r.IntN(benchMaxSize-1024)
		for j := range buf[:n] {
			buf[j] = 'a' + byte(r.IntN(26))
		}
		if err := os.WriteFile(p, buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, rel)
	}
	// The stat cache only trusts files whose ctime is safely older than the
	// moment they were hashed (50 ms with nanosecond timestamps).
	time.Sleep(100 * time.Millisecond)
	return root, paths
}

func openBenchRepo(b *testing.B, root string) *snapshot.Repo {
	b.Helper()
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true, Verb: "benchmark", LockWait: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return repo
}

// BenchmarkSnapFirst: a snapshot of a tree the store has never seen (every
// file read, hashed and stored).
func BenchmarkSnapFirst(b *testing.B) {
	root, _ := benchTree(b)
	// Earlier stores are moved aside, not deleted: on ext4 without a
	// journal, creating files right after deleting many is much slower
	// (the inode allocator skips recently deleted inodes one by one).
	aside := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i > 0 {
			if err := os.Rename(filepath.Join(root, snapshot.StoreDir), filepath.Join(aside, fmt.Sprint(i))); err != nil {
				b.Fatal(err)
			}
		}
		repo := openBenchRepo(b, root)
		b.StartTimer()
		m, err := repo.Snap(record.KindSnap, "first")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if m.Files != benchFiles || repo.LastScan.FilesRead != benchFiles {
			b.Fatalf("first snap: %d files, read %d; want %d and %d", m.Files, repo.LastScan.FilesRead, benchFiles, benchFiles)
		}
		if i == 0 {
			// What the store costs on disk against the tree (du's counts).
			size, err := repo.Size()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)/1024, "store-KiB")
			b.ReportMetric(float64(diskUsageOf(b, root))/1024, "tree-KiB")
		}
		repo.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(benchFiles), "files/op")
}

// diskUsageOf is what du counts for the tree at dir, the store left out.
func diskUsageOf(b *testing.B, dir string) int64 {
	b.Helper()
	n := int64(0)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Name() == snapshot.StoreDir {
			return filepath.SkipDir
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkSnapUnchanged: a second snapshot of an unchanged tree, which
// must not read any file.
func BenchmarkSnapUnchanged(b *testing.B) {
	root, _ := benchTree(b)
	repo := openBenchRepo(b, root)
	defer repo.Close()
	if _, err := repo.Snap(record.KindSnap, "first"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := repo.Snap(record.KindSnap, "unchanged")
		if err != nil {
			b.Fatal(err)
		}
		if repo.LastScan.FilesRead != 0 {
			b.Fatalf("unchanged snap #%d read %d files (%d bytes), want 0", i, repo.LastScan.FilesRead, repo.LastScan.BytesRead)
		}
		if m.Files != benchFiles {
			b.Fatalf("unchanged snap: %d files, want %d", m.Files, benchFiles)
		}
	}
}

// BenchmarkSnapUnchangedProgress: the same with a progress listener that
// costs what the CLI's does (a lock and a clock reading per report), to
// compare with BenchmarkSnapUnchanged: the cost of reporting progress.
func BenchmarkSnapUnchangedProgress(b *testing.B) {
	root, _ := benchTree(b)
	repo := openBenchRepo(b, root)
	defer repo.Close()
	var mu sync.Mutex
	var last snapshot.Progress
	var at time.Time
	repo.Progress = func(p snapshot.Progress) {
		mu.Lock()
		last, at = p, time.Now()
		mu.Unlock()
	}
	if _, err := repo.Snap(record.KindSnap, "first"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := repo.Snap(record.KindSnap, "unchanged"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !last.Done || last.Paths < benchFiles || at.IsZero() {
		b.Fatalf("last progress %+v, want the scan's end with at least %d paths", last, benchFiles)
	}
}

// BenchmarkUndo10: undo after editing 10 files of the tree. Untimed, each
// iteration first snaps the tree and edits 10 files; the undo must put
// back exactly their snapped contents.
func BenchmarkUndo10(b *testing.B) {
	root, paths := benchTree(b)
	repo := openBenchRepo(b, root)
	defer repo.Close()
	var edited []string
	for i := 0; i < 10; i++ {
		edited = append(edited, paths[i*len(paths)/10+7])
	}
	read := func() [][]byte {
		out := make([][]byte, len(edited))
		for i, p := range edited {
			c, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				b.Fatal(err)
			}
			out[i] = c
		}
		return out
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := repo.Snap(record.KindSnap, fmt.Sprint("before edit ", i)); err != nil {
			b.Fatal(err)
		}
		want := read()
		for _, p := range edited {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(f, "edit %d\n", i)
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if _, _, err := repo.Undo("", false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		got := read()
		for j := range got {
			if !bytes.Equal(got[j], want[j]) {
				b.Fatalf("undo #%d: %s not restored", i, edited[j])
			}
		}
		b.StartTimer()
	}
}

// editTen appends to 10 of paths, spread over the tree, a line naming
// the turn: a turn's edit in the checkpoint benchmarks.
func editTen(b *testing.B, root string, paths []string, turn int) {
	for k := 0; k < 10; k++ {
		p := filepath.Join(root, paths[(k*len(paths)/10+turn*7)%len(paths)])
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = fmt.Fprintf(f, "turn %d\n", turn)
			f.Close()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// endRecording ends session's checkpoint, which must record a step.
func endRecording(session string) func(r *snapshot.Repo) error {
	return func(r *snapshot.Repo) error {
		m, dropped, err := r.EndCheckpoint(session)
		if err == nil && (m == nil || dropped) {
			err = fmt.Errorf("end recorded nothing")
		}
		return err
	}
}

// BenchmarkCheckpoint: an agent turn's checkpoint on a tree of benchFiles
// files, each step in a fresh Repo as each is a process of its own: open
// and lock, begin, close; 10 files edited (not timed); open and lock, end,
// close. (scripts/bench-checkpoint.sh times the CLI on git repositories.)
func BenchmarkCheckpoint(b *testing.B) {
	root, paths := benchTree(b)
	step := func(fn func(r *snapshot.Repo) error) {
		r := openBenchRepo(b, root)
		defer r.Close()
		if err := fn(r); err != nil {
			b.Fatal(err)
		}
	}
	begin := func(r *snapshot.Repo) error { _, _, err := r.BeginCheckpoint("", ""); return err }
	end := endRecording("")
	edit := func(turn int) { editTen(b, root, paths, turn) }
	step(begin) // the first reads every file
	edit(0)
	step(end)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		step(begin)
		b.StopTimer()
		edit(i)
		b.StartTimer()
		step(end)
	}
}

// BenchmarkCheckpointBeside is BenchmarkCheckpoint with another
// session's checkpoint open all along the turn (opened and closed around
// it, not timed): the begin marks it, the end writes the tree it leaves
// and marks it.
func BenchmarkCheckpointBeside(b *testing.B) {
	root, paths := benchTree(b)
	step := func(fn func(r *snapshot.Repo) error) {
		r := openBenchRepo(b, root)
		defer r.Close()
		if err := fn(r); err != nil {
			b.Fatal(err)
		}
	}
	beginOf := func(s string) func(r *snapshot.Repo) error {
		return func(r *snapshot.Repo) error {
			_, _, err := r.BeginTurn(s, "", snapshot.Writes{Paths: []string{paths[0]}})
			return err
		}
	}
	begin := beginOf("B")
	end := endRecording("B")
	edit := func(turn int) { editTen(b, root, paths, turn) }
	step(begin) // the first reads every file
	edit(0)
	step(end)
	endA := func(r *snapshot.Repo) error { _, _, err := r.EndCheckpoint("A"); return err }
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		b.StopTimer()
		step(beginOf("A"))
		b.StartTimer()
		step(begin)
		b.StopTimer()
		edit(i)
		b.StartTimer()
		step(end)
		b.StopTimer()
		step(endA)
		b.StartTimer()
	}
}
