package layer

import "golang.org/x/sys/unix"

// RenameLeavingWhiteout renames from to to and leaves a 0/0 whiteout
// device at from, in one step (RENAME_WHITEOUT; it takes CAP_MKNOD).
func RenameLeavingWhiteout(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_WHITEOUT)
}
