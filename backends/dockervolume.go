package backends

import "context"

// DockerVolume is the docker-volume backend (being built: every call refuses).
type DockerVolume struct{}

var _ Backend = (*DockerVolume)(nil)

// Name implements Backend.
func (*DockerVolume) Name() string { return "docker-volume" }

// Available implements Backend.
func (*DockerVolume) Available() (bool, string) { return false, "not built yet" }

// Check implements Backend.
func (*DockerVolume) Check(context.Context, Target, string) error { return ErrNotBuilt }

// Snapshot implements Backend.
func (*DockerVolume) Snapshot(context.Context, Target, string, string) error { return ErrNotBuilt }

// Restore implements Backend.
func (*DockerVolume) Restore(context.Context, Target, string, string) error { return ErrNotBuilt }

// Release implements Backend.
func (*DockerVolume) Release(context.Context, Target, string, string) error { return nil }
