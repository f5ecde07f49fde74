//go:build !darwin

package backends

import "context"

const apfsUnavailable = "APFS is macOS only"

// Available implements Backend.
func (*APFS) Available() (bool, string) { return false, apfsUnavailable }

// Check implements Backend.
func (*APFS) Check(_ context.Context, t Target, _ string) error {
	return targetErr(t, apfsUnavailable)
}

// Snapshot implements Backend.
func (a *APFS) Snapshot(ctx context.Context, t Target, root, _ string) error {
	return a.Check(ctx, t, root)
}

// Restore implements Backend.
func (a *APFS) Restore(ctx context.Context, t Target, root, _ string) error {
	return a.Check(ctx, t, root)
}

// Release implements Backend: nothing can have been snapshotted here.
func (*APFS) Release(context.Context, Target, string, string) error { return nil }
