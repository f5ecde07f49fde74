package isolation

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	got := strings.Join(Names(), ",")
	if got != "auto,overlayfs,fuse,zfs,btrfs,apfs,copy" {
		t.Fatalf("names %s: auto first, then the order auto tries", got)
	}
	if Find(Auto) != nil || Find("warp") != nil || Find(Copy) == nil {
		t.Fatal("Find: auto and unknown names are no mode; copy is one")
	}
}

// TestShapes: every mode of the table has one shape or none (not built
// yet), and a tree mode that snapshots can also drop its snapshot.
func TestShapes(t *testing.T) {
	for _, m := range All {
		if m.View != nil && m.Tree != nil {
			t.Errorf("%s: both a view and a tree mode", m.Name)
		}
		if m.Tree != nil && (m.Tree.Snapshot == nil) != (m.Tree.Drop == nil) {
			t.Errorf("%s: a snapshot without its drop, or the other way round", m.Name)
		}
	}
	if m := Find(Copy); m.Tree == nil || m.Tree.Check != nil {
		t.Error("copy: a tree mode that works everywhere")
	}
}

// works is a check that passes the modes named in ok (with their limits).
func works(ok map[string]string) Check {
	return func(m *Mode, root string) Verdict {
		limit, found := ok[m.Name]
		if !found {
			return Verdict{Why: m.Name + " does not work under " + root}
		}
		return Verdict{OK: true, Limit: limit}
	}
}

// TestPick with checks that stand for the real ones (package runner's).
func TestPick(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   map[string]string
		want string
	}{
		{"", map[string]string{Copy: ""}, "copy"},
		{"auto", map[string]string{Copy: ""}, "copy"},
		{"copy", map[string]string{Copy: ""}, "copy"},
		{"auto", map[string]string{Btrfs: "", Copy: ""}, "btrfs"}, // the views do not work: the next that does
		{"warp", nil, "error: unknown mode (one of auto, overlayfs, fuse, zfs, btrfs, apfs, copy)"},
		{"fuse", map[string]string{Copy: ""}, "error: fuse does not work under /nowhere"},
		// auto passes over a view that works with a limit for a later
		// view that works without one, but takes it before any mode that
		// runs on the tree itself.
		{"auto", map[string]string{Overlayfs: "no directory renames", Btrfs: ""}, "overlayfs"},
		{"auto", map[string]string{Overlayfs: "no directory renames", Fuse: "", Btrfs: ""}, "fuse"},
		{"auto", map[string]string{Overlayfs: "no directory renames", Fuse: "no directory renames"}, "overlayfs"},
		// On a ZFS dataset where neither overlay works, the zfs view
		// comes before btrfs and copy.
		{"auto", map[string]string{Zfs: "", Btrfs: "", Copy: ""}, "zfs"},
		{"auto", map[string]string{Overlayfs: "no directory renames", Zfs: "", Copy: ""}, "zfs"},
	} {
		got := ""
		if m, err := Pick(c.name, "/nowhere", works(c.ok)); err != nil {
			got = "error: " + err.Error()
		} else {
			got = m.Name
		}
		if got != c.want {
			t.Errorf("Pick(%q) with %v working = %s, want %s", c.name, c.ok, got, c.want)
		}
	}
}

// TestPickUnbuilt: a mode of the list that this build lacks is refused
// by name, listing those it has.
func TestPickUnbuilt(t *testing.T) {
	built := []string{Auto}
	var unbuilt []string
	for _, m := range All {
		if m.Built() {
			built = append(built, m.Name)
		} else {
			unbuilt = append(unbuilt, m.Name)
		}
	}
	for _, name := range unbuilt {
		want := "not available in this build (available: " + strings.Join(built, ", ") + ")"
		if _, err := Pick(name, "/nowhere", works(nil)); err == nil || err.Error() != want {
			t.Errorf("Pick(%q) = %v, want %s", name, err, want)
		}
	}
}
