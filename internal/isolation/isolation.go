// Package isolation is the one list of the isolation modes of `snapback
// run`: their names, the order `auto` tries them in, whether the command
// works in a view of the tree or on the tree itself, and whether each
// works here (with the reason when it does not). Config validation, run,
// doctor and shell completion all read it.
//
// It is a leaf, because config (which validates mode names) sits below
// the packages that implement the modes: those provide their availability
// checks ([Provide]) from package runner, which drives the modes. A mode
// without a check is not built.
package isolation

import (
	"fmt"
	"strings"
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

// Mode is one isolation mode.
type Mode struct {
	Name string
	// View: the command works in a copy-on-write view of the tree, so its
	// changes can wait for review or be thrown away unseen; otherwise it
	// changes the tree itself, after a snapshot.
	View bool
	Help string // one line, for shell completion
}

// All lists the modes in the order auto tries them: the views first, the
// cheapest snapshot next, the copy last (it always works).
var All = []Mode{
	{Name: Overlayfs, View: true, Help: "kernel overlayfs view of the tree"},
	{Name: Fuse, View: true, Help: "FUSE overlay view of the tree"},
	{Name: Btrfs, Help: "btrfs snapshot of the subvolume, then the tree itself"},
	{Name: Apfs, Help: "APFS clone, then the tree itself"},
	{Name: Zfs, Help: "ZFS snapshot, then the tree itself"},
	{Name: Copy, Help: "snapshot into the store, then the tree itself"},
}

// Check reports whether a mode works for the project at root, and why not.
type Check func(root string) (bool, string)

// Verdict is whether a mode works for a project (OK), what was tried or
// why it does not (Why), and, for one that works, what it cannot do there
// (Limit, "" when nothing: an ordinary user's overlayfs cannot rename(2) a
// directory that existed before the run).
type Verdict struct {
	OK         bool
	Why, Limit string
}

// LimitedCheck is a Check that also says what a mode cannot do.
type LimitedCheck func(root string) Verdict

var checks = map[string]LimitedCheck{Copy: func(string) Verdict { return Verdict{OK: true} }}

// Provide sets the availability check of a mode of [All].
func Provide(name string, c Check) {
	ProvideLimited(name, func(root string) Verdict {
		ok, why := c(root)
		return Verdict{OK: ok, Why: why}
	})
}

// ProvideLimited sets the check of a mode of [All] that may work with a
// limit.
func ProvideLimited(name string, c LimitedCheck) {
	if Find(name) == nil {
		panic("isolation: no mode " + name)
	}
	checks[name] = c
}

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
	for i := range All {
		if All[i].Name == name {
			return &All[i]
		}
	}
	return nil
}

// Built reports whether this build implements the mode.
func (m *Mode) Built() bool { return checks[m.Name] != nil }

// Available reports whether the mode works for the project at root, and
// why not.
func (m *Mode) Available(root string) (bool, string) {
	v := m.Check(root)
	return v.OK, v.Why
}

// Check is the mode's verdict for the project at root.
func (m *Mode) Check(root string) Verdict {
	c := checks[m.Name]
	if c == nil {
		return Verdict{Why: "not built yet"}
	}
	return c(root)
}

// Pick resolves name ("" means auto) for the project at root: auto takes
// the first mode that works here, but a view with a limit (Verdict.Limit)
// gives way to a later view that works without one; a mode named
// explicitly that cannot work is an error, never a silent fallback, so
// that a user who asked for isolation knows.
func Pick(name, root string) (*Mode, error) {
	if name == "" || name == Auto {
		var limited *Mode
		for i := range All {
			m := &All[i]
			if limited != nil && !m.View {
				break // a limited view still beats no view
			}
			v := m.Check(root)
			if !v.OK {
				continue
			}
			if v.Limit == "" || !m.View {
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
		var built []string
		for _, n := range Names() {
			if n == Auto || Find(n).Built() {
				built = append(built, n)
			}
		}
		return nil, fmt.Errorf("not available in this build (available: %s)", strings.Join(built, ", "))
	}
	if ok, why := m.Available(root); !ok {
		return nil, fmt.Errorf("%s", why)
	}
	return m, nil
}
