// Package isolation is the one table of the isolation modes of `snapback
// run` ([All]): their names, the order `auto` tries them in, and each
// mode's shape, which says how a run in it works:
//
//   - a view mode ([View]: overlayfs, fuse, zfs) runs the command in a
//     copy-on-write view of the tree; its writes land in an upper layer
//     of overlayfs's format (the zfs mode's, once the command has ended,
//     from its clone), which commit, diff and discard read into a
//     changeset, whichever view wrote it;
//   - a tree mode ([Tree]: btrfs, copy) runs the command on the tree
//     itself, after a snapshot of it, and narrows the run's record
//     afterwards to the paths that differ from the snapshot.
//
// A tree mode's row holds its mechanism (fsutil's filesystem primitives);
// a view's is in package overlay, overlay/fuse or overlay/zfs, chosen by
// [View.FUSE] and [View.ZFS].
// Package runner tries each mode for real ([Pick] takes its check);
// config, doctor and shell completion read the names. It imports only
// fsutil, so that config can read the names without the views.
package isolation

import (
	"fmt"
	"strings"

	"github.com/snapback/snapback/fsutil"
)

// Mode names.
const (
	Auto      = "auto" // the first mode that works here, in the order of [All]
	Overlayfs = "overlayfs"
	Fuse      = "fuse"
	Btrfs     = "btrfs"
	Apfs      = "apfs"
	Zfs       = "zfs"
	Copy      = "copy"
)

// Mode is one isolation mode: a view mode (View set) or a tree mode (Tree
// set). A mode with neither is not built yet.
type Mode struct {
	Name string
	Help string // one line, for shell completion
	View *View
	Tree *Tree
}

// View is a view mode's shape: the command's changes can wait for review
// or be thrown away unseen. What serves the view is the kernel's
// overlayfs (package overlay), with FUSE snapback's own FUSE overlay
// (package overlay/fuse), or with ZFS a clone of the project's dataset
// (package overlay/zfs), whose differences from the snapshot it was
// cloned from become the upper layer once the command has ended; all run
// the command under the same PID-1 init.
type View struct{ FUSE, ZFS bool }

// Tree is a tree mode's shape: the command changes the tree itself, and
// the run's record is made from a snapshot taken before it.
//
// Without Snapshot (the copy mode) that snapshot is the store: the tree
// is read into it before the command (what is unchanged since the last
// snapshot is not read again), and read again after it. With Snapshot, a
// copy-on-write snapshot of the root is taken at a new directory of the
// store, whatever the tree's size, and compared with the tree by stat
// alone: the snapshot must keep each file's inode number and times (a
// btrfs snapshot and a zfs clone do), so that an untouched file looks the
// same in both. Only the paths that differ are then read. Drop deletes
// the snapshot once the record is written; a missing one is no error.
type Tree struct {
	// Check says whether the mode works for the project at root, and why
	// not; nil: it works everywhere.
	Check    func(root string) (ok bool, why string)
	Snapshot func(root, dir string) error
	Drop     func(dir string) error
}

// All lists the modes in the order auto tries them: the views first (the
// zfs view, which compares its clone by stat after the command, beside
// btrfs), the cheapest snapshot next, the copy last (it always works). Adding a mode
// is one row here, and its mechanism's file.
var All = []*Mode{
	{Name: Overlayfs, Help: "kernel overlayfs view of the tree", View: &View{}},
	{Name: Fuse, Help: "FUSE overlay view of the tree", View: &View{FUSE: true}},
	{Name: Zfs, Help: "ZFS clone of the dataset as the view", View: &View{ZFS: true}},
	{Name: Btrfs, Help: "btrfs snapshot of the subvolume, then the tree itself",
		Tree: &Tree{Check: fsutil.IsSubvolume, Snapshot: fsutil.SubvolSnapshot, Drop: fsutil.SubvolDelete}},
	{Name: Apfs, Help: "APFS clone, then the tree itself"},
	{Name: Copy, Help: "snapshot into the store, then the tree itself", Tree: &Tree{}},
}

// Verdict is whether a mode works for a project (OK), what was tried or
// why it does not (Why), and, for one that works, what it cannot do there
// (Limit, "" when nothing: an ordinary user's overlayfs cannot rename(2) a
// directory that existed before the run).
type Verdict struct {
	OK         bool
	Why, Limit string
}

// Check is a mode's verdict for the project at root (package runner's
// tries the real thing).
type Check func(m *Mode, root string) Verdict

// Names lists every name a user may give, auto first.
func Names() []string {
	out := []string{Auto}
	for _, m := range All {
		out = append(out, m.Name)
	}
	return out
}

// Find returns the mode of that name, or nil (auto is no mode).
func Find(name string) *Mode {
	for _, m := range All {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Built reports whether this build implements the mode.
func (m *Mode) Built() bool { return m.View != nil || m.Tree != nil }

// Pick resolves name ("" means auto) for the project at root, asking check
// whether a mode works: auto takes the first mode that works here, but a
// view with a limit (Verdict.Limit) gives way to a later view that works
// without one; a mode named explicitly that cannot work is an error,
// never a silent fallback, so that a user who asked for isolation knows.
// check is only asked about modes that are built.
func Pick(name, root string, check Check) (*Mode, error) {
	if name == "" || name == Auto {
		var limited *Mode
		for _, m := range All {
			if limited != nil && m.View == nil {
				break // a limited view still beats no view
			}
			if !m.Built() {
				continue
			}
			v := check(m, root)
			if !v.OK {
				continue
			}
			if v.Limit == "" || m.View == nil {
				return m, nil
			}
			if limited == nil {
				limited = m
			}
		}
		if limited != nil {
			return limited, nil
		}
		return nil, fmt.Errorf("no isolation mode works here") // copy always does
	}
	m := Find(name)
	if m == nil {
		return nil, fmt.Errorf("unknown mode (one of %s)", strings.Join(Names(), ", "))
	}
	if !m.Built() {
		built := []string{Auto}
		for _, b := range All {
			if b.Built() {
				built = append(built, b.Name)
			}
		}
		return nil, fmt.Errorf("not available in this build (available: %s)", strings.Join(built, ", "))
	}
	if v := check(m, root); !v.OK {
		return nil, fmt.Errorf("%s", v.Why)
	}
	return m, nil
}
