package backends

import "context"

// MySQL is the mysql backend (being built: every call refuses).
type MySQL struct{}

var _ Backend = (*MySQL)(nil)

// Name implements Backend.
func (*MySQL) Name() string { return "mysql" }

// Available implements Backend.
func (*MySQL) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*MySQL) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*MySQL) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*MySQL) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*MySQL) Release(context.Context, Target, string, string) error { return nil }
