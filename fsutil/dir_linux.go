package fsutil

import "golang.org/x/sys/unix"

func mkfifoat(d *Dir, name string, perm uint32) error {
	return unix.Mkfifoat(d.fd, name, perm)
}
