package runner

import (
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
)

// The modes this package drives say whether they work here; the others
// of isolation.All are not built.
func init() {
	// The view modes try the real thing on the project's own filesystem:
	// inside a container whose root is overlayfs, the kernel has overlayfs
	// but refuses a layer there.
	isolation.ProvideLimited(isolation.Overlayfs, func(root string) isolation.Verdict {
		ok, why, limit := overlay.TrialLimit(root)
		return isolation.Verdict{OK: ok, Why: why, Limit: limit}
	})
	isolation.Provide(isolation.Fuse, fuse.Trial)
	isolation.Provide(isolation.Btrfs, fsutil.IsSubvolume)
}
