package backends

import "context"

// Postgres is the postgres backend (being built: every call refuses).
type Postgres struct{}

var _ Backend = (*Postgres)(nil)

// Name implements Backend.
func (*Postgres) Name() string { return "postgres" }

// Available implements Backend.
func (*Postgres) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*Postgres) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*Postgres) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*Postgres) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*Postgres) Release(context.Context, Target, string, string) error { return nil }
