package watch

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// sockAddr is the socket's address: its path, or, when that is longer
// than a socket's address may be, the path through /proc/self/fd of the
// directory held open as dirFd (closed by the caller; -1: none).
func sockAddr(store string) (addr string, dirFd int, err error) {
	p := filepath.Join(watchDir(store), "sock")
	if len(p) < 100 {
		return p, -1, nil
	}
	fd, err := unix.Open(watchDir(store), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/sock", fd), fd, nil
}

// closeInherited marks every descriptor above stderr close-on-exec: this
// process's own are already, but those it inherited (a test harness's
// pipe) would otherwise stay open in the watcher, for as long as it runs.
func closeInherited() {
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) // an old kernel: they stay inherited, as before
}
