package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

const (
	apfsPayload       = "tree"
	apfsRestorePrefix = ".snapback-restore-"
)

// Available implements Backend: the filesystem decides per path (Check).
func (*APFS) Available() (bool, string) { return true, "" }

// Check implements Backend: the path is a directory on APFS, in a parent
// directory it can write.
func (*APFS) Check(_ context.Context, t Target, root string) error {
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
		return targetErr(t, "%s is a symlink: name the directory itself", p)
	default:
		return targetErr(t, "%s is not a directory", p)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return targetErr(t, "%s: %v", p, err)
	}
	if name := unix.ByteSliceToString(fs.Fstypename[:]); name != "apfs" {
		return targetErr(t, "%s is not on APFS (%s)", p, name)
	}
	if err := unix.Access(filepath.Dir(p), unix.W_OK); err != nil {
		return targetErr(t, "%s: its parent directory is not writable: %v", p, err)
	}
	return nil
}

// Snapshot implements Backend.
func (a *APFS) Snapshot(ctx context.Context, t Target, root, dir string) error {
	if err := a.Check(ctx, t, root); err != nil {
		return err
	}
	p, _ := TargetPath(t, root) // checked above
	out := filepath.Join(dir, apfsPayload)
	// A leftover is from an earlier attempt into this payload dir, which
	// the caller owns.
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("snapshot apfs %s: %w", p, err)
	}
	if err := unix.Clonefile(p, out, unix.CLONE_NOFOLLOW); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("snapshot apfs %s: the payload dir %s is on another volume: %w", p, dir, err)
		}
		return fmt.Errorf("snapshot apfs %s: clonefile: %w", p, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("snapshot apfs %s: %w", p, err)
	}
	return nil
}

// Restore implements Backend. A target that is gone is made anew.
func (a *APFS) Restore(ctx context.Context, t Target, root, dir string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	wrap := func(err error) error { return fmt.Errorf("restore apfs %s: %w", p, err) }
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	in := filepath.Join(dir, apfsPayload)
	if fi, err := os.Lstat(in); err != nil {
		return wrap(err)
	} else if !fi.IsDir() {
		return wrap(fmt.Errorf("%s is not a directory", in))
	}
	tmp := filepath.Join(filepath.Dir(p), apfsRestorePrefix+snapHash(p))
	// Before a swap the leftover is a half-made copy, after it the old
	// target: either way it goes.
	if err := os.RemoveAll(tmp); err != nil {
		return wrap(fmt.Errorf("delete %s, left by an earlier restore: %w", tmp, err))
	}
	flag := uint32(unix.RENAME_SWAP)
	if fi, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		flag = unix.RENAME_EXCL
	} else if err != nil {
		return wrap(err)
	} else if !fi.IsDir() {
		return targetErr(t, "%s is no longer a directory: not replacing it", p)
	}
	if err := unix.Clonefile(in, tmp, unix.CLONE_NOFOLLOW); err != nil {
		_ = os.RemoveAll(tmp) // already failing; the next restore deletes a leftover
		return wrap(fmt.Errorf("clonefile: %w", err))
	}
	if err := unix.RenamexNp(tmp, p, flag); err != nil {
		_ = os.RemoveAll(tmp) // already failing; the next restore deletes a leftover
		return wrap(fmt.Errorf("swap in the copy: %w", err))
	}
	if err := fsutil.SyncDir(filepath.Dir(p)); err != nil {
		return wrap(err)
	}
	// The restore is done; an old tree not fully deleted now is deleted
	// by the next Restore or Release.
	_ = os.RemoveAll(tmp)
	return nil
}

// Release implements Backend: the clone is inside dir, which the caller
// removes; an old tree a restore left beside the target goes too.
func (*APFS) Release(_ context.Context, t Target, root, _ string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return nil // no target: nothing beside it
	}
	if err := os.RemoveAll(filepath.Join(filepath.Dir(p), apfsRestorePrefix+snapHash(p))); err != nil {
		return fmt.Errorf("release apfs %s: %w", p, err)
	}
	return nil
}
