package fsutil_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// TestZFSMountLock: a zfs command that may mount a dataset waits for the
// zfs mount lock (here held by the test), one that only reads does not;
// released, the command runs. (zfs-fuse loses its mounts when two are
// made at once: docs/modes.md.)
func TestZFSMountLock(t *testing.T) {
	ds := treetest.ZFS(t)
	f, err := os.OpenFile(fsutil.ZFSMountLock, os.O_RDWR|os.O_CREATE, 0o644)
	treetest.Must(t, err)
	defer f.Close()
	treetest.Must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = fsutil.ZFS(ctx, "create", ds+"/child")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), fsutil.ZFSMountLock) {
		t.Fatalf("zfs create with the lock held elsewhere: want a wait for %s ended by the deadline, got %v", fsutil.ZFSMountLock, err)
	}
	if out, err := fsutil.ZFS(context.Background(), "list", "-H", "-o", "name", "-r", ds); err != nil || out != ds {
		t.Fatalf("zfs list with the lock held elsewhere: %q, %v (want %s alone: the create did not run)", out, err, ds)
	}

	treetest.Must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	if _, err := fsutil.ZFS(context.Background(), "create", ds+"/child"); err != nil {
		t.Fatalf("zfs create with the lock free: %v", err)
	}
	// The command held the lock while it ran and let go when it ended.
	treetest.Must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	treetest.Must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
}
