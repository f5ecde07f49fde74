//go:build !darwin

package backends_test

import (
	"context"
	"errors"
	"testing"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

// TestAPFSElsewhere: off macOS the backend says why it cannot work and
// refuses every target with ErrTarget.
func TestAPFSElsewhere(t *testing.T) {
	b := &backends.APFS{}
	if ok, why := b.Available(); ok || why != "APFS is macOS only" {
		t.Fatalf("Available() = %v, %q", ok, why)
	}
	tg := backends.Target{Backend: "apfs", Path: t.TempDir()}
	for name, err := range map[string]error{
		"Check":    b.Check(context.Background(), tg, ""),
		"Snapshot": b.Snapshot(context.Background(), tg, "", t.TempDir()),
		"Restore":  b.Restore(context.Background(), tg, "", t.TempDir()),
	} {
		if !errors.Is(err, config.ErrTarget) {
			t.Errorf("%s: %v, want ErrTarget", name, err)
		}
	}
	treetest.Must(t, b.Release(context.Background(), tg, "", t.TempDir()))
}
