package backends_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

// fixture makes one backend's real thing for the conformance suite.
type fixture struct {
	// capability is the SNAPBACK_REQUIRE name of what the fixture needs
	// (the backend's name when empty).
	capability string
	// need reports whether the real thing is here (a server to talk to),
	// and why not; nil means the backend's Available says it all.
	need func() (bool, string)
	// setup creates a target in a fresh state and returns it.
	setup func(t *testing.T, root string) backends.Target
	// bad lists targets Check must refuse (each with ErrTarget).
	bad func(t *testing.T, root string) map[string]backends.Target
	// state fingerprints the target's data; consistent reports whether it
	// is one committed state (the writer's invariant holds).
	state func(t *testing.T, tg backends.Target, root string) (fp string, consistent bool)
	// write commits one multi-row transaction (what a live writer does).
	write func(t *testing.T, tg backends.Target, root string) error
	// absent, for a backend that can save "there is nothing yet" (a
	// database file the first migration will make), returns such a
	// target, the call that makes it (as setup does), and one that
	// reports whether it exists.
	absent func(t *testing.T, root string) (tg backends.Target, create func(), exists func() bool)
}

// fixtures maps a backend's name to its fixture; each backend's test file
// adds its own in an init function.
var fixtures = map[string]fixture{}

func init() { fixtures["sqlite"] = sqliteFixture }

// TestConformance runs every built backend through the same contract
// against the real thing: check, snapshot, change, restore, restore again,
// and a snapshot taken under a live writer restoring to one committed
// state.
func TestConformance(t *testing.T) {
	for _, b := range backends.All() {
		t.Run(b.Name(), func(t *testing.T) {
			fx, ok := fixtures[b.Name()]
			if !ok {
				t.Fatalf("backend %s has no conformance fixture", b.Name())
			}
			capability := fx.capability
			if capability == "" {
				capability = b.Name()
			}
			ok, why := b.Available()
			if ok && fx.need != nil {
				ok, why = fx.need()
			}
			if !treetest.Require(t, capability, ok, why) {
				t.Skip("SNAPBACK_REQUIRE does not name " + capability + ": " + why)
			}
			ctx := context.Background()
			root := t.TempDir()
			tg := fx.setup(t, root)
			treetest.Must(t, b.Check(ctx, tg, root))
			for name, bad := range fx.bad(t, root) {
				if err := b.Check(ctx, bad, root); !errors.Is(err, config.ErrTarget) {
					t.Errorf("Check(%s): %v, want ErrTarget", name, err)
				}
			}

			for i := 0; i < 3; i++ {
				treetest.Must(t, fx.write(t, tg, root))
			}
			before, ok := fx.state(t, tg, root)
			if !ok {
				t.Fatal("fixture state inconsistent before the snapshot")
			}
			payload := t.TempDir()
			treetest.Must(t, b.Snapshot(ctx, tg, root, payload))
			for i := 0; i < 5; i++ {
				treetest.Must(t, fx.write(t, tg, root))
			}
			if after, _ := fx.state(t, tg, root); after == before {
				t.Fatal("writes after the snapshot changed nothing")
			}
			treetest.Must(t, b.Restore(ctx, tg, root, payload))
			if got, ok := fx.state(t, tg, root); got != before || !ok {
				t.Fatalf("after restore: state %q (consistent %v), want %q", got, ok, before)
			}
			treetest.Must(t, b.Restore(ctx, tg, root, payload)) // idempotent
			if got, _ := fx.state(t, tg, root); got != before {
				t.Fatalf("after a second restore: state %q, want %q", got, before)
			}

			// A snapshot under a live writer is one committed state.
			var stop atomic.Bool
			var wg sync.WaitGroup
			var werr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if err := fx.write(t, tg, root); err != nil {
						werr = err
						return
					}
				}
			}()
			time.Sleep(50 * time.Millisecond)
			live := t.TempDir()
			err := b.Snapshot(ctx, tg, root, live)
			time.Sleep(50 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			treetest.Must(t, err)
			treetest.Must(t, werr)
			treetest.Must(t, b.Restore(ctx, tg, root, live))
			if _, ok := fx.state(t, tg, root); !ok {
				t.Fatal("a snapshot taken under a live writer restored an inconsistent state")
			}

			if fx.absent != nil {
				absentState(t, b, fx, root)
			}

			// Releasing payloads frees them, twice over; the target is
			// untouched by it.
			st, _ := fx.state(t, tg, root)
			for _, p := range []string{payload, live} {
				treetest.Must(t, b.Release(ctx, tg, root, p))
				treetest.Must(t, b.Release(ctx, tg, root, p))
			}
			if got, _ := fx.state(t, tg, root); got != st {
				t.Fatalf("Release changed the target: %q, want %q", got, st)
			}
		})
	}
}

// absentState: a target that does not exist yet is a state to save; a
// restore of it removes what was made since, twice over, and the state
// made since comes back from its own snapshot.
func absentState(t *testing.T, b backends.Backend, fx fixture, root string) {
	t.Helper()
	ctx := context.Background()
	tg, create, exists := fx.absent(t, root)
	treetest.Must(t, b.Check(ctx, tg, root))
	none := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, root, none))
	if exists() {
		t.Fatal("Snapshot of an absent target made it")
	}
	create()
	treetest.Must(t, fx.write(t, tg, root))
	made, _ := fx.state(t, tg, root)
	some := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, root, some))
	for i := 0; i < 2; i++ { // idempotent
		treetest.Must(t, b.Restore(ctx, tg, root, none))
		if exists() {
			t.Fatalf("restore %d of the absent state left the target in place", i+1)
		}
	}
	treetest.Must(t, b.Restore(ctx, tg, root, some))
	if got, ok := fx.state(t, tg, root); got != made || !ok {
		t.Fatalf("after restoring the state made since: %q (consistent %v), want %q", got, ok, made)
	}
	for _, p := range []string{none, some} {
		treetest.Must(t, b.Release(ctx, tg, root, p))
	}
}

func TestStatusesListEveryBackend(t *testing.T) {
	st := backends.Statuses()
	names := map[string]backends.Status{}
	for _, s := range st {
		names[s.Name] = s
	}
	for _, n := range []string{"sqlite", "postgres", "mysql", "docker-volume", "btrfs", "zfs", "apfs"} {
		s, ok := names[n]
		if !ok {
			t.Fatalf("backend %s not listed", n)
		}
		if !s.Available && s.Reason == "" {
			t.Errorf("backend %s unavailable without a reason", n)
		}
	}
	if !names["sqlite"].Available {
		t.Error("sqlite is pure Go: it is always available")
	}
}

// TestBackendNames: the names snapback.toml accepts are exactly the
// backends of All.
func TestBackendNames(t *testing.T) {
	var all []string
	for _, b := range backends.All() {
		all = append(all, b.Name())
	}
	accepted := append([]string{}, config.Backends...)
	sort.Strings(accepted)
	if strings.Join(all, ",") != strings.Join(accepted, ",") {
		t.Fatalf("backends built: %v; names snapback.toml accepts: %v", all, accepted)
	}
}

func TestGetUnknown(t *testing.T) {
	if _, err := backends.Get("oracle"); !errors.Is(err, config.ErrTarget) {
		t.Fatalf("Get(oracle): %v", err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	treetest.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	treetest.Must(t, os.WriteFile(p, []byte(s), 0o644))
}
