package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// ZFS snapshots a ZFS dataset (setting dataset: pool/fs, a filesystem or a
// volume) through the zfs command: `zfs snapshot <dataset>@snapback-<hash
// of the payload dir>`, atomic across the dataset. The payload dir holds
// only zfs.json, naming the snapshot and its guid: a snapshot can move to
// another dataset (below), and is found again by its guid.
//
// A restore must not destroy snapshots newer than the one restored (they
// are other snapshots' payloads: a redo needs them), so `zfs rollback -r`
// is out. There are two ways:
//
//   - The snapshot is the dataset's newest: `zfs rollback`, in place and
//     atomic; properties, mount and open files stay. This is the common
//     case (undoing the last command).
//   - Newer snapshots exist: the snapshot is cloned to
//     <dataset>.snapback-restore (never mounted, with the dataset's local
//     properties), the clone is promoted (it takes over the snapshot and
//     the older ones), the dataset is unmounted and renamed to
//     <dataset>.snapback-old-<guid> (keeping the newer snapshots, which stay
//     restorable), the clone is renamed to the dataset and mounted. This
//     swap is NOT atomic: between the unmount and the mount the mount
//     point is empty. While files in the dataset are open the unmount
//     fails, and the swap is undone: nothing changes. Each step is
//     recognised by the names and markers that exist, so the next restore
//     after a kill finishes the swap (or, if it is of another snapshot
//     and the dataset was not moved yet, undoes it first). An old dataset
//     is destroyed once its last snapshot is released.
//
// It asks nothing of ZFS that zfs-fuse (pool version 23) lacks: no
// `zfs list -p`, no clones property, and it tolerates zfs-fuse's quirks
// (a new clone mounted despite canmount=noauto, "dataset is busy" for a
// moment after an unmount).
//
// Limits: child datasets are not part of the snapshot (no -r); a dataset
// with children is only restored by rollback, since a swap would move them
// away.
type ZFS struct{}

var _ Backend = (*ZFS)(nil)

const (
	zfsPayload   = "zfs.json"
	zfsRestore   = ".snapback-restore"
	zfsOld       = ".snapback-old-"
	zfsMarker    = "snapback:restore"  // on the clone: the guid it restores
	zfsCanmount  = "snapback:canmount" // on the clone: the dataset's canmount
	zfsNotExists = "dataset does not exist"
)

// zfsMeta is zfs.json, the whole payload.
type zfsMeta struct {
	Dataset  string `json:"dataset"`
	Snapshot string `json:"snapshot"`
	GUID     string `json:"guid"`
}

// Name implements Backend.
func (*ZFS) Name() string { return "zfs" }

// Available implements Backend: the zfs command answers and shows a
// dataset. It asks zfs itself, not a device: OpenZFS's kernel module
// (/dev/zfs) and zfs-fuse's daemon (a socket) both serve the same
// command.
func (*ZFS) Available() (bool, string) {
	if _, err := exec.LookPath("zfs"); err != nil {
		return false, "zfs is not installed"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hung daemon is not "available"
	defer cancel()
	out, err := zfs(ctx, "list", "-H", "-o", "name", "-d", "0")
	switch {
	case err != nil:
		return false, err.Error() + ": is the zfs module loaded, or the zfs-fuse daemon running?"
	case out == "":
		return false, "zfs list shows no dataset (no pool is imported)"
	}
	return true, ""
}

// zfsValidName reports whether ds is a dataset name (pool/fs/…), not a
// path or a snapshot.
func zfsValidName(ds string) bool {
	for _, c := range strings.Split(ds, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
		for _, r := range c {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.: ", r)) {
				return false
			}
		}
	}
	return len(ds) < 200 // room for the suffixes, under ZFS's 255
}

// zfsSnapName is the snapshot a payload dir gets.
func zfsSnapName(ds, dir string) string { return ds + "@snapback-" + snapHash(dir) }

// zfsOldName is where a swap moves the dataset whose guid is guid.
func zfsOldName(ds, guid string) string { return ds + zfsOld + guid }

// zfsDo runs a zfs command that changes the pool (fsutil.ZFSChange):
// a target's datasets are let go of within 5 s.
func zfsDo(ctx context.Context, args ...string) (string, error) {
	return fsutil.ZFSChange(ctx, 5*time.Second, args...)
}

// zfs runs the zfs command (fsutil.ZFS).
func zfs(ctx context.Context, args ...string) (string, error) { return fsutil.ZFS(ctx, args...) }

// zfsGet reads one property's value ("" and no error when name does not
// exist).
func zfsGet(ctx context.Context, prop, name string) (string, error) {
	v, err := zfs(ctx, "get", "-H", "-p", "-o", "value", prop, name)
	if err != nil && strings.Contains(err.Error(), zfsNotExists) {
		return "", nil
	}
	return v, err
}

func zfsLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (z *ZFS) settings(t Target) error {
	if t.Dataset == "" {
		return targetErr(t, "no dataset")
	}
	if !zfsValidName(t.Dataset) {
		return targetErr(t, "%q is not a dataset name (pool/fs, not a path or a snapshot)", t.Dataset)
	}
	if ok, why := z.Available(); !ok {
		return targetErr(t, "dataset %s: %s", t.Dataset, why)
	}
	return nil
}

// Check implements Backend: the dataset exists and is a filesystem or a
// volume.
func (z *ZFS) Check(ctx context.Context, t Target, _ string) error {
	if err := z.settings(t); err != nil {
		return err
	}
	typ, err := zfsGet(ctx, "type", t.Dataset)
	switch {
	case err != nil:
		return targetErr(t, "%v", err)
	case typ == "":
		return targetErr(t, "dataset %s does not exist", t.Dataset)
	case typ != "filesystem" && typ != "volume":
		return targetErr(t, "%s is a %s, not a filesystem or a volume", t.Dataset, typ)
	}
	return nil
}

// Snapshot implements Backend.
func (z *ZFS) Snapshot(ctx context.Context, t Target, root, dir string) (err error) {
	if err := z.Check(ctx, t, root); err != nil {
		return err
	}
	ds := t.Dataset
	wrap := func(err error) error { return fmt.Errorf("snapshot zfs %s: %w", ds, err) }
	if dir, err = filepath.Abs(dir); err != nil {
		return wrap(err)
	}
	name := zfsSnapName(ds, dir)
	// A leftover is from an earlier attempt into this payload dir, which
	// the caller owns.
	if g, err := zfsGet(ctx, "guid", name); err != nil {
		return wrap(err)
	} else if g != "" {
		if _, err := zfsDo(ctx, "destroy", name); err != nil {
			return wrap(err)
		}
	}
	if _, err := zfsDo(ctx, "snapshot", name); err != nil {
		return wrap(err)
	}
	defer func() {
		if err != nil {
			_, _ = zfsDo(context.Background(), "destroy", name) // already failing; Release retries by name
		}
	}()
	guid, err := zfsGet(ctx, "guid", name)
	if err != nil {
		return wrap(err)
	}
	data, err := json.MarshalIndent(zfsMeta{Dataset: ds, Snapshot: name, GUID: guid}, "", "  ")
	if err != nil {
		return wrap(err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, zfsPayload), append(data, '\n'), 0o644); err != nil {
		return wrap(err)
	}
	return nil
}

func zfsReadMeta(dir string) (zfsMeta, error) {
	var m zfsMeta
	data, err := os.ReadFile(filepath.Join(dir, zfsPayload))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, zfsPayload), err)
	}
	if m.Snapshot == "" || m.GUID == "" {
		return m, fmt.Errorf("%s: incomplete", filepath.Join(dir, zfsPayload))
	}
	return m, nil
}

// zfsFind finds the payload's snapshot by guid, under its name or where a
// swap moved it in the pool; "" when it is gone.
func zfsFind(ctx context.Context, m zfsMeta) (string, error) {
	if g, err := zfsGet(ctx, "guid", m.Snapshot); err != nil || g == m.GUID {
		return m.Snapshot, err
	}
	pool, _, _ := strings.Cut(m.Snapshot, "/")
	pool, _, _ = strings.Cut(pool, "@")
	// zfs get, not zfs list: zfs-fuse's list has no -p, and prints a guid
	// rounded (5.20E).
	out, err := zfs(ctx, "get", "-H", "-p", "-r", "-o", "name,value", "guid", pool)
	if err != nil {
		return "", err
	}
	for _, l := range zfsLines(out) {
		if name, guid, _ := strings.Cut(l, "\t"); guid == m.GUID && strings.Contains(name, "@") {
			return name, nil
		}
	}
	return "", nil
}

// Restore implements Backend (see [ZFS] for the two ways).
func (z *ZFS) Restore(ctx context.Context, t Target, _, dir string) error {
	if err := z.settings(t); err != nil {
		return err
	}
	ds := t.Dataset
	wrap := func(err error) error { return fmt.Errorf("restore zfs %s: %w", ds, err) }
	m, err := zfsReadMeta(dir)
	if err != nil {
		return wrap(err)
	}
	snap, err := zfsFind(ctx, m)
	if err != nil {
		return wrap(err)
	}
	if snap == "" {
		return wrap(fmt.Errorf("the snapshot %s (guid %s) is gone", m.Snapshot, m.GUID))
	}
	if err := zfsResume(ctx, ds, m.GUID); err != nil {
		return wrap(err)
	}
	tmp := ds + zfsRestore
	typ, err := zfsGet(ctx, "type", ds)
	if err != nil {
		return wrap(err)
	}
	tmpTyp, err := zfsGet(ctx, "type", tmp) // after zfsResume: this restore's own clone
	if err != nil {
		return wrap(err)
	}
	if typ != "" && tmpTyp == "" {
		out, err := zfs(ctx, "list", "-H", "-t", "snapshot", "-o", "name", "-s", "createtxg", "-d", "1", ds)
		if err != nil {
			return wrap(err)
		}
		if l := zfsLines(out); len(l) > 0 && l[len(l)-1] == snap {
			if _, err := zfsDo(ctx, "rollback", snap); err != nil {
				return wrap(err)
			}
			return nil
		}
		if children, err := zfs(ctx, "list", "-H", "-o", "name", "-d", "1", "-t", "filesystem,volume", ds); err != nil {
			return wrap(err)
		} else if len(zfsLines(children)) > 1 {
			return wrap(fmt.Errorf("newer snapshots exist and the dataset has children: a swap would move them away (restore the newest snapshot first, or destroy the newer ones)"))
		}
	}
	if tmpTyp == "" {
		tmpTyp, err = zfsGet(ctx, "type", snap[:strings.IndexByte(snap, '@')])
		if err != nil {
			return wrap(err)
		}
		if err := zfsClone(ctx, snap, ds, tmp, m.GUID, tmpTyp); err != nil {
			return wrap(err)
		}
	}
	if err := zfsPromote(ctx, tmp); err != nil {
		return wrap(err)
	}
	isFS := tmpTyp == "filesystem"
	if typ != "" {
		if err := zfsRetire(ctx, ds, isFS); err != nil {
			// The dataset is still in place (busy): the swap is undone.
			if uerr := zfsUndoSwap(ctx, ds); uerr != nil {
				err = fmt.Errorf("%w; undoing the swap: %v", err, uerr)
			}
			return wrap(err)
		}
	}
	if _, err := zfsDo(ctx, "rename", tmp, ds); err != nil {
		return wrap(err)
	}
	if err := zfsSettle(ctx, ds, isFS); err != nil {
		return wrap(err)
	}
	// The restore is done; an old dataset without snapshots is freed now
	// or by the next Release.
	_ = zfsCleanOld(ctx, ds)
	return nil
}

// zfsResume deals with what an interrupted restore of ds left, so that
// the restore of the snapshot whose guid is guid can go on: a swap killed
// after its last rename is settled; one killed before it took the
// dataset's name is undone (the dataset still holds its state), or, when
// the dataset is gone (renamed away), finished. The clone of a restore
// of guid itself is left for the caller to go on with.
func zfsResume(ctx context.Context, ds, guid string) error {
	tmp := ds + zfsRestore
	typ, err := zfsGet(ctx, "type", ds)
	if err != nil {
		return err
	}
	tmpTyp, err := zfsGet(ctx, "type", tmp)
	if err != nil {
		return err
	}
	if tmpTyp == "" {
		if typ == "" {
			return nil
		}
		if marker, err := zfsGet(ctx, zfsMarker, ds); err != nil || marker == "" || marker == "-" {
			return err
		}
		return zfsSettle(ctx, ds, typ == "filesystem")
	}
	if marker, err := zfsGet(ctx, zfsMarker, tmp); err != nil || marker == guid {
		return err
	}
	if typ != "" {
		return zfsUndoSwap(ctx, ds)
	}
	if err := zfsPromote(ctx, tmp); err != nil {
		return err
	}
	if _, err := zfsDo(ctx, "rename", tmp, ds); err != nil {
		return err
	}
	return zfsSettle(ctx, ds, tmpTyp == "filesystem")
}

// zfsPromote promotes the clone ds unless it is promoted already.
func zfsPromote(ctx context.Context, ds string) error {
	origin, err := zfsGet(ctx, "origin", ds)
	if err != nil || origin == "-" || origin == "" {
		return err
	}
	_, err = zfsDo(ctx, "promote", ds)
	return err
}

// zfsUndoSwap undoes a swap that has not moved ds: the promotion of the
// clone is reversed (ds takes its snapshots back), ds gets back the
// canmount recorded on the clone and its mount, and the clone, holding
// that record, is destroyed last.
func zfsUndoSwap(ctx context.Context, ds string) error {
	tmp := ds + zfsRestore
	canmount, err := zfsGet(ctx, zfsCanmount, tmp)
	if err != nil {
		return err
	}
	out, err := zfs(ctx, "get", "-H", "-o", "value", "origin,type,mounted", ds)
	if err != nil {
		return err
	}
	v := zfsLines(out)
	if len(v) != 3 {
		return fmt.Errorf("zfs get origin,type,mounted %s: %q", ds, out)
	}
	if strings.HasPrefix(v[0], tmp+"@") {
		if _, err := zfsDo(ctx, "promote", ds); err != nil {
			return err
		}
	}
	if v[1] == "filesystem" && v[2] != "yes" {
		if err := zfsMountBack(ctx, ds, canmount); err != nil {
			return err
		}
	}
	_, err = zfsDo(ctx, "destroy", tmp)
	return err
}

// zfsClone clones snap to tmp, unmounted, with ds's local properties and
// the markers that let a rerun recognise it.
func zfsClone(ctx context.Context, snap, ds, tmp, guid, typ string) error {
	args := []string{"clone", "-o", zfsMarker + "=" + guid}
	if typ == "filesystem" {
		canmount := "inherit"
		props, err := zfs(ctx, "get", "-H", "-p", "-s", "local", "-o", "property,value", "all", ds)
		if err != nil && !strings.Contains(err.Error(), zfsNotExists) {
			return err
		}
		for _, l := range zfsLines(props) {
			p, v, _ := strings.Cut(l, "\t")
			switch {
			case p == "canmount":
				canmount = v
			case strings.HasPrefix(p, "snapback:"), p == "volsize", p == "encryption", p == "keylocation", p == "keyformat", p == "pbkdf2iters":
			default:
				args = append(args, "-o", p+"="+v)
			}
		}
		// off, not noauto: zfs-fuse mounts a new clone whose canmount is
		// noauto.
		args = append(args, "-o", "canmount=off", "-o", zfsCanmount+"="+canmount)
	}
	_, err := zfsDo(ctx, append(args, snap, tmp)...)
	return err
}

// zfsRetire unmounts ds (a filesystem) for good and renames it out of the
// way; on error it is as it was. The unmount comes first: it is what
// fails while files are open, and canmount may not change meanwhile (a
// change of canmount remounts a mounted dataset, which fails then too).
func zfsRetire(ctx context.Context, ds string, isFS bool) error {
	if isFS {
		if mounted, err := zfsGet(ctx, "mounted", ds); err != nil {
			return err
		} else if mounted == "yes" {
			if _, err := zfsDo(ctx, "unmount", ds); err != nil {
				return fmt.Errorf("%w (are files open in it?)", err)
			}
		}
		if _, err := zfsDo(ctx, "set", "canmount=noauto", ds); err != nil {
			_, _ = zfsDo(ctx, "mount", ds) // already failing: best effort back
			return err
		}
	}
	guid, err := zfsGet(ctx, "guid", ds)
	if err != nil {
		return err
	}
	_, err = zfsDo(ctx, "rename", ds, zfsOldName(ds, guid))
	return err
}

// zfsSettle gives the swapped-in dataset its canmount back, mounts it,
// and drops the markers, the one that makes a rerun settle it last.
func zfsSettle(ctx context.Context, ds string, isFS bool) error {
	if isFS {
		canmount, err := zfsGet(ctx, zfsCanmount, ds)
		if err != nil {
			return err
		}
		if err := zfsMountBack(ctx, ds, canmount); err != nil {
			return err
		}
	}
	for _, p := range []string{zfsCanmount, zfsMarker} {
		if _, err := zfsDo(ctx, "inherit", p, ds); err != nil {
			return err
		}
	}
	return nil
}

// zfsMountBack gives the filesystem ds the canmount a swap recorded
// ("inherit": the default; none: given back already) and mounts it where
// that says so.
func zfsMountBack(ctx context.Context, ds, canmount string) error {
	var err error
	switch canmount {
	case "inherit":
		// -S: canmount is not inherited; -S sets its default.
		_, err = zfsDo(ctx, "inherit", "-S", "canmount", ds)
	case "-", "":
	default:
		_, err = zfsDo(ctx, "set", "canmount="+canmount, ds)
	}
	if err != nil {
		return err
	}
	out, err := zfs(ctx, "get", "-H", "-o", "value", "canmount,mountpoint,mounted", ds)
	if err != nil {
		return err
	}
	if v := zfsLines(out); len(v) == 3 && v[0] == "on" && v[1] != "none" && v[1] != "legacy" && v[2] != "yes" {
		_, err = zfsDo(ctx, "mount", ds)
	}
	return err
}

// zfsDestroySnap destroys snap. When it is the origin of the target's live
// dataset (a swap made it so), the live dataset is promoted first, taking
// the snapshot over; when it is the origin of old datasets only, it is
// destroyed with the last of them (-d). Other clones are named in the
// error.
func zfsDestroySnap(ctx context.Context, m zfsMeta, ds, snap string) error {
	for promoted := false; ; promoted = true {
		_, err := zfsDo(ctx, "destroy", snap)
		if err == nil {
			return nil
		}
		clones, cerr := zfsClones(ctx, snap)
		if cerr != nil || len(clones) == 0 {
			return err
		}
		live := ""
		for _, c := range clones {
			switch {
			case c == ds || c == m.Dataset:
				live = c
			case !strings.Contains(c, zfsOld):
				return fmt.Errorf("it has dependent clones (%s): destroy them first", strings.Join(clones, ", "))
			}
		}
		if live == "" || promoted {
			_, err := zfsDo(ctx, "destroy", "-d", snap)
			return err
		}
		if _, err := zfsDo(ctx, "promote", live); err != nil {
			return err
		}
		if snap, err = zfsFind(ctx, m); err != nil || snap == "" {
			return err
		}
	}
}

// zfsClones lists the clones of snap: the datasets of its pool whose
// origin it is (zfs-fuse has no clones property).
func zfsClones(ctx context.Context, snap string) ([]string, error) {
	pool, _, _ := strings.Cut(snap, "/")
	pool, _, _ = strings.Cut(pool, "@")
	out, err := zfs(ctx, "get", "-H", "-r", "-o", "name,value", "origin", pool)
	if err != nil {
		return nil, err
	}
	var clones []string
	for _, l := range zfsLines(out) {
		if name, origin, _ := strings.Cut(l, "\t"); origin == snap {
			clones = append(clones, name)
		}
	}
	return clones, nil
}

// zfsCleanOld destroys ds's old datasets that hold no snapshot any more.
func zfsCleanOld(ctx context.Context, ds string) error {
	parent := ds
	if i := strings.LastIndexByte(ds, '/'); i >= 0 {
		parent = ds[:i]
	}
	out, err := zfs(ctx, "list", "-H", "-o", "name", "-d", "1", "-t", "filesystem,volume", parent)
	if err != nil {
		return err
	}
	var errs []error
	for _, old := range zfsLines(out) {
		if !strings.HasPrefix(old, ds+zfsOld) {
			continue
		}
		snaps, err := zfs(ctx, "list", "-H", "-o", "name", "-t", "snapshot", "-d", "1", old)
		if err == nil && snaps == "" {
			_, err = zfsDo(ctx, "destroy", old)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Release implements Backend: the snapshot is destroyed. One that is the
// origin of an old dataset of a swap is destroyed with it (zfs destroy
// -d); one with other clones is refused, naming them.
func (z *ZFS) Release(ctx context.Context, t Target, _, dir string) error {
	m, err := zfsReadMeta(dir)
	if errors.Is(err, os.ErrNotExist) {
		// No payload file: a snapshot that failed; a leftover has the
		// derived name.
		adir, aerr := filepath.Abs(dir)
		if ok, _ := z.Available(); !ok || t.Dataset == "" || !zfsValidName(t.Dataset) || aerr != nil {
			return nil
		}
		m = zfsMeta{Dataset: t.Dataset, Snapshot: zfsSnapName(t.Dataset, adir)}
	} else if err != nil {
		return fmt.Errorf("release zfs: %w", err)
	}
	if ok, why := z.Available(); !ok {
		return targetErr(t, "release %s: %s", m.Snapshot, why)
	}
	wrap := func(err error) error { return fmt.Errorf("release zfs %s: %w", m.Snapshot, err) }
	snap := m.Snapshot
	if m.GUID != "" {
		if snap, err = zfsFind(ctx, m); err != nil {
			return wrap(err)
		}
	} else if g, err := zfsGet(ctx, "guid", snap); err != nil {
		return wrap(err)
	} else if g == "" {
		snap = ""
	} else {
		m.GUID = g
	}
	if snap != "" {
		if err := zfsDestroySnap(ctx, m, t.Dataset, snap); err != nil {
			return wrap(err)
		}
	}
	if err := zfsCleanOld(ctx, m.Dataset); err != nil {
		return wrap(err)
	}
	return nil
}
