//go:build linux

package fuse

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// A listing's attributes on demand.
//
// The kernel asks for every listing with READDIRPLUS, which may carry
// each entry's attributes: the kernel then makes the entry's dentry and
// inode, and a later stat or open of the name needs no LOOKUP. Finding
// those attributes is most of what a listing costs the server (a fstatat
// and a node per entry) and the kernel (a dentry and an inode per
// entry), and many listings never use them: `find`, `git status`'s walk
// for untracked files, a shell's globbing read only names and types.
// So an entry carries its attributes only where they will likely be
// used; without them (node id 0) the kernel shows the name and type and
// looks the name up when something asks (fuse_direntplus_link):
//   - an entry the server already has a node for carries none: the
//     kernel has it already (or looks it up again);
//   - a directory always carries them: a walk goes into it next (so
//     does an entry whose type the listing does not say);
//   - any other entry carries them when the caller (the thread that
//     reads the listing) has been seen looking up a name in a
//     directory whose listing left attributes out: a caller that stats
//     or opens what it lists (`tar`, `ls -l`, `grep -r`) pays one
//     directory's lookups and then gets attributes with its listings.
//
// Only how many requests a walk takes depends on these guesses, never
// what it sees.

// Readdirent remembers the entry it gives: the READDIRPLUS that asked
// for it looks it up next (Lookup).
func (d *dirHandle) Readdirent(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	e, errno := d.FileHandle.(fs.FileReaddirenter).Readdirent(ctx)
	if e != nil {
		d.last = *e
	}
	return e, errno
}

// errNoAttr leaves an entry of a READDIRPLUS without attributes: go-fuse
// then answers the entry with node id 0.
const errNoAttr = syscall.EAGAIN

// Lookup is READDIRPLUS's lookup of each entry it lists (fs.FileLookuper).
func (d *dirHandle) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.n.GetChild(name) != nil {
		return nil, errNoAttr
	}
	// The entry's type from the listing: unknown where go-fuse replays
	// an interrupted listing (without Readdirent) or the layer's
	// filesystem has no d_type; then it carries attributes.
	var typ uint32
	if d.last.Name == name {
		typ = d.last.Mode & syscall.S_IFMT
	}
	if typ != 0 && typ != syscall.S_IFDIR && !d.n.ov.statters.has(ctx) {
		d.n.listedBare.Store(true)
		return nil, errNoAttr
	}
	return d.n.lookup(ctx, name, out)
}

// callers is a set of requests' callers (thread ids, as the kernel
// gives them), kept small: when full it starts again.
type callers struct {
	mu  sync.Mutex
	ids map[uint32]struct{}
}

const maxCallers = 4096

// callerOf is the request's caller; 0 stands for every caller outside
// the PID namespace of the view's mount.
func callerOf(ctx context.Context) uint32 {
	if c, ok := ctx.(*gofuse.Context); ok { // go-fuse's bridge passes no other
		return c.Caller.Pid
	}
	return 0
}

func (c *callers) add(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil || len(c.ids) >= maxCallers {
		c.ids = map[uint32]struct{}{}
	}
	c.ids[callerOf(ctx)] = struct{}{}
}

func (c *callers) has(ctx context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, has := c.ids[callerOf(ctx)]
	return has
}
