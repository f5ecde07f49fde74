//go:build linux

package fuse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a kept view must hear of in the lower tree: every
// change of a name, of content (a write, even one that keeps the mtime)
// and of metadata. inotify reports them on the directory that holds
// the name, so every directory of the tree is watched.
const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

// watcher watches every directory of a tree (but the store) with
// inotify and collects the paths that changed. fsnotify queues an event
// in the system call that made the change, so once that call has
// returned, take sees it: what a commit or another program changed
// before a run begins is known when it begins.
type watcher struct {
	fd      int
	rootFd  int // the tree's root (O_PATH)
	root    string
	mu      sync.Mutex
	paths   map[int32]string // watch descriptor -> directory, relative to root ("" the root)
	pending []change         // read from the kernel, not yet taken
	// lost is set when the kernel dropped events (its queue overflowed)
	// or a directory could not be watched: nothing cached can then be
	// vouched for.
	lost bool
	// removed is told (without waiting) of each name removed from the
	// root directory, the store's included, and of the root's own
	// removal: the server then looks whether its root and store are
	// still there.
	removed chan struct{}
}

// maxPending bounds the changes kept between two runs: past it, they
// count as lost (every cached path is looked up again), which costs one
// cold walk, not memory.
const maxPending = 1 << 17

// newWatcher watches root and every directory under it but the store.
func newWatcher(root string) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &watcher{fd: fd, rootFd: rootFd, root: root, paths: map[int32]string{}, removed: make(chan struct{}, 1)}
	if err := w.addTree(""); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) close() {
	unix.Close(w.fd)
	unix.Close(w.rootFd)
}

// addTree watches the directory rel and every directory below it. A
// directory that vanishes meanwhile is no error (its removal is an
// event). It walks by descriptors: a path of the tree may be longer
// than the kernel takes whole (see at).
func (w *watcher) addTree(rel string) error {
	a, err := resolve(w.rootFd, rel)
	if err != nil {
		return w.vanished(rel, err)
	}
	fd, err := unix.Openat(a.dir, a.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	a.close()
	if err != nil {
		return w.vanished(rel, err)
	}
	return w.addDir(fd, rel)
}

// addDir watches the directory open at fd (rel) and those below it, and
// closes fd.
func (w *watcher) addDir(fd int, rel string) error {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close() // read only
	// Through the descriptor's /proc link (followed: it is the directory
	// itself, opened without following a symlink).
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return fmt.Errorf("watch %s: %w (fs.inotify.max_user_watches?)", filepath.Join(w.root, rel), err)
	}
	w.paths[int32(wd)] = rel
	ents, err := f.ReadDir(-1)
	if err != nil {
		return w.vanished(rel, err)
	}
	for _, e := range ents {
		if !e.IsDir() || (rel == "" && e.Name() == storeName) {
			continue
		}
		cfd, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err := w.vanished(join(rel, e.Name()), err); err != nil {
				return err
			}
			continue
		}
		if err := w.addDir(cfd, join(rel, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// vanished is nil for a directory removed or replaced while it was
// being watched (that is an event of its own), else err with its path.
func (w *watcher) vanished(rel string, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	return fmt.Errorf("watch %s: %w", filepath.Join(w.root, rel), err)
}

// change is one path of the tree that changed (rel to the root); dir is
// true when the event said the entry was a directory.
type change struct {
	rel string
	dir bool
}

// run reads events as they come, so that the kernel's queue (16,384
// events by default) does not overflow between runs.
func (w *watcher) run() {
	for {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		w.mu.Lock()
		err := w.collect()
		w.mu.Unlock()
		if err != nil {
			return // take reports it
		}
	}
}

// take returns every change heard until now, in order, and forgets them.
// New directories are watched (with what is in them) before take
// returns, so later changes in them are heard. all is true when events
// were lost: then every cached path is suspect.
func (w *watcher) take() (changes []change, all bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	err = w.collect()
	changes, all = w.pending, w.lost || err != nil
	w.pending, w.lost = nil, false
	return changes, all, err
}

// collect reads the events queued now into pending.
func (w *watcher) collect() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("inotify: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = strings.TrimRight(string(b), "\x00")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				w.lost = true
				continue
			}
			dir, ok := w.paths[ev.Wd]
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(w.paths, ev.Wd)
				continue
			}
			if !ok {
				continue
			}
			if dir == "" && ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
				select {
				case w.removed <- struct{}{}:
				default: // told already
				}
			}
			if name == "" { // the watched directory itself
				if dir == "" && ev.Mask&unix.IN_ATTRIB != 0 {
					w.add(change{rel: "", dir: true}) // the root's own attributes: no parent is watched
				}
				if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
					if dir == "" {
						w.lost = true // the root itself went
					}
					w.add(change{rel: dir, dir: true})
				}
				continue
			}
			if dir == "" && name == storeName {
				continue
			}
			rel := join(dir, name)
			isDir := ev.Mask&unix.IN_ISDIR != 0
			w.add(change{rel: rel, dir: isDir})
			if isDir && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				if err := w.addTree(rel); err != nil {
					w.lost = true
				}
			}
		}
	}
	return nil
}

func (w *watcher) add(c change) {
	if len(w.pending) >= maxPending {
		w.lost, w.pending = true, nil
	}
	if !w.lost {
		w.pending = append(w.pending, c)
	}
}
