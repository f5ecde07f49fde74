//go:build linux

package zfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay"
)

// MountDir holds the clones' mount points (a directory each, named after
// the clone), outside every project: the view helper covers it, so the
// command sees neither clone but through the view.
const MountDir = "/run/snapback/zfs"

// Clones are the names one run's view is made of, saved in the run's
// record before any of them is made, so that a crash leaves nothing
// unnamed: recovery destroys what exists of them.
type Clones struct {
	Dataset string `json:"dataset"`       // the project's dataset
	Sub     string `json:"sub,omitempty"` // the root below the dataset's mount point ("" at it)
	Snap    string `json:"snap"`          // DATASET@snapback-ID
	View    string `json:"view"`          // the clone the command writes
	Base    string `json:"base"`          // the read-only clone it is compared with
	// Taken is when the snapshot was taken (Unix seconds, from just
	// before), for [WriteLayer].
	Taken int64 `json:"taken,omitempty"`
}

// ViewDir and BaseDir are where the clones are mounted.
func (c *Clones) ViewDir() string { return filepath.Join(MountDir, lastName(c.View)) }
func (c *Clones) BaseDir() string { return filepath.Join(MountDir, lastName(c.Base)) }

// ViewRoot and BaseRoot are the project's root in each clone.
func (c *Clones) ViewRoot() string { return filepath.Join(c.ViewDir(), filepath.FromSlash(c.Sub)) }
func (c *Clones) BaseRoot() string { return filepath.Join(c.BaseDir(), filepath.FromSlash(c.Sub)) }

func lastName(ds string) string { return ds[strings.LastIndexByte(ds, '/')+1:] }

// dataset is the ZFS dataset mounted where root lies, with its mount
// point, from this process's mountinfo ("" when root is on no dataset).
func dataset(root string) (ds, mnt string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	root = filepath.Clean(root)
	best := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		p := overlay.UnescapeMount(f[4])
		if p != root && !strings.HasPrefix(root, strings.TrimSuffix(p, "/")+"/") || len(p) < len(best) {
			continue
		}
		best = p
		ds, mnt = "", p
		if t := f[sep+1]; t == "zfs" || t == "fuse.zfs" {
			ds = f[sep+2]
		}
	}
	return ds, mnt
}

// Check says whether a zfs view works for the project at root, and why
// not: root must lie in a mounted ZFS dataset that zfs answers for, with
// no other filesystem mounted below it, and snapback must be root (the
// clones are made and mounted as root).
func Check(root string) (bool, string) {
	if why := overlay.Uncovered(root); why != "" {
		return false, why
	}
	ds, _ := dataset(root)
	if ds == "" {
		return false, fmt.Sprintf("%s is on %s, not on a ZFS dataset", root, overlay.FSType(root))
	}
	if os.Geteuid() != 0 {
		return false, "the zfs mode needs root: the dataset's snapshot and clones are made and mounted as root"
	}
	if _, err := zfs("list", "-H", "-o", "name", ds); err != nil {
		return false, fmt.Sprintf("zfs does not answer for %s: %v", ds, err)
	}
	if subs := overlay.Submounts(root); len(subs) > 0 {
		return false, fmt.Sprintf("%s is a mount point below the root (a dataset of its own, or another filesystem): a clone of %s does not hold it, so the command would see an empty directory there", subs[0], ds)
	}
	return true, fmt.Sprintf("%s lies in the ZFS dataset %s", root, ds)
}

// Names are the clones of run id of the project at root (nothing is made).
func Names(root, id string) (*Clones, error) {
	ds, mnt := dataset(root)
	if ds == "" {
		return nil, fmt.Errorf("%s is on no ZFS dataset", root)
	}
	sub, err := filepath.Rel(mnt, filepath.Clean(root))
	if err != nil {
		return nil, err
	}
	if sub == "." {
		sub = ""
	}
	// The clones live at the pool's top, named after the dataset too, so
	// that two projects' runs of the same id do not meet.
	h := sha256.Sum256([]byte(ds))
	pool, _, _ := strings.Cut(ds, "/")
	name := fmt.Sprintf("%s/snapback-%s-%s", pool, hex.EncodeToString(h[:4]), id)
	return &Clones{Dataset: ds, Sub: filepath.ToSlash(sub), Snap: ds + "@snapback-" + id, View: name + "-view", Base: name + "-base",
		Taken: time.Now().Unix()}, nil
}

// Make takes the snapshot and makes both clones, mounted under MountDir.
func (c *Clones) Make() error {
	if _, err := zfsDo("snapshot", c.Snap); err != nil {
		return err
	}
	if _, err := zfsDo("clone", "-o", "mountpoint="+c.ViewDir(), c.Snap, c.View); err != nil {
		return err
	}
	_, err := zfsDo("clone", "-o", "readonly=on", "-o", "mountpoint="+c.BaseDir(), c.Snap, c.Base)
	return err
}

// Complete reports whether both clones exist: from when [Clones.Make]
// has made the base (the last) until [Clones.Destroy] destroys the view
// (the first), the layer may still have to be written from them. Before,
// no command ran in the view; after, the layer is whole.
func (c *Clones) Complete() (bool, error) {
	for _, ds := range []string{c.View, c.Base} {
		_, err := zfs("list", "-H", "-o", "name", ds)
		if err != nil && strings.Contains(err.Error(), "does not exist") {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// Destroy destroys the view clone, then the base, then the snapshot (the
// order Exists relies on), each missing one being no error, and removes
// the clones' mount points.
func (c *Clones) Destroy() error {
	for _, ds := range []string{c.View, c.Base, c.Snap} {
		if _, err := zfsDo("destroy", ds); err != nil && !strings.Contains(err.Error(), "does not exist") {
			return err
		}
	}
	for _, d := range []string{c.ViewDir(), c.BaseDir()} {
		fsutil.Mutating()
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the mount point %s: %w", d, err)
		}
	}
	return nil
}

// zfsDo runs a zfs command that changes the pool (fsutil.ZFSChange).
// zfs-fuse lets go of a view's clone seconds after its unmount on a busy
// machine, once the view's mount namespace is gone too: 30 s.
func zfsDo(args ...string) (string, error) {
	return fsutil.ZFSChange(context.Background(), 30*time.Second, args...)
}

// zfs runs the zfs command (fsutil.ZFS).
func zfs(args ...string) (string, error) { return fsutil.ZFS(context.Background(), args...) }
