package isolation

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	got := strings.Join(Names(), ",")
	if got != "auto,overlayfs,fuse,btrfs,apfs,zfs,copy" {
		t.Fatalf("names %s: auto first, then the order auto tries", got)
	}
	if Find(Auto) != nil || Find("warp") != nil || Find(Copy) == nil {
		t.Fatal("Find: auto and unknown names are no mode; copy is one")
	}
}

// TestPick without package runner linked: only copy is built here, and
// checks provided in the test stand for the real ones.
func TestPick(t *testing.T) {
	defer func(saved map[string]LimitedCheck) { checks = saved }(checks)
	checks = map[string]LimitedCheck{Copy: checks[Copy]}
	pick := func(name string) string {
		m, err := Pick(name, "/nowhere")
		if err != nil {
			return "error: " + err.Error()
		}
		return m.Name
	}
	for _, c := range []struct{ name, want string }{
		{"", "copy"},
		{"auto", "copy"},
		{"copy", "copy"},
		{"warp", "error: unknown mode (one of auto, overlayfs, fuse, btrfs, apfs, zfs, copy)"},
		{"zfs", "error: not available in this build (available: auto, copy)"},
	} {
		if got := pick(c.name); got != c.want {
			t.Errorf("Pick(%q) = %s, want %s", c.name, got, c.want)
		}
	}
	Provide(Fuse, func(root string) (bool, string) { return false, "no /dev/fuse under " + root })
	Provide(Btrfs, func(string) (bool, string) { return true, "" })
	for _, c := range []struct{ name, want string }{
		{"auto", "btrfs"}, // fuse does not work: the next that does
		{"fuse", "error: no /dev/fuse under /nowhere"},
		{"overlayfs", "error: not available in this build (available: auto, fuse, btrfs, copy)"},
	} {
		if got := pick(c.name); got != c.want {
			t.Errorf("Pick(%q) = %s, want %s", c.name, got, c.want)
		}
	}
	if ok, why := Find(Zfs).Available("/"); ok || why != "not built yet" {
		t.Errorf("zfs: available %v, %q; want no, not built yet", ok, why)
	}
}

// TestPickLimited: auto passes over a view that works with a limit for a
// later view that works without one, but takes it before any mode that
// runs on the tree itself.
func TestPickLimited(t *testing.T) {
	defer func(saved map[string]LimitedCheck) { checks = saved }(checks)
	checks = map[string]LimitedCheck{Copy: checks[Copy]}
	limited := func(string) Verdict { return Verdict{OK: true, Limit: "no directory renames"} }
	ProvideLimited(Overlayfs, limited)
	Provide(Btrfs, func(string) (bool, string) { return true, "" })
	pick := func() string {
		m, err := Pick(Auto, "/p")
		if err != nil {
			return "error: " + err.Error()
		}
		return m.Name
	}
	if got := pick(); got != Overlayfs {
		t.Errorf("auto with fuse unbuilt = %s, want overlayfs (a limited view before btrfs)", got)
	}
	Provide(Fuse, func(string) (bool, string) { return true, "" })
	if got := pick(); got != Fuse {
		t.Errorf("auto = %s, want fuse (a view without the limit)", got)
	}
	ProvideLimited(Fuse, limited)
	if got := pick(); got != Overlayfs {
		t.Errorf("auto with both limited = %s, want overlayfs (the first)", got)
	}
	Provide(Fuse, func(string) (bool, string) { return false, "no" })
	if got := pick(); got != Overlayfs {
		t.Errorf("auto with fuse failing = %s, want overlayfs", got)
	}
}

func TestProvideUnknown(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Provide of a mode not in the list did not panic")
		}
	}()
	Provide("warp", nil)
}
