package runner

import (
	"os"
	"os/exec"

	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/overlay/zfs"
)

// Check is the verdict of a mode of isolation.All for the project at
// root. A view is tried for real on the project's own filesystem: inside
// a container whose root is overlayfs, the kernel has overlayfs but
// refuses a layer there. A tree mode asks its own check.
func Check(m *isolation.Mode, root string) isolation.Verdict {
	switch {
	case m.View != nil && m.View.ZFS:
		ok, why := zfs.Check(root)
		return isolation.Verdict{OK: ok, Why: why}
	case m.View != nil && m.View.FUSE:
		ok, why := fuse.Trial(root)
		return isolation.Verdict{OK: ok, Why: why}
	case m.View != nil:
		ok, why, limit := overlay.TrialLimit(root)
		return isolation.Verdict{OK: ok, Why: why, Limit: limit}
	case m.Tree != nil && m.Tree.Check != nil:
		ok, why := m.Tree.Check(root)
		return isolation.Verdict{OK: ok, Why: why}
	case m.Tree != nil:
		return isolation.Verdict{OK: true}
	}
	return isolation.Verdict{Why: "not built yet"}
}

// Pick resolves a mode's name ("" or auto: the first that works here) for
// the project at root (isolation.Pick, with the real checks).
func Pick(name, root string) (*isolation.Mode, error) {
	return isolation.Pick(name, root, Check)
}

// view is a view mode's session: it prepares the command's process to
// start in the view and takes it down after.
type view interface {
	Prepare(*exec.Cmd) error
	Signal(signal os.Signal) error
	Finish() error
}

// newView starts the session of view mode m (the zfs view is overlay's
// helper and init, with spec.Bind the view).
func newView(m *isolation.Mode, spec overlay.Spec) view {
	if m.View.FUSE {
		return fuse.NewSession(spec)
	}
	return overlay.NewSession(spec)
}
