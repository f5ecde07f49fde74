package backends_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
)

// zfsCmd runs zfs as snapback does: a command that may mount runs under
// the zfs mount lock, and one that changes the pool is retried while
// zfs-fuse says a dataset is busy (fsutil.ZFSChange; a mount namespace
// another test made meanwhile holds a copy of every mount).
func zfsCmd(t *testing.T, args ...string) string {
	t.Helper()
	run := fsutil.ZFS
	if args[0] != "list" && args[0] != "get" {
		run = func(ctx context.Context, args ...string) (string, error) {
			return fsutil.ZFSChange(ctx, 30*time.Second, args...)
		}
	}
	out, err := run(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func zfsMountpoint(t *testing.T, ds string) string {
	t.Helper()
	return zfsCmd(t, "get", "-H", "-o", "value", "mountpoint", ds)
}

// zfsTarget makes a fresh dataset for the tree writer in the test pool.
func zfsTarget(t *testing.T) backends.Target {
	t.Helper()
	return backends.Target{Backend: "zfs", Dataset: treetest.ZFS(t)}
}

func init() {
	var ds string
	fixtures["zfs"] = fixture{
		setup: func(t *testing.T, root string) backends.Target {
			tg := zfsTarget(t)
			ds = tg.Dataset
			return tg
		},
		bad: func(t *testing.T, root string) map[string]backends.Target {
			zfsCmd(t, "snapshot", ds+"@bad")
			return map[string]backends.Target{
				"missing":    {Backend: "zfs", Dataset: ds + "-nope"},
				"a snapshot": {Backend: "zfs", Dataset: ds + "@bad"},
				"a path":     {Backend: "zfs", Dataset: "/" + ds},
				"no dataset": {Backend: "zfs"},
			}
		},
		state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
			return treeState(t, zfsMountpoint(t, tg.Dataset))
		},
		write: func(t *testing.T, tg backends.Target, root string) error {
			return treeWrite(zfsMountpoint(t, tg.Dataset))
		},
	}
}

// TestZFSWithoutZFS: where zfs is missing, the backend says why, and Check
// refuses with one line naming the dataset; bad settings are refused
// before that.
func TestZFSWithoutZFS(t *testing.T) {
	b := &backends.ZFS{}
	ctx := context.Background()
	for ds, want := range map[string]string{
		"":             "no dataset",
		"/tank/app":    "not a dataset name",
		"tank/app@now": "not a dataset name",
		"tank//app":    "not a dataset name",
	} {
		err := b.Check(ctx, backends.Target{Backend: "zfs", Dataset: ds}, "")
		if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q): %v, want ErrTarget with %q", ds, err, want)
		}
	}
	// zfs missing for real, for this process, even where it is installed.
	t.Setenv("PATH", t.TempDir())
	ok, why := b.Available()
	if ok {
		t.Fatal("Available() with no zfs on PATH")
	}
	if why == "" {
		t.Fatal("unavailable without a reason")
	}
	tg := backends.Target{Backend: "zfs", Dataset: "tank/app"}
	for name, err := range map[string]error{
		"Check":    b.Check(ctx, tg, ""),
		"Snapshot": b.Snapshot(ctx, tg, "", t.TempDir()),
		"Restore":  b.Restore(ctx, tg, "", t.TempDir()),
	} {
		if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), why) ||
			!strings.Contains(err.Error(), "tank/app") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with ErrTarget, the dataset and %q", name, err, why)
		}
	}
	// An empty payload holds nothing to free.
	treetest.Must(t, b.Release(ctx, tg, "", t.TempDir()))
}

// TestZFSRestoreKeepsNewerSnapshots: restoring an older snapshot keeps the
// newer ones restorable (undo, then redo), and releasing every payload
// leaves only the dataset.
func TestZFSRestoreKeepsNewerSnapshots(t *testing.T) {
	b := &backends.ZFS{}
	ok, why := b.Available()
	if !treetest.Require(t, "zfs", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name it: " + why)
	}
	ctx := context.Background()
	tg := zfsTarget(t)
	write := func() {
		t.Helper()
		treetest.Must(t, treeWrite(zfsMountpoint(t, tg.Dataset)))
	}
	state := func() string {
		t.Helper()
		s, ok := treeState(t, zfsMountpoint(t, tg.Dataset))
		if !ok {
			t.Fatalf("inconsistent state %s", s)
		}
		return s
	}
	write()
	one, two := t.TempDir(), t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	s1 := state()
	write()
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	s2 := state()
	write()
	for i, step := range []struct {
		dir, want string
	}{{one, s1}, {two, s2}, {one, s1}, {one, s1}, {two, s2}} {
		treetest.Must(t, b.Restore(ctx, tg, "", step.dir))
		if got := state(); got != step.want {
			t.Fatalf("restore %d: %s, want %s", i, got, step.want)
		}
		write()
	}
	treetest.Must(t, b.Release(ctx, tg, "", one))
	treetest.Must(t, b.Release(ctx, tg, "", two))
	treetest.Must(t, b.Release(ctx, tg, "", two))
	parent := path.Dir(tg.Dataset)
	if got := zfsCmd(t, "list", "-H", "-o", "name", "-t", "all", "-r", parent); got != parent+"\n"+tg.Dataset {
		t.Fatalf("after releasing everything the pool holds:\n%s", got)
	}
}

// zfsRequire skips or fails (per SNAPBACK_REQUIRE) where zfs does not
// answer.
func zfsRequire(t *testing.T) {
	t.Helper()
	ok, why := (&backends.ZFS{}).Available()
	if !treetest.Require(t, "zfs", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name zfs: " + why)
	}
}

// zfsDatasets lists the datasets and snapshots beside and below ds (those
// of its parent), one per line, with each one's guid.
func zfsDatasets(t *testing.T, ds string) string {
	t.Helper()
	return zfsCmd(t, "get", "-H", "-p", "-r", "-o", "name,value", "guid", path.Dir(ds))
}

// TestZFSRollbackNewest: restoring the newest snapshot rolls the dataset
// back in place: the same dataset (its guid), still mounted, with a file
// held open in it the whole time; the older snapshot is kept.
func TestZFSRollbackNewest(t *testing.T) {
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	tg := zfsTarget(t)
	mnt := zfsMountpoint(t, tg.Dataset)
	treetest.Must(t, treeWrite(mnt))
	one, two := t.TempDir(), t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	treetest.Must(t, treeWrite(mnt))
	want, _ := treeState(t, mnt)
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	guid := zfsCmd(t, "get", "-H", "-p", "-o", "value", "guid", tg.Dataset)
	held, err := os.Open(filepath.Join(mnt, "txn-000001", "a"))
	treetest.Must(t, err)
	defer held.Close()
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, b.Restore(ctx, tg, "", two))
	if got, ok := treeState(t, mnt); got != want || !ok {
		t.Fatalf("after the rollback: %s (consistent %v), want %s", got, ok, want)
	}
	if g := zfsCmd(t, "get", "-H", "-p", "-o", "value", "guid", tg.Dataset); g != guid {
		t.Fatalf("the dataset was replaced (guid %s, was %s): not a rollback", g, guid)
	}
	if n := strings.Count(zfsCmd(t, "list", "-H", "-o", "name", "-t", "snapshot", "-d", "1", tg.Dataset), "\n") + 1; n != 2 {
		t.Fatalf("%d snapshots after the rollback, want 2", n)
	}
	if _, err := held.Stat(); err != nil {
		t.Fatalf("the file held open: %v", err)
	}
}

// TestZFSChildren: a dataset with a child is snapshotted alone (the
// child is another target's business); the newest snapshot rolls back
// the parent and leaves the child's data; an older one, which would take
// a swap that moves the child away, is refused in one line naming the
// dataset, and nothing changes.
func TestZFSChildren(t *testing.T) {
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	tg := zfsTarget(t)
	mnt := zfsMountpoint(t, tg.Dataset)
	zfsCmd(t, "create", tg.Dataset+"/child")
	child := zfsMountpoint(t, tg.Dataset+"/child")
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, treeWrite(child))
	one, two := t.TempDir(), t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	want, _ := treeState(t, mnt)
	if snaps := zfsCmd(t, "list", "-H", "-o", "name", "-t", "snapshot", "-r", tg.Dataset+"/child"); snaps != "" {
		t.Fatalf("the child was snapshotted: %s", snaps)
	}
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, treeWrite(child))
	childState, _ := treeState(t, child)
	treetest.Must(t, b.Restore(ctx, tg, "", two))
	if got, _ := treeState(t, mnt); got != want {
		t.Fatalf("after restoring the newest: %s, want %s", got, want)
	}
	if got, _ := treeState(t, child); got != childState {
		t.Fatalf("the child after the parent's rollback: %s, want %s", got, childState)
	}
	treetest.Must(t, treeWrite(mnt))
	before, _ := treeState(t, mnt)
	pool := zfsDatasets(t, tg.Dataset)
	err := b.Restore(ctx, tg, "", one)
	if err == nil || !strings.Contains(err.Error(), tg.Dataset) || !strings.Contains(err.Error(), "children") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restoring an older snapshot of a dataset with children: %v, want one line naming it and its children", err)
	}
	if got, _ := treeState(t, mnt); got != before {
		t.Fatalf("after the refused restore: %s, want %s", got, before)
	}
	if got := zfsDatasets(t, tg.Dataset); got != pool {
		t.Fatalf("the refused restore changed the pool:\n%s\nwas\n%s", got, pool)
	}
	treetest.Must(t, b.Release(ctx, tg, "", one))
	treetest.Must(t, b.Release(ctx, tg, "", two))
}

// zfsTwoSnapshots writes the dataset mounted at mnt, snapshots it into
// payload one, writes and snapshots it again into two, and returns both
// payloads and the states each holds.
func zfsTwoSnapshots(t *testing.T, b *backends.ZFS, tg backends.Target, mnt string) (one, two, state1, state2 string) {
	t.Helper()
	ctx := context.Background()
	one, two = t.TempDir(), t.TempDir()
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	state1, _ = treeState(t, mnt)
	treetest.Must(t, treeWrite(mnt))
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	state2, _ = treeState(t, mnt)
	return one, two, state1, state2
}

// TestZFSBusy: a process with a file open in the dataset (and its working
// directory there). The newest snapshot still restores (a rollback needs
// no unmount); an older one, whose swap must unmount the dataset, fails
// in one line naming the dataset and changes nothing: same data, same
// dataset, mounted, its snapshots and canmount as they were, no clone
// left. Once the process is gone the same restore goes through.
func TestZFSBusy(t *testing.T) {
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	tg := zfsTarget(t)
	mnt := zfsMountpoint(t, tg.Dataset)
	one, two, want1, want2 := zfsTwoSnapshots(t, b, tg, mnt)
	treetest.Must(t, treeWrite(mnt))

	busy := exec.Command("sh", "-c", "exec 3<txn-000001/a; read _")
	busy.Dir = mnt
	stdin, err := busy.StdinPipe()
	treetest.Must(t, err)
	treetest.Must(t, busy.Start())
	defer func() { stdin.Close(); busy.Wait() }()

	treetest.Must(t, b.Restore(ctx, tg, "", two))
	if got, _ := treeState(t, mnt); got != want2 {
		t.Fatalf("the rollback of a busy dataset: %s, want %s", got, want2)
	}
	treetest.Must(t, treeWrite(mnt))
	before, _ := treeState(t, mnt)
	pool := zfsDatasets(t, tg.Dataset)
	canmount := zfsCmd(t, "get", "-H", "-o", "value,source", "canmount,mounted", tg.Dataset)
	err = b.Restore(ctx, tg, "", one)
	if err == nil || !strings.Contains(err.Error(), tg.Dataset) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a swap of a busy dataset: %v, want one line naming it", err)
	}
	t.Log(err)
	if got, ok := treeState(t, mnt); got != before || !ok {
		t.Fatalf("after the failed swap: %s (consistent %v), want %s", got, ok, before)
	}
	if got := zfsDatasets(t, tg.Dataset); got != pool {
		t.Fatalf("the failed swap changed the pool:\n%s\nwas\n%s", got, pool)
	}
	if got := zfsCmd(t, "get", "-H", "-o", "value,source", "canmount,mounted", tg.Dataset); got != canmount {
		t.Fatalf("after the failed swap canmount, mounted: %q, want %q", got, canmount)
	}
	stdin.Close()
	busy.Wait()
	treetest.Must(t, b.Restore(ctx, tg, "", one))
	if got, _ := treeState(t, mnt); got != want1 {
		t.Fatalf("the swap once the dataset was free: %s, want %s", got, want1)
	}
	treetest.Must(t, b.Restore(ctx, tg, "", two)) // the newer one is still there
	if got, _ := treeState(t, mnt); got != want2 {
		t.Fatalf("the newer snapshot after the swap: %s, want %s", got, want2)
	}
}

// TestZFSKilledRestore kills a restore that must swap (newer snapshots
// exist) before each zfs command that changes the pool in turn, 1, 2, …
// until one completes (the kill seam, SNAPBACK_KILL_AT, counted by
// fsutil.Mutating). After each kill the dataset holds the state before
// the restore or the restored one, or, killed between the unmount and
// the mount of the swap, is not mounted; the next restore finishes the
// job and leaves no clone behind, be it a rerun of the same restore or
// (every other kill point) a restore of another snapshot, which first
// undoes or finishes what the killed one left. The test binary is the
// restoring process.
func TestZFSKilledRestore(t *testing.T) {
	if zfsChild(t) {
		return
	}
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	tg := zfsTarget(t)
	mnt := zfsMountpoint(t, tg.Dataset)
	one, two, want, want2 := zfsTwoSnapshots(t, b, tg, mnt)
	outcomes := map[string]int{}
	for k := 1; ; k++ {
		treetest.Must(t, b.Restore(ctx, tg, "", two)) // one is older again: its restore swaps
		treetest.Must(t, treeWrite(mnt))
		before, _ := treeState(t, mnt)
		killed := zfsKilled(t, "TestZFSKilledRestore", "restore", tg.Dataset, one, k)
		mounted, _ := exec.Command("zfs", "get", "-H", "-o", "value", "mounted", tg.Dataset).Output()
		outcome := "unmounted"
		if strings.TrimSpace(string(mounted)) == "yes" {
			got, ok := treeState(t, mnt)
			switch {
			case !ok:
				t.Fatalf("kill point %d: inconsistent: %s", k, got)
			case got == before:
				outcome = "before"
			case got == want:
				outcome = "restored"
			default:
				t.Fatalf("kill point %d: %s, want %s (before) or %s (restored)", k, got, before, want)
			}
		}
		outcomes[outcome]++
		next, nextWant := one, want
		if k%2 == 0 {
			next, nextWant = two, want2
		}
		treetest.Must(t, b.Restore(ctx, tg, "", next))
		if got, _ := treeState(t, mnt); got != nextWant {
			t.Fatalf("kill point %d: after the next restore: %s, want %s", k, got, nextWant)
		}
		if got := zfsCmd(t, "get", "-H", "-o", "value", "canmount,mounted", tg.Dataset); got != "on\nyes" {
			t.Fatalf("kill point %d: after the rerun canmount, mounted: %q", k, got)
		}
		if strings.Contains(zfsDatasets(t, tg.Dataset), ".snapback-restore") {
			t.Fatalf("kill point %d: the rerun left the clone:\n%s", k, zfsDatasets(t, tg.Dataset))
		}
		if !killed {
			t.Logf("%d kill points, each finished by the next restore; after the kill: %v", k-1, outcomes)
			break
		}
	}
	treetest.Must(t, b.Release(ctx, tg, "", one))
	treetest.Must(t, b.Release(ctx, tg, "", two))
	parent := path.Dir(tg.Dataset)
	if got := zfsCmd(t, "list", "-H", "-o", "name", "-t", "all", "-r", parent); got != parent+"\n"+tg.Dataset {
		t.Fatalf("after releasing everything the pool holds:\n%s", got)
	}
}

// zfsChild is the child of a kill test, when SNAPBACK_ZFS_CHILD names
// its operation (restore or snapshot), dataset and payload directory: it
// does the operation with the kill seam armed and reports true.
func zfsChild(t *testing.T) bool {
	arg := os.Getenv("SNAPBACK_ZFS_CHILD")
	if arg == "" {
		return false
	}
	fsutil.EnableTestSeams()
	f := strings.Split(arg, "\n")
	b, tg := &backends.ZFS{}, backends.Target{Backend: "zfs", Dataset: f[1]}
	op := b.Restore
	if f[0] == "snapshot" {
		op = b.Snapshot
	}
	treetest.Must(t, op(context.Background(), tg, "", f[2]))
	return true
}

// zfsKilled runs the test binary's test as the child doing op on ds with
// dir, killed before its k-th state-changing call; it reports whether it
// was killed (false: it completed).
func zfsKilled(t *testing.T, test, op, ds, dir string, k int) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "SNAPBACK_ZFS_CHILD="+op+"\n"+ds+"\n"+dir, fmt.Sprintf("SNAPBACK_KILL_AT=%d", k))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
	if err != nil && !killed {
		t.Fatalf("kill point %d: %s: %v\n%s", k, op, err, out)
	}
	return killed
}

// TestZFSKilledSnapshot kills a snapshot before each state-changing call
// in turn (the zfs snapshot, then the writes of zfs.json): the dataset is
// untouched, and releasing the payload, complete or not, leaves no
// snapshot behind.
func TestZFSKilledSnapshot(t *testing.T) {
	if zfsChild(t) {
		return
	}
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	tg := zfsTarget(t)
	mnt := zfsMountpoint(t, tg.Dataset)
	treetest.Must(t, treeWrite(mnt))
	want, _ := treeState(t, mnt)
	for k := 1; ; k++ {
		payload := t.TempDir()
		killed := zfsKilled(t, "TestZFSKilledSnapshot", "snapshot", tg.Dataset, payload, k)
		if got, _ := treeState(t, mnt); got != want {
			t.Fatalf("kill point %d: the snapshot changed the dataset: %s, want %s", k, got, want)
		}
		if !killed {
			treetest.Must(t, b.Restore(ctx, tg, "", payload))
		}
		treetest.Must(t, b.Release(ctx, tg, "", payload))
		if snaps := zfsCmd(t, "list", "-H", "-o", "name", "-t", "snapshot", "-r", path.Dir(tg.Dataset)); snaps != "" {
			t.Fatalf("kill point %d: released, yet left:\n%s", k, snaps)
		}
		if !killed {
			t.Logf("%d kill points, each released", k-1)
			return
		}
	}
}

// BenchmarkZFS times the zfs target on the dataset SNAPBACK_BENCH_ZFS
// names (scripts/bench-zfs.sh makes one): a snapshot, its restore while
// it is the newest (a rollback), and, once a newer snapshot exists, its
// restore by the promoted-clone swap; then the release of both.
func BenchmarkZFS(bm *testing.B) {
	ds := os.Getenv("SNAPBACK_BENCH_ZFS")
	if ds == "" {
		bm.Skip("SNAPBACK_BENCH_ZFS names no dataset")
	}
	ctx := context.Background()
	b := &backends.ZFS{}
	tg := backends.Target{Backend: "zfs", Dataset: ds}
	var snap, rollback, swap, release time.Duration
	for i := 0; i < bm.N; i++ {
		one, two := bm.TempDir(), bm.TempDir()
		start := time.Now()
		treetest.Must(bm, b.Snapshot(ctx, tg, "", one))
		snap += time.Since(start)
		start = time.Now()
		treetest.Must(bm, b.Restore(ctx, tg, "", one))
		rollback += time.Since(start)
		treetest.Must(bm, b.Snapshot(ctx, tg, "", two))
		start = time.Now()
		treetest.Must(bm, b.Restore(ctx, tg, "", one))
		swap += time.Since(start)
		start = time.Now()
		treetest.Must(bm, b.Release(ctx, tg, "", two))
		treetest.Must(bm, b.Release(ctx, tg, "", one))
		release += time.Since(start)
	}
	n := float64(bm.N)
	bm.ReportMetric(snap.Seconds()/n, "snapshot-s")
	bm.ReportMetric(rollback.Seconds()/n, "rollback-s")
	bm.ReportMetric(swap.Seconds()/n, "swap-s")
	bm.ReportMetric(release.Seconds()/n, "release-s")
}

// TestZFSSwapKeepsProperties: the dataset a swap puts in place has the
// local properties the dataset had (its own mountpoint, compression, a
// user property, canmount) and is mounted where it was; the clone is
// never mounted on the way (zfs-fuse mounts a new clone even with
// canmount=noauto).
func TestZFSSwapKeepsProperties(t *testing.T) {
	zfsRequire(t)
	b := &backends.ZFS{}
	ctx := context.Background()
	own := filepath.Join(t.TempDir(), "own") // made first: removed after the dataset is destroyed
	tg := zfsTarget(t)
	zfsCmd(t, "set", "mountpoint="+own, tg.Dataset)
	zfsCmd(t, "set", "compression=on", tg.Dataset)
	zfsCmd(t, "set", "org.example:note=kept", tg.Dataset)
	props := "mountpoint,compression,org.example:note,canmount,mounted"
	want := zfsCmd(t, "get", "-H", "-o", "property,value,source", props, tg.Dataset)
	treetest.Must(t, treeWrite(own))
	one, two := t.TempDir(), t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", one))
	state, _ := treeState(t, own)
	treetest.Must(t, treeWrite(own))
	treetest.Must(t, b.Snapshot(ctx, tg, "", two))
	treetest.Must(t, b.Restore(ctx, tg, "", one))
	if got := zfsCmd(t, "get", "-H", "-o", "property,value,source", props, tg.Dataset); got != want {
		t.Fatalf("after the swap:\n%s\nwant\n%s", got, want)
	}
	if got, _ := treeState(t, own); got != state {
		t.Fatalf("after the swap %s holds %s, want %s", own, got, state)
	}
	if out, _ := exec.Command("findmnt", "-n", "-o", "SOURCE", own).Output(); strings.TrimSpace(string(out)) != tg.Dataset {
		t.Fatalf("%s is a mount of %q, want %s alone", own, out, tg.Dataset)
	}
}
