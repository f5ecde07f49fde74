package backends

import "context"

// Btrfs is the btrfs backend (being built: every call refuses).
type Btrfs struct{}

var _ Backend = (*Btrfs)(nil)

// Name implements Backend.
func (*Btrfs) Name() string { return "btrfs" }

// Available implements Backend.
func (*Btrfs) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*Btrfs) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*Btrfs) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*Btrfs) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*Btrfs) Release(context.Context, Target, string, string) error { return nil }
