package fsutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ZFS runs the zfs command (the zfs target's and the zfs view's one way
// to it); its output is trimmed, its error the command and the first line
// zfs printed. A command that may mount a dataset runs under the
// machine's zfs mount lock ([ZFSMountLock]).
func ZFS(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "zfs", args...)
	if len(args) > 0 && mounting[args[0]] {
		lock, err := lockMounts(ctx)
		if err != nil {
			return "", fmt.Errorf("zfs %s: %w", strings.Join(args, " "), err)
		}
		if lock != nil {
			defer lock.Close()
			// The command holds the lock too, for as long as it runs: a
			// snapback killed meanwhile does not let the next mount
			// start beside it.
			cmd.ExtraFiles = []*os.File{lock}
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		return "", fmt.Errorf("zfs %s: %s (%w)", strings.Join(args, " "), msg, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// ZFSMountLock is the file whose lock (flock) every zfs command that may
// mount a dataset is run under, machine-wide, by snapback and its tests:
// no two run at once. zfs-fuse (0.7) hands each new mount to the threads
// that serve its requests as two writes on one pipe, so two mounts at the
// same moment can interleave them; the reader then takes a mount point's
// bytes for a length, waits for ever on the pipe, and holds the lock its
// request threads all need: every zfs-fuse mount stops answering, for
// good (seen here, the reader in read(2) for 758 MB). Where the lock
// cannot be made (no root), commands run without it.
const ZFSMountLock = "/run/snapback/zfs-mount.lock"

// mounting names the zfs subcommands that may mount a dataset.
var mounting = map[string]bool{
	"create": true, "clone": true, "mount": true, "receive": true, "recv": true,
	"rename": true, "set": true, "inherit": true, "rollback": true, "promote": true,
}

// lockMounts takes the zfs mount lock, waiting while another holds it
// (until ctx ends); nil where the lock cannot be made.
func lockMounts(ctx context.Context) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(ZFSMountLock), 0o755); err != nil {
		return nil, nil
	}
	f, err := os.OpenFile(ZFSMountLock, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, nil
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", ZFSMountLock, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ZFSChange runs a zfs command that changes the pool, the kill test's
// seam first ([Mutating]). zfs-fuse lets go of a dataset only a moment
// after unmounting it (to a destroy, which unmounts first, too),
// answering "dataset is busy" meanwhile: the command is retried every
// 50 ms for up to wait.
func ZFSChange(ctx context.Context, wait time.Duration, args ...string) (string, error) {
	Mutating()
	for until := time.Now().Add(wait); ; {
		out, err := ZFS(ctx, args...)
		if err == nil || !strings.Contains(err.Error(), "dataset is busy") || time.Now().After(until) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
