package backends

import "context"

// APFS is the apfs backend (being built: every call refuses).
type APFS struct{}

var _ Backend = (*APFS)(nil)

// Name implements Backend.
func (*APFS) Name() string { return "apfs" }

// Available implements Backend.
func (*APFS) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*APFS) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*APFS) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*APFS) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*APFS) Release(context.Context, Target, string, string) error { return nil }
