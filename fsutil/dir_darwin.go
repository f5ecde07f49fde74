package fsutil

import "golang.org/x/sys/unix"

// macOS has no mkfifoat in x/sys/unix: create it by path. The directory's
// path was resolved without symlinks when it was opened; a rename racing
// this call is the one gap, and mkfifo never follows a final symlink.
func mkfifoat(d *Dir, name string, perm uint32) error {
	return unix.Mkfifo(d.join(name), perm)
}

func renameNoReplace(from *Dir, oldname string, to *Dir, newname string) error {
	return unix.RenameatxNp(from.fd, oldname, to.fd, newname, unix.RENAME_EXCL)
}

func renamePathNoReplace(oldpath, newpath string) error {
	return unix.RenameatxNp(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_EXCL)
}
