package backends_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

// The tree writer's invariant, for backends of directory trees: each
// transaction is a directory txn-<k> holding two row files and a counter
// (the total number of rows so far), written and fsynced under a
// temporary name and committed by one rename. A state is consistent when the transactions are
// 1..N without gaps, every row holds its number, and the last counter
// equals the number of rows.
func treeWrite(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "txn-") {
			n++
		}
	}
	tmp := filepath.Join(dir, ".tmp-txn")
	if err := os.RemoveAll(tmp); err != nil { // an uncommitted transaction
		return err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]int{"a": 2*n + 1, "b": 2*n + 2, "counter": 2*n + 2} {
		if err := writeSynced(filepath.Join(tmp, name), strconv.Itoa(v)); err != nil {
			return err
		}
	}
	return os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("txn-%06d", n+1)))
}

// writeSynced writes a file and fsyncs it, as an application does before
// it commits: a filesystem snapshot, like a crash, may catch data not yet
// written back.
func writeSynced(p, s string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func treeState(t *testing.T, dir string) (string, bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	treetest.Must(t, err)
	rows, counter, ok := 0, 0, true
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "txn-") {
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "txn-"))
		ok = ok && err == nil && k == counter/2+1
		for i, row := range []string{"a", "b"} {
			data, err := os.ReadFile(filepath.Join(dir, e.Name(), row))
			ok = ok && err == nil && string(data) == strconv.Itoa(2*k+i-1)
			if err == nil {
				rows++
			}
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "counter"))
		if err == nil {
			counter, err = strconv.Atoi(string(data))
		}
		ok = ok && err == nil
	}
	return fmt.Sprintf("counter=%d rows=%d", counter, rows), ok && counter == rows
}

// btrfsSubvolume makes a subvolume at p with the btrfs tool (btrfs-progs,
// the package mkfs.btrfs comes in).
func btrfsSubvolume(t testing.TB, p string) {
	t.Helper()
	treetest.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	if out, err := exec.Command("btrfs", "subvolume", "create", p).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create %s: %v\n%s", p, err, out)
	}
}

func btrfsSnapshotCmd(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume snapshot %s %s: %v\n%s", src, dst, err, out)
	}
}

var btrfsMnt string // the conformance run's filesystem, made by setup

func init() {
	fixtures["btrfs"] = fixture{
		setup: func(t *testing.T, root string) backends.Target {
			btrfsMnt = treetest.Btrfs(t, 256)
			p := filepath.Join(btrfsMnt, "projects", "data")
			btrfsSubvolume(t, p)
			return backends.Target{Backend: "btrfs", Path: p}
		},
		bad: func(t *testing.T, root string) map[string]backends.Target {
			treetest.Must(t, os.Mkdir(filepath.Join(btrfsMnt, "plain"), 0o755))
			treetest.Must(t, os.Mkdir(filepath.Join(root, "elsewhere"), 0o755))
			writeFile(t, filepath.Join(btrfsMnt, "file"), "x")
			return map[string]backends.Target{
				"plain directory": {Backend: "btrfs", Path: filepath.Join(btrfsMnt, "plain")},
				"not on btrfs":    {Backend: "btrfs", Path: "elsewhere"},
				"missing":         {Backend: "btrfs", Path: filepath.Join(btrfsMnt, "nope")},
				"a file":          {Backend: "btrfs", Path: filepath.Join(btrfsMnt, "file")},
				"mount point":     {Backend: "btrfs", Path: btrfsMnt},
				"no path":         {Backend: "btrfs"},
			}
		},
		state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
			return treeState(t, tg.Path)
		},
		write: func(t *testing.T, tg backends.Target, root string) error {
			return treeWrite(tg.Path)
		},
	}
}

// btrfsTarget mounts a fresh btrfs with one subvolume holding a few
// transactions of the tree writer.
func btrfsTarget(t *testing.T) (*backends.Btrfs, backends.Target) {
	t.Helper()
	b := &backends.Btrfs{}
	ok, why := b.Available()
	if !treetest.Require(t, "btrfs", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name it: " + why)
	}
	mnt := treetest.Btrfs(t, 256)
	p := filepath.Join(mnt, "data")
	btrfsSubvolume(t, p)
	for i := 0; i < 3; i++ {
		treetest.Must(t, treeWrite(p))
	}
	return b, backends.Target{Backend: "btrfs", Path: p}
}

// restoreName is the name a restore (btrfs, apfs) gives its copy beside
// the target.
func restoreName(p string) string {
	sum := sha256.Sum256([]byte(p))
	return filepath.Join(filepath.Dir(p), ".snapback-restore-"+hex.EncodeToString(sum[:8]))
}

func btrfsPayloadSnapshot(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "btrfs.json"))
	treetest.Must(t, err)
	var m struct{ Snapshot string }
	treetest.Must(t, json.Unmarshal(data, &m))
	return m.Snapshot
}

// TestBtrfsRestoreExact: a restore brings back the tree exactly (contents,
// modes, times) and drops what was made after the snapshot.
func TestBtrfsRestoreExact(t *testing.T) {
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	treetest.Tricky(t, tg.Path, 1<<20)
	want := treetest.Capture(t, tg.Path)
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	writeFile(t, filepath.Join(tg.Path, "new", "file"), "made after the snapshot")
	writeFile(t, filepath.Join(tg.Path, "plain.txt"), "changed")
	treetest.Must(t, os.RemoveAll(filepath.Join(tg.Path, "deep")))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	treetest.Equal(t, "after restore", want, treetest.Capture(t, tg.Path))
	if _, err := os.Lstat(restoreName(tg.Path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the old subvolume is still there: %v", err)
	}
}

// TestBtrfsPathNeverMissing: a reader stat-ing the path during restores
// never finds it missing.
func TestBtrfsPathNeverMissing(t *testing.T) {
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	var stop atomic.Bool
	var stats, missing atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := os.Stat(filepath.Join(tg.Path, "txn-000001", "counter")); err != nil {
					missing.Add(1)
				}
				stats.Add(1)
			}
		}()
	}
	for i := 0; i < 30; i++ {
		treetest.Must(t, treeWrite(tg.Path))
		treetest.Must(t, b.Restore(ctx, tg, "", payload))
	}
	stop.Store(true)
	wg.Wait()
	if missing.Load() > 0 || stats.Load() < 100 {
		t.Fatalf("%d of %d stats found the path missing", missing.Load(), stats.Load())
	}
	t.Logf("%d stats during 30 restores, none missing", stats.Load())
}

// TestBtrfsInterruptedRestore: the states a kill can leave a restore in
// are finished by the next Restore.
func TestBtrfsInterruptedRestore(t *testing.T) {
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	want, _ := treeState(t, tg.Path)
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	tmp := restoreName(tg.Path)

	// Killed after making the writable copy, before the swap.
	treetest.Must(t, treeWrite(tg.Path))
	btrfsSnapshotCmd(t, btrfsPayloadSnapshot(t, payload), tmp)
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got, _ := treeState(t, tg.Path); got != want {
		t.Fatalf("after the copy was left: %s, want %s", got, want)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the leftover copy is still there: %v", err)
	}

	// Killed after the swap, before deleting the old subvolume: the old
	// one holds a later state under the restore name.
	btrfsSnapshotCmd(t, tg.Path, tmp)
	treetest.Must(t, treeWrite(tmp))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got, _ := treeState(t, tg.Path); got != want {
		t.Fatalf("after the old subvolume was left: %s, want %s", got, want)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the old subvolume is still there: %v", err)
	}

	// Release also deletes an old subvolume left behind.
	btrfsSnapshotCmd(t, tg.Path, tmp)
	treetest.Must(t, b.Release(ctx, tg, "", payload))
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Release left the old subvolume: %v", err)
	}
}

// TestBtrfsKilledRestore: a restore SIGKILLed at any point leaves the path
// with the old state or the restored one, and the next Restore finishes
// the job. The test binary is the restoring process.
func TestBtrfsKilledRestore(t *testing.T) {
	if arg := os.Getenv("SNAPBACK_BTRFS_RESTORE"); arg != "" {
		dir, p, _ := strings.Cut(arg, "\n")
		os.Stdout.WriteString("go\n")
		treetest.Must(t, (&backends.Btrfs{}).Restore(context.Background(), backends.Target{Backend: "btrfs", Path: p}, "", dir))
		return
	}
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	want, _ := treeState(t, tg.Path)
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	const runs = 40
	killed, swapped, leftover := 0, 0, 0
	for i := 0; i < runs; i++ {
		treetest.Must(t, treeWrite(tg.Path))
		before, _ := treeState(t, tg.Path)
		cmd := exec.Command(os.Args[0], "-test.run=^TestBtrfsKilledRestore$")
		cmd.Env = append(os.Environ(), "SNAPBACK_BTRFS_RESTORE="+payload+"\n"+tg.Path)
		out, err := cmd.StdoutPipe()
		treetest.Must(t, err)
		treetest.Must(t, cmd.Start())
		buf := make([]byte, 3)
		_, err = out.Read(buf)
		treetest.Must(t, err)
		time.Sleep(time.Duration(i%10) * 300 * time.Microsecond)
		treetest.Must(t, cmd.Process.Kill())
		if err := cmd.Wait(); err != nil {
			killed++
		}
		got, ok := treeState(t, tg.Path)
		if !ok || got != want && got != before {
			t.Fatalf("after a kill: %s (consistent %v), want %s or %s", got, ok, before, want)
		}
		if got == want {
			swapped++
		}
		if _, err := os.Lstat(restoreName(tg.Path)); err == nil {
			leftover++
		}
		treetest.Must(t, b.Restore(ctx, tg, "", payload))
		if got, _ := treeState(t, tg.Path); got != want {
			t.Fatalf("after the rerun: %s, want %s", got, want)
		}
		if _, err := os.Lstat(restoreName(tg.Path)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after the rerun the old subvolume is still there: %v", err)
		}
	}
	if killed == 0 {
		t.Fatal("no restore was killed")
	}
	t.Logf("%d of %d restores killed; after the kill %d had swapped, %d left a restore subvolume", killed, runs, swapped, leftover)
}

// TestBtrfsRestoreMissingTarget: a subvolume deleted since is made anew.
func TestBtrfsRestoreMissingTarget(t *testing.T) {
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	want, _ := treeState(t, tg.Path)
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	if out, err := exec.Command("btrfs", "subvolume", "delete", tg.Path).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume delete: %v\n%s", err, out)
	}
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got, _ := treeState(t, tg.Path); got != want {
		t.Fatalf("after restore: %s, want %s", got, want)
	}
	treetest.Must(t, b.Check(ctx, tg, ""))
}

// TestBtrfsRelease: Release deletes the read-only snapshot and its hidden
// directory once empty, and keeps the other payloads' snapshots.
func TestBtrfsRelease(t *testing.T) {
	ctx := context.Background()
	b, tg := btrfsTarget(t)
	one, two := t.TempDir(), t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	s1, s2 := btrfsPayloadSnapshot(t, one), btrfsPayloadSnapshot(t, two)
	if s1 == s2 || filepath.Dir(s1) != filepath.Join(filepath.Dir(tg.Path), ".snapback-snapshots") {
		t.Fatalf("snapshots at %s and %s", s1, s2)
	}
	if err := os.WriteFile(filepath.Join(s1, "x"), nil, 0o644); err == nil {
		t.Fatal("the snapshot is writable")
	}
	treetest.Must(t, b.Release(ctx, tg, "", one))
	if _, err := os.Lstat(s1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("released snapshot still there: %v", err)
	}
	if _, err := os.Lstat(s2); err != nil {
		t.Fatalf("the other snapshot: %v", err)
	}
	treetest.Must(t, b.Release(ctx, tg, "", two))
	treetest.Must(t, b.Release(ctx, tg, "", two))
	if _, err := os.Lstat(filepath.Dir(s1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the hidden directory is still there: %v", err)
	}
	// A payload whose snapshot failed before btrfs.json: nothing to free.
	treetest.Must(t, b.Release(ctx, tg, "", t.TempDir()))
}

// TestBtrfsCheckErrors: each refusal is one line naming the path.
func TestBtrfsCheckErrors(t *testing.T) {
	b, tg := btrfsTarget(t)
	ctx := context.Background()
	mnt := filepath.Dir(tg.Path)
	treetest.Must(t, os.Mkdir(filepath.Join(mnt, "plain"), 0o755))
	for p, want := range map[string]string{
		filepath.Join(mnt, "plain"): "not a btrfs subvolume",
		t.TempDir():                 "not on btrfs",
		filepath.Join(mnt, "nope"):  "does not exist",
		mnt:                         "mount point",
	} {
		err := b.Check(ctx, backends.Target{Backend: "btrfs", Path: p}, "")
		if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%s): %v, want one line with %q", p, err, want)
		}
	}
}

// BenchmarkBtrfs times a snapshot and a restore of the subvolume named by
// SNAPBACK_BENCH_BTRFS (scripts/bench-btrfs.sh makes one).
func BenchmarkBtrfs(bm *testing.B) {
	p := os.Getenv("SNAPBACK_BENCH_BTRFS")
	if p == "" {
		bm.Skip("SNAPBACK_BENCH_BTRFS names no subvolume")
	}
	ctx := context.Background()
	b := &backends.Btrfs{}
	tg := backends.Target{Backend: "btrfs", Path: p}
	var snap, restore, release time.Duration
	for i := 0; i < bm.N; i++ {
		payload := bm.TempDir()
		start := time.Now()
		treetest.Must(bm, b.Snapshot(ctx, tg, "", payload))
		snap += time.Since(start)
		start = time.Now()
		treetest.Must(bm, b.Restore(ctx, tg, "", payload))
		restore += time.Since(start)
		start = time.Now()
		treetest.Must(bm, b.Release(ctx, tg, "", payload))
		release += time.Since(start)
	}
	n := float64(bm.N)
	bm.ReportMetric(snap.Seconds()/n, "snapshot-s")
	bm.ReportMetric(restore.Seconds()/n, "restore-s")
	bm.ReportMetric(release.Seconds()/n, "release-s")
}
