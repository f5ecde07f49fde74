package snapshot

import (
	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	fsutil.Mutating()
	return unix.Syncfs(fd)
}
