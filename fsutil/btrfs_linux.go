// btrfs subvolumes, through the kernel's ioctls: what the btrfs
// isolation mode and the btrfs target backend are built on.

package fsutil

import (
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The btrfs ioctls of linux/btrfs.h that snapback uses, and the inode
// number of every subvolume's root directory.
const (
	btrfsIocSnapCreateV2  = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	btrfsIocSnapDestroy   = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	btrfsIocGetSubvolInfo = 0x81f8943c // _IOR(0x94, 60, struct btrfs_ioctl_get_subvol_info_args)
	btrfsSubvolRdonly     = 1 << 1
	BtrfsSubvolIno        = 256 // BTRFS_FIRST_FREE_OBJECTID: every subvolume's root directory
)

type btrfsVolArgs struct {
	Fd   int64
	Name [4088]byte
}

type btrfsVolArgsV2 struct {
	Fd      int64
	Transid uint64
	Flags   uint64
	Unused  [4]uint64
	Name    [4040]byte
}

type btrfsTimespec struct {
	Sec  uint64
	Nsec uint32
	_    uint32
}

type btrfsSubvolInfo struct {
	TreeID                         uint64
	Name                           [256]byte
	ParentID, DirID, Generation    uint64
	Flags                          uint64
	UUID, ParentUUID, ReceivedUUID [16]byte
	Ctransid, Otransid, Stransid   uint64
	Rtransid                       uint64
	Ctime, Otime, Stime, Rtime     btrfsTimespec
	Reserved                       [8]uint64
}

// The kernel's sizes, checked at compile time (an index out of range).
var (
	_ = [1]struct{}{}[unsafe.Sizeof(btrfsVolArgs{})-4096]
	_ = [1]struct{}{}[unsafe.Sizeof(btrfsVolArgsV2{})-4096]
	_ = [1]struct{}{}[unsafe.Sizeof(btrfsSubvolInfo{})-504]
)

func btrfsIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// BtrfsSnapshot snapshots the subvolume open as src into dirFd/name.
func BtrfsSnapshot(src, dirFd int, name string, readOnly bool) error {
	var a btrfsVolArgsV2
	if len(name) >= len(a.Name) {
		return unix.ENAMETOOLONG
	}
	a.Fd = int64(src)
	if readOnly {
		a.Flags = btrfsSubvolRdonly
	}
	copy(a.Name[:], name)
	return btrfsIoctl(dirFd, btrfsIocSnapCreateV2, unsafe.Pointer(&a))
}

// BtrfsDestroy deletes the subvolume dirFd/name (read-only or not: root
// may delete either).
func BtrfsDestroy(dirFd int, name string) error {
	var a btrfsVolArgs
	if len(name) >= len(a.Name) {
		return unix.ENAMETOOLONG
	}
	copy(a.Name[:], name)
	return btrfsIoctl(dirFd, btrfsIocSnapDestroy, unsafe.Pointer(&a))
}

// BtrfsSubvol is what snapback reads of a subvolume's info.
type BtrfsSubvol struct {
	UUID       [16]byte
	Generation uint64
}

// BtrfsInfo is the info of the subvolume open as fd.
func BtrfsInfo(fd int) (BtrfsSubvol, error) {
	var info btrfsSubvolInfo
	err := btrfsIoctl(fd, btrfsIocGetSubvolInfo, unsafe.Pointer(&info))
	return BtrfsSubvol{UUID: info.UUID, Generation: info.Generation}, err
}

// LexistsAt reports whether dirFd/name exists (not following a symlink).
func LexistsAt(dirFd int, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

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
	if st.Ino != BtrfsSubvolIno {
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
	if err := BtrfsSnapshot(sfd, dfd, filepath.Base(dst), true); err != nil {
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
	if ok, err := LexistsAt(dfd, filepath.Base(p)); err != nil || !ok {
		return err
	}
	if err := BtrfsDestroy(dfd, filepath.Base(p)); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", p, err)
	}
	return nil
}
