package fsutil

import "golang.org/x/sys/unix"

func mkfifoat(d *Dir, name string, perm uint32) error {
	return unix.Mkfifoat(d.fd, name, perm)
}

func renameNoReplace(from *Dir, oldname string, to *Dir, newname string) error {
	return unix.Renameat2(from.fd, oldname, to.fd, newname, unix.RENAME_NOREPLACE)
}

func renamePathNoReplace(oldpath, newpath string) error {
	return unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
}
