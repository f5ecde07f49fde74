package backends

import "context"

// ZFS is the zfs backend (being built: every call refuses).
type ZFS struct{}

var _ Backend = (*ZFS)(nil)

// Name implements Backend.
func (*ZFS) Name() string { return "zfs" }

// Available implements Backend.
func (*ZFS) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*ZFS) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*ZFS) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*ZFS) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*ZFS) Release(context.Context, Target, string, string) error { return nil }
