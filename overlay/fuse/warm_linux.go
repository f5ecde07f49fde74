//go:build linux

package fuse

import (
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// warmState is what a view kept across runs adds to the node tree. The
// kernel keeps what it cached of the view (entries, attributes, pages,
// listings) for an hour; between two runs everything the cache may hold
// wrongly is taken back from it:
//
//   - every path of the ending run's upper layer (the next run has a new,
//     empty one), at the run's end (forgetUpper);
//   - every path the watcher heard change in the lower tree (the run's
//     commit, anyone else's edits), when the next run begins (changed);
//   - every lower hard link: a write through another name in another
//     directory is heard there only.
//
// Taking a path back retires its node and every node below it: their
// inode numbers get a new generation, so the next lookup makes new
// nodes (go-fuse would otherwise hand back the node of the same inode
// number, with its state from the last run), and the kernel drops the
// entry and its directory's listing and attributes.
type warmState struct {
	on    bool // a kept view (set before it serves)
	mu    sync.Mutex
	regen map[uint64]uint64      // the view's inode number -> the generation its next node gets
	links map[*fs.Inode]struct{} // lower hard links looked up since the last run ended
}

// genOf is the generation a new node of inode number ino gets.
func (w *warmState) genOf(ino uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.regen[ino]
}

// linked notes a lower hard link's node (in a kept view).
func (w *warmState) linked(in *fs.Inode) {
	if !w.on {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.links == nil {
		w.links = map[*fs.Inode]struct{}{}
	}
	w.links[in] = struct{}{}
}

// retire makes in and every node below it stale (see warmState).
func (ov *overlayFS) retire(in *fs.Inode) {
	ov.warm.mu.Lock()
	defer ov.warm.mu.Unlock()
	if ov.warm.regen == nil {
		ov.warm.regen = map[uint64]uint64{}
	}
	var walk func(*fs.Inode)
	walk = func(c *fs.Inode) {
		ov.warm.regen[c.StableAttr().Ino] = ov.gen.Add(1)
		delete(ov.warm.links, c)
		for _, ch := range c.Children() {
			walk(ch)
		}
	}
	walk(in)
}

// find is the node at rel in the server's tree (nil when the kernel
// knows nothing there), and its parent (nil when not even that is known).
func find(root *fs.Inode, rel string) (parent, in *fs.Inode, name string) {
	if rel == "" {
		return nil, root, ""
	}
	names := strings.Split(rel, "/")
	parent = root
	for _, nm := range names[:len(names)-1] {
		if parent = parent.GetChild(nm); parent == nil {
			return nil, nil, ""
		}
	}
	name = names[len(names)-1]
	return parent, parent.GetChild(name), name
}

// invalidate takes rel back from the kernel: its node and those below
// retired, its entry (even a negative one) dropped, its directory's
// listing and attributes dropped. The errors of the notifications are
// ENOENT for what the kernel did not hold: nothing to drop.
func (ov *overlayFS) invalidate(root *fs.Inode, rel string) {
	parent, in, name := find(root, rel)
	if rel == "" {
		root.NotifyContent(0, 0)
		return
	}
	if parent == nil {
		return // nothing at or below rel was ever looked up
	}
	if in != nil {
		ov.retire(in)
		parent.RmChild(name)
	}
	parent.NotifyEntry(name)
	parent.NotifyContent(0, 0)
}

// sameLowerDir reports whether in is still exactly right for rel: a
// directory of the lower tree, at its own path, showing its lower
// children, with the lower directory's inode number. Its children then
// need taking back one by one (each is heard of or in the upper layer);
// it needs only its attributes and listing dropped.
func (ov *overlayFS) sameLowerDir(in *fs.Inode, rel string) bool {
	n, ok := in.Operations().(*node)
	if !ok || !n.isDir() || !n.lowerOK || n.lower != rel {
		return false
	}
	var st syscall.Stat_t
	l, err := ov.low(rel)
	if err != nil {
		return false
	}
	defer l.close()
	if l.lstat(&st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return false
	}
	return in.StableAttr().Ino == st.Ino
}

// changed takes back one path the watcher heard change.
func (ov *overlayFS) changed(root *fs.Inode, c change) {
	if c.dir && c.rel != "" {
		if parent, in, _ := find(root, c.rel); in != nil && ov.sameLowerDir(in, c.rel) {
			in.NotifyContent(0, 0) // its attributes (a chmod) and listing
			parent.NotifyContent(0, 0)
			return
		}
	}
	ov.invalidate(root, c.rel)
}

// forgetUpper takes back every path of the ending run's upper layer
// (and every lower hard link), and forgets the run's copy-ups: the
// next run starts with an empty upper layer.
func (ov *overlayFS) forgetUpper(root *fs.Inode, upper string) error {
	// By descriptors: a path of the view may be longer than the kernel
	// takes whole with the layer's directory in front (see at).
	var walk func(fd int, rel string) error
	walk = func(fd int, rel string) error {
		d := os.NewFile(uintptr(fd), rel)
		defer d.Close() // read only
		ents, err := d.ReadDir(-1)
		if err != nil {
			return err
		}
		for _, e := range ents {
			crel := join(rel, e.Name())
			if e.IsDir() {
				if _, in, _ := find(root, crel); in != nil && ov.sameLowerDir(in, crel) {
					in.NotifyContent(0, 0)
					cfd, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
					if err != nil {
						return err
					}
					if err := walk(cfd, crel); err != nil {
						return err
					}
					continue
				}
			}
			ov.invalidate(root, crel)
		}
		return nil
	}
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = walk(fd, "")
	}
	root.NotifyContent(0, 0)
	ov.warm.mu.Lock()
	links := ov.warm.links
	ov.warm.links = nil
	ov.warm.mu.Unlock()
	for in := range links {
		if name, parent := in.Parent(); parent != nil {
			ov.retire(in)
			parent.RmChild(name)
			parent.NotifyEntry(name)
		}
	}
	ov.aliasMu.Lock()
	ov.alias = map[uint64]uint64{}
	ov.aliasMu.Unlock()
	return err
}
