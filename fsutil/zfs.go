package fsutil

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// ZFS runs the zfs command (the zfs target's and the zfs view's one way
// to it); its output is trimmed, its error the command and the first line
// zfs printed.
func ZFS(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "zfs", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		return "", fmt.Errorf("zfs %s: %s (%w)", strings.Join(args, " "), msg, err)
	}
	return strings.TrimSpace(string(out)), nil
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
