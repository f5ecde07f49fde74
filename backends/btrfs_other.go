//go:build !linux

package backends

import "context"

const btrfsUnavailable = "btrfs is Linux only"

// Available implements Backend.
func (*Btrfs) Available() (bool, string) { return false, btrfsUnavailable }

// Check implements Backend.
func (*Btrfs) Check(_ context.Context, t Target, _ string) error {
	return targetErr(t, btrfsUnavailable)
}

// Snapshot implements Backend.
func (b *Btrfs) Snapshot(ctx context.Context, t Target, root, _ string) error {
	return b.Check(ctx, t, root)
}

// Restore implements Backend.
func (b *Btrfs) Restore(ctx context.Context, t Target, root, _ string) error {
	return b.Check(ctx, t, root)
}

// Release implements Backend: nothing can have been snapshotted here.
func (*Btrfs) Release(context.Context, Target, string, string) error { return nil }
