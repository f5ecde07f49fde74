//go:build !linux

package watch

import "path/filepath"

// sockAddr is the socket's path (dirFd: -1, none held).
func sockAddr(store string) (addr string, dirFd int, err error) {
	return filepath.Join(watchDir(store), "sock"), -1, nil
}

func closeInherited() {}
