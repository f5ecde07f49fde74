package backends

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// IsSubvolume reports whether p is the root of a btrfs subvolume, and why
// not when it is not: the btrfs isolation mode of `run` needs one.
func IsSubvolume(p string) (bool, string) {
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return false, fmt.Sprintf("%s: %v", p, err)
	}
	if fs.Type != unix.BTRFS_SUPER_MAGIC {
		return false, p + " is not on btrfs"
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false, fmt.Sprintf("%s: %v", p, err)
	}
	if st.Ino != btrfsSubvolIno {
		return false, p + " is not the root of a btrfs subvolume (btrfs subvolume create makes one)"
	}
	return true, ""
}

// SubvolSnapshot makes a read-only snapshot of the subvolume src at dst
// (a new name in an existing directory of the same filesystem).
func SubvolSnapshot(src, dst string) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", src, err)
	}
	defer unix.Close(dfd)
	if err := btrfsSnap(sfd, dfd, filepath.Base(dst), true); err != nil {
		return fmt.Errorf("snapshot %s at %s: %w", src, dst, err)
	}
	return nil
}

// SubvolDelete deletes the subvolume at p; a missing one is no error.
func SubvolDelete(p string) error {
	dfd, err := unix.Open(filepath.Dir(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("delete subvolume %s: %w", p, err)
	}
	defer unix.Close(dfd)
	if ok, err := btrfsExists(dfd, filepath.Base(p)); err != nil || !ok {
		return err
	}
	if err := btrfsDestroy(dfd, filepath.Base(p)); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", p, err)
	}
	return nil
}
