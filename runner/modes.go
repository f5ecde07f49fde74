package runner

import (
	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner/isolation"
)

// The modes this package drives say whether they work here; the others
// of isolation.All are not built.
func init() {
	isolation.Provide(isolation.Overlayfs, func(string) (bool, string) { return overlay.Available() })
	isolation.Provide(isolation.Fuse, func(string) (bool, string) { return fuse.Available() })
	isolation.Provide(isolation.Btrfs, backends.IsSubvolume)
}
