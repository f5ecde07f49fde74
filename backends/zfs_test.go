package backends_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

// zfsPool makes a pool on a sparse file in a temp dir, mounted below it,
// destroyed when the test ends; it returns the pool's name.
func zfsPool(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img := filepath.Join(dir, "pool.img")
	f, err := os.Create(img)
	treetest.Must(t, err)
	treetest.Must(t, f.Truncate(256<<20))
	treetest.Must(t, f.Close())
	pool := fmt.Sprintf("snapbacktest%d", os.Getpid())
	if out, err := exec.Command("zpool", "create", "-m", filepath.Join(dir, "mnt"), pool, img).CombinedOutput(); err != nil {
		t.Fatalf("zpool create: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("zpool", "destroy", "-f", pool).CombinedOutput(); err != nil {
			t.Errorf("zpool destroy: %v\n%s", err, out)
		}
	})
	return pool
}

func zfsCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("zfs", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func zfsMountpoint(t *testing.T, ds string) string {
	t.Helper()
	return zfsCmd(t, "get", "-H", "-o", "value", "mountpoint", ds)
}

// zfsTarget makes a pool with one dataset for the tree writer.
func zfsTarget(t *testing.T) backends.Target {
	t.Helper()
	pool := zfsPool(t)
	zfsCmd(t, "create", pool+"/data")
	return backends.Target{Backend: "zfs", Dataset: pool + "/data"}
}

func init() {
	var pool string
	fixtures["zfs"] = fixture{
		setup: func(t *testing.T, root string) backends.Target {
			tg := zfsTarget(t)
			pool, _, _ = strings.Cut(tg.Dataset, "/")
			return tg
		},
		bad: func(t *testing.T, root string) map[string]backends.Target {
			zfsCmd(t, "snapshot", pool+"/data@bad")
			return map[string]backends.Target{
				"missing":    {Backend: "zfs", Dataset: pool + "/nope"},
				"a snapshot": {Backend: "zfs", Dataset: pool + "/data@bad"},
				"a path":     {Backend: "zfs", Dataset: "/" + pool + "/data"},
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
	pool, _, _ := strings.Cut(tg.Dataset, "/")
	if got := zfsCmd(t, "list", "-H", "-o", "name", "-t", "all", "-r", pool); got != pool+"\n"+tg.Dataset {
		t.Fatalf("after releasing everything the pool holds:\n%s", got)
	}
}
