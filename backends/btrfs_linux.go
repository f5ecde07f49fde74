package backends

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// What the btrfs backend keeps where.
const (
	btrfsPayload       = "btrfs.json"
	btrfsSnapshotDir   = ".snapback-snapshots"
	btrfsRestorePrefix = ".snapback-restore-"
)

// btrfsMeta is btrfs.json, the whole payload.
type btrfsMeta struct {
	Subvolume  string `json:"subvolume"`   // the target, absolute, when snapshotted
	Snapshot   string `json:"snapshot"`    // the read-only snapshot
	UUID       string `json:"uuid"`        // the snapshot's UUID
	SourceUUID string `json:"source_uuid"` // the target's UUID then
	Generation uint64 `json:"generation"`  // the target's generation then
}

func btrfsOpenDir(dirFd int, name string) (int, error) {
	return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// Available implements Backend: the kernel decides per path (Check).
func (*Btrfs) Available() (bool, string) { return true, "" }

// Check implements Backend: the path is a directory on btrfs, the root of
// a subvolume and not a mount point, in a parent directory it can write.
func (*Btrfs) Check(_ context.Context, t Target, root string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return targetErr(t, "%s does not exist", p)
		}
		return targetErr(t, "%s: %v", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return targetErr(t, "%s is a symlink: name the subvolume itself", p)
	default:
		return targetErr(t, "%s is not a directory", p)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return targetErr(t, "%s: %v", p, err)
	}
	if fs.Type != unix.BTRFS_SUPER_MAGIC {
		return targetErr(t, "%s is not on btrfs", p)
	}
	if st.Ino != fsutil.BtrfsSubvolIno {
		return targetErr(t, "%s is a plain directory, not a btrfs subvolume (btrfs subvolume create makes one)", p)
	}
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &sx); err == nil &&
		sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return targetErr(t, "%s is a mount point: snapback swaps the subvolume in its parent directory, so name one below it", p)
	}
	if err := unix.Access(filepath.Dir(p), unix.W_OK); err != nil {
		return targetErr(t, "%s: its parent directory is not writable: %v", p, err)
	}
	return nil
}

// btrfsSnapshotName is the read-only snapshot's name in the hidden directory:
// the subvolume's name (cut short) and the payload dir's hash.
func btrfsSnapshotName(p, dir string) string {
	base := filepath.Base(p)
	if len(base) > 200 {
		base = base[:200]
	}
	return base + "-" + snapHash(dir)
}

// Snapshot implements Backend.
func (b *Btrfs) Snapshot(ctx context.Context, t Target, root, dir string) (err error) {
	if err := b.Check(ctx, t, root); err != nil {
		return err
	}
	p, _ := TargetPath(t, root) // checked above
	dir, err = filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("snapshot btrfs %s: %w", p, err)
	}
	wrap := func(err error) error { return fmt.Errorf("snapshot btrfs %s: %w", p, err) }
	snapDir := filepath.Join(filepath.Dir(p), btrfsSnapshotDir)
	if err := os.Mkdir(snapDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return wrap(err)
	}
	src, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(src)
	sd, err := unix.Open(snapDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(sd)
	name := btrfsSnapshotName(p, dir)
	// A leftover under this name is from an earlier attempt into this same
	// payload dir, which the caller owns: it is replaced.
	if ok, err := fsutil.LexistsAt(sd, name); err != nil {
		return wrap(err)
	} else if ok {
		if err := fsutil.BtrfsDestroy(sd, name); err != nil {
			return wrap(fmt.Errorf("delete the leftover snapshot %s: %w", filepath.Join(snapDir, name), err))
		}
	}
	before, err := fsutil.BtrfsInfo(src)
	if err != nil {
		return wrap(fmt.Errorf("subvolume info: %w", err))
	}
	if err := fsutil.BtrfsSnapshot(src, sd, name, true); err != nil {
		return wrap(fmt.Errorf("create the snapshot: %w", err))
	}
	defer func() {
		if err != nil {
			_ = fsutil.BtrfsDestroy(sd, name) // already failing; a leftover is replaced or released later
		}
	}()
	fd, err := btrfsOpenDir(sd, name)
	if err != nil {
		return wrap(err)
	}
	info, err := fsutil.BtrfsInfo(fd)
	unix.Close(fd) // read-only
	if err != nil {
		return wrap(fmt.Errorf("snapshot info: %w", err))
	}
	data, err := json.MarshalIndent(btrfsMeta{
		Subvolume:  p,
		Snapshot:   filepath.Join(snapDir, name),
		UUID:       hex.EncodeToString(info.UUID[:]),
		SourceUUID: hex.EncodeToString(before.UUID[:]),
		Generation: before.Generation,
	}, "", "  ")
	if err != nil {
		return wrap(err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, btrfsPayload), append(data, '\n'), 0o644); err != nil {
		return wrap(err)
	}
	return nil
}

func btrfsReadMeta(dir string) (btrfsMeta, error) {
	var m btrfsMeta
	data, err := os.ReadFile(filepath.Join(dir, btrfsPayload))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, btrfsPayload), err)
	}
	if !filepath.IsAbs(m.Subvolume) || !filepath.IsAbs(m.Snapshot) || m.UUID == "" {
		return m, fmt.Errorf("%s: incomplete", filepath.Join(dir, btrfsPayload))
	}
	return m, nil
}

// btrfsOpenSnapshot opens the payload's read-only snapshot, checking that it is
// the one snapshotted (same UUID).
func btrfsOpenSnapshot(m btrfsMeta) (int, error) {
	fd, err := unix.Open(m.Snapshot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("the snapshot %s: %w", m.Snapshot, err)
	}
	info, err := fsutil.BtrfsInfo(fd)
	if err == nil && hex.EncodeToString(info.UUID[:]) != m.UUID {
		err = fmt.Errorf("UUID %x, want %s: not the subvolume snapshotted", info.UUID, m.UUID)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("the snapshot %s: %w", m.Snapshot, err)
	}
	return fd, nil
}

// btrfsRemoveLeftover deletes the restore subvolume of an interrupted or
// finished restore: before the swap it is a half-made copy, after it the
// old target.
func btrfsRemoveLeftover(parent int, parentPath, name string) error {
	ok, err := fsutil.LexistsAt(parent, name)
	if err != nil || !ok {
		return err
	}
	if err := fsutil.BtrfsDestroy(parent, name); err != nil {
		return fmt.Errorf("delete %s, left by an earlier restore: %w", filepath.Join(parentPath, name), err)
	}
	return nil
}

// Restore implements Backend. A target that is gone is made anew.
func (b *Btrfs) Restore(ctx context.Context, t Target, root, dir string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	wrap := func(err error) error { return fmt.Errorf("restore btrfs %s: %w", p, err) }
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	m, err := btrfsReadMeta(dir)
	if err != nil {
		return wrap(err)
	}
	snap, err := btrfsOpenSnapshot(m)
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(snap)
	parentPath, base := filepath.Dir(p), filepath.Base(p)
	parent, err := unix.Open(parentPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap(err)
	}
	defer unix.Close(parent)
	tmp := btrfsRestorePrefix + snapHash(p)
	if err := btrfsRemoveLeftover(parent, parentPath, tmp); err != nil {
		return wrap(err)
	}
	var st unix.Stat_t
	flag := uint(unix.RENAME_EXCHANGE)
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		flag = unix.RENAME_NOREPLACE
	} else if err != nil {
		return wrap(err)
	} else if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != fsutil.BtrfsSubvolIno {
		return targetErr(t, "%s is no longer a btrfs subvolume: not replacing it", p)
	}
	if err := fsutil.BtrfsSnapshot(snap, parent, tmp, false); err != nil {
		return wrap(fmt.Errorf("copy the snapshot: %w", err))
	}
	if err := unix.Renameat2(parent, tmp, parent, base, flag); err != nil {
		_ = fsutil.BtrfsDestroy(parent, tmp) // already failing; the next restore deletes a leftover
		return wrap(fmt.Errorf("swap in the copy: %w", err))
	}
	if err := unix.Fsync(parent); err != nil {
		return wrap(err)
	}
	// The restore is done. An old subvolume that cannot be deleted now
	// (nested subvolumes) is deleted by the next Restore or Release, or
	// named in its error.
	_ = fsutil.BtrfsDestroy(parent, tmp)
	return nil
}

// Release implements Backend: the read-only snapshot is deleted, with its
// hidden directory once empty, and so is an old subvolume a restore left.
// A subvolume under the snapshot's name with another UUID is not ours and
// stays.
func (*Btrfs) Release(_ context.Context, t Target, root, dir string) error {
	m, err := btrfsReadMeta(dir)
	if errors.Is(err, os.ErrNotExist) {
		// No payload file: a snapshot that failed; its leftover, if any,
		// has the derived name.
		p, perr := TargetPath(t, root)
		adir, aerr := filepath.Abs(dir)
		if perr != nil || aerr != nil {
			return nil
		}
		m = btrfsMeta{Subvolume: p, Snapshot: filepath.Join(filepath.Dir(p), btrfsSnapshotDir, btrfsSnapshotName(p, adir))}
	} else if err != nil {
		return fmt.Errorf("release btrfs: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("release btrfs %s: %w", m.Snapshot, err) }
	snapDir, name := filepath.Dir(m.Snapshot), filepath.Base(m.Snapshot)
	sd, err := unix.Open(snapDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(sd)
		err = btrfsRelease(sd, name, m.UUID)
		if err == nil {
			// Other payloads' snapshots keep it: ENOTEMPTY is fine.
			_ = unix.Rmdir(snapDir)
		}
	} else if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	if err != nil {
		return wrap(err)
	}
	parentPath := filepath.Dir(m.Subvolume)
	parent, err := unix.Open(parentPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return wrap(err)
	}
	defer unix.Close(parent)
	if err := btrfsRemoveLeftover(parent, parentPath, btrfsRestorePrefix+snapHash(m.Subvolume)); err != nil {
		return wrap(err)
	}
	return nil
}

// btrfsRelease deletes sd/name if it is there and has the UUID (any,
// when uuid is empty).
func btrfsRelease(sd int, name, uuid string) error {
	fd, err := btrfsOpenDir(sd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	info, err := fsutil.BtrfsInfo(fd)
	unix.Close(fd) // read-only
	if err != nil {
		return err
	}
	if uuid != "" && hex.EncodeToString(info.UUID[:]) != uuid {
		return nil
	}
	return fsutil.BtrfsDestroy(sd, name)
}
