package catalog

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// RestoreResult says what a restore wrote.
type RestoreResult struct {
	Summary *Summary
	Files   int
	Targets int // target payloads written under .snapback-targets/
}

// TargetsDirName is where a restore puts the archive's target payloads,
// beneath DIR: databases and volumes are not restored in place by an
// archive restore (that is what undo and restore do from the store).
const TargetsDirName = ".snapback-targets"

// RestoreOptions say how a restore writes.
type RestoreOptions struct {
	// Merge writes into a non-empty directory: files of the archive
	// replace those of the same name, the rest is kept.
	Merge bool
	// KeepPrivileges keeps what an untrusted archive should not grant by
	// default: setuid and setgid bits, security.* and trusted.* xattrs
	// (file capabilities among them) and owners other than the restoring
	// user (as tar's --same-owner and --xattrs do).
	KeepPrivileges bool
}

// Restore writes the snapshot held by the archive name beneath into. The
// archive is verified in full first; every entry is checked before
// anything is written (no "..", no absolute path, no duplicate, no
// device, no .snapback component at any depth), and into must not be in
// or be a store. Symlinks are recreated exactly as
// archived; no path is ever written through a symlink.
//
// When into is missing or empty, the tree is built in a private sibling
// directory and renamed into place: a restore killed at any moment
// leaves into as it was, and the next restore sweeps what it left. Else
// (merging, or into a mount point) the tree is built in a private
// directory inside into and moved in name by name: a killed restore is
// undone by the next one (fresh) or redone by it (merge).
//
// Cancelling ctx (Ctrl-C) before the tree is in place removes what was
// built and leaves into as it was (CodeInterrupted); once the tree is
// moving in, the restore finishes.
func (c *Catalog) Restore(ctx context.Context, name, into string, o RestoreOptions, progress Progress) (*RestoreResult, error) {
	r, err := openArchive(filepath.Join(c.Dir, name), c.Limits, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return restore(ctx, r, name, into, o, progress)
}

// RestoreFile restores the archive file at p, anywhere (a copy on a USB
// stick), checked in place like a catalog's (but for its owner and mode).
func RestoreFile(ctx context.Context, p string, lim Limits, into string, o RestoreOptions, progress Progress) (*RestoreResult, error) {
	r, err := openArchive(p, lim, false)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return restore(ctx, r, looseName(p), into, o, progress)
}

// looseName is the name an archive file outside a catalog is checked
// against: its own when it is named like an archive, else none.
func looseName(p string) string {
	if _, ok := IDOf(filepath.Base(p)); ok {
		return filepath.Base(p)
	}
	return ""
}

func restore(ctx context.Context, r *reader, name, into string, o RestoreOptions, progress Progress) (*RestoreResult, error) {
	into, err := filepath.Abs(into)
	if err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	if err := refuseStoreTarget(into); err != nil {
		return nil, err
	}
	if err := r.check(ctx, name, progress); err != nil {
		return nil, prefix(displayName(name), err)
	}
	m := r.manifest // read and checked by check
	if err := checkRestorable(m); err != nil {
		return nil, prefix(displayName(name), err)
	}
	if !o.KeepPrivileges {
		m = dropPrivileges(m)
	}
	for _, l := range r.index {
		if rest, ok := strings.CutPrefix(l.name, targetsDir); ok && inStore(rest) {
			return nil, prefix(displayName(name), errf(CodeStoreEntry, "target payload %q: an archive never writes a project's store", l.name))
		}
	}
	res := &RestoreResult{Summary: r.summary}
	for i := range m {
		if m[i].Type == record.File {
			res.Files++
		}
	}
	if len(r.meta.Targets) > 0 {
		res.Targets = len(r.meta.Targets)
	}
	build := func(stage string) error {
		open := func(o record.ObjectID) (io.ReadCloser, error) {
			if ctx.Err() != nil {
				return nil, interrupted(ctx, "restore into "+into)
			}
			rc, zf, err := r.open(objectsDir + o.String())
			if err != nil {
				return nil, err
			}
			return &boundedReader{ctx: ctx, rc: rc, want: o, left: int64(zf.UncompressedSize64)}, nil
		}
		// The applier hashes every content as it writes it: one that
		// changed since it was verified stops the restore there.
		var de *snapshot.DamagedError
		err := snapshot.Materialize(stage, m, open)
		if ctx.Err() != nil {
			return interrupted(ctx, "restore into "+into)
		}
		if errors.As(err, &de) {
			return errf(CodeChecksum, "object %s changed since it was verified", de.Object)
		} else if err != nil {
			return wrap(CodeIO, err, "restore into %s", into)
		}
		if res.Targets == 0 {
			return nil
		}
		// Target payloads, as files, for the user to load by hand.
		td := filepath.Join(stage, TargetsDirName)
		if err := os.Mkdir(td, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return wrap(CodeIO, err, "restore into %s", into)
		}
		for _, l := range r.index {
			if rest, ok := strings.CutPrefix(l.name, targetsDir); ok {
				if err := writeEntry(ctx, r, l, filepath.Join(td, filepath.FromSlash(rest))); err != nil {
					return err
				}
			}
		}
		if ctx.Err() != nil { // the last moment a stop leaves into as it was
			return interrupted(ctx, "restore into "+into)
		}
		return nil
	}
	parent, base := filepath.Dir(into), filepath.Base(into)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	sweepDead(parent, "."+base+restoreTag)
	st, err := os.Lstat(into)
	exists := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, wrap(CodeIO, err, "restore into %s", into)
	case !st.IsDir():
		return nil, errf(CodeUnsafe, "restore into %s: not a directory (a symlink is not followed)", into)
	default:
		if err := undoDead(into); err != nil {
			return nil, err
		}
	}
	empty := true
	if exists {
		if empty, err = isEmpty(into); err != nil {
			return nil, err
		}
	}
	if !empty && !o.Merge {
		return nil, errf(CodeNotEmpty, "restore into %s: the directory is not empty (use --merge to write into it)", into)
	}
	if empty {
		done, err := restoreAside(parent, base, st, build)
		if done || err != nil {
			return res, err
		}
	}
	if !exists {
		if err := os.Mkdir(into, 0o755); err != nil {
			return nil, wrap(CodeIO, err, "restore into %s", into)
		}
	}
	err = restoreInPlace(into, !empty, build)
	if err != nil && !exists {
		fsutil.Mutating()
		os.Remove(into) // made here: gone again unless something was moved in (then it is not empty)
	}
	return res, err
}

// restoreTag marks the private directories a restore builds in.
const restoreTag = ".snapback-restore-"

// displayName names an archive in errors ("" for a loose file).
func displayName(name string) string {
	if name == "" {
		return "file"
	}
	return name
}

// stageDir makes a private staging directory name beneath d and holds a
// lock on it for as long as the returned file is open: a later restore
// that can take the lock knows its maker is dead.
func stageDir(d *fsutil.Dir, name string) (*os.File, error) {
	if err := d.Mkdir(name, 0o700); err != nil {
		return nil, err
	}
	f, err := d.Open(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// restoreAside builds the tree in a sibling of into and renames it into
// place (over into when into is an empty directory). done is false when
// that cannot be done here (into is a mount point, or its parent is not
// writable): the caller then restores in place.
func restoreAside(parent, base string, st os.FileInfo, build func(string) error) (done bool, err error) {
	if st != nil {
		pst, err := os.Stat(parent)
		if err != nil || pst.Sys().(*syscall.Stat_t).Dev != st.Sys().(*syscall.Stat_t).Dev {
			return false, nil // a mount point: a rename cannot replace it
		}
	}
	pd, err := fsutil.OpenRoot(parent)
	if err != nil {
		return false, wrap(CodeIO, err, "restore into %s", filepath.Join(parent, base))
	}
	defer pd.Close()
	var rb [6]byte
	rand.Read(rb[:])
	stageName := "." + base + restoreTag + hex.EncodeToString(rb[:])
	lock, err := stageDir(pd, stageName)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
		return false, nil
	}
	if err != nil {
		return false, wrap(CodeIO, err, "restore into %s", filepath.Join(parent, base))
	}
	defer lock.Close()
	stage := filepath.Join(parent, stageName)
	into := filepath.Join(parent, base)
	ok := false
	defer func() {
		if !ok {
			removeTree(stage)
		}
	}()
	fsutil.CrashPoint("archive-restore-staged")
	if err := build(stage); err != nil {
		return false, err
	}
	// The tree's root takes into's place: give it into's mode and owner
	// (a new one gets 0755, as mkdir -p would).
	mode, uid, gid := os.FileMode(0o755), os.Geteuid(), os.Getegid()
	if st != nil {
		sys := st.Sys().(*syscall.Stat_t)
		mode, uid, gid = st.Mode().Perm(), int(sys.Uid), int(sys.Gid)
	}
	if err := os.Lchown(stage, uid, gid); err != nil && os.Geteuid() == 0 {
		return false, wrap(CodeIO, err, "restore into %s", into)
	}
	if err := os.Chmod(stage, mode); err != nil {
		return false, wrap(CodeIO, err, "restore into %s", into)
	}
	fsutil.CrashPoint("archive-restore-built")
	if st == nil {
		err = pd.RenameNoReplace(stageName, pd, base)
	} else {
		err = pd.Rename(stageName, pd, base)
	}
	switch {
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY):
		return false, errf(CodeNotEmpty, "restore into %s: something appeared there during the restore; nothing written", into)
	case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV):
		return false, nil
	case err != nil:
		return false, wrap(CodeIO, err, "restore into %s", into)
	}
	ok = true
	fsutil.CrashPoint("archive-restore-renamed")
	if err := pd.Sync(); err != nil {
		return true, wrap(CodeIO, err, "restore into %s", into)
	}
	return true, nil
}

// Inside into, a staging directory holds the tree being moved in and,
// for a restore into an empty directory, the list of the names it moves
// (what a killed restore's successor removes to undo it).
const (
	stageTree   = "tree"
	stageMoving = "moving"
)

// restoreInPlace builds the tree in a staging directory inside into and
// moves it in; merge replaces same-named entries and keeps the rest.
func restoreInPlace(into string, merge bool, build func(string) error) error {
	root, err := fsutil.OpenRoot(into)
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	defer root.Close()
	var rb [6]byte
	rand.Read(rb[:])
	stageName := restoreTag + hex.EncodeToString(rb[:])
	lock, err := stageDir(root, stageName)
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	defer lock.Close()
	stage := filepath.Join(into, stageName)
	moving := false
	defer func() {
		if !moving {
			removeTree(stage)
		}
	}()
	tree := filepath.Join(stageName, stageTree)
	if err := root.Mkdir(tree, 0o700); err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	fsutil.CrashPoint("archive-restore-staged")
	if err := build(filepath.Join(into, tree)); err != nil {
		return err
	}
	if !merge {
		td, err := root.OpenDir(tree)
		if err != nil {
			return wrap(CodeIO, err, "restore into %s", into)
		}
		names, err := td.ReadDirNames()
		td.Close()
		if err == nil {
			err = fsutil.WriteFileAtomic(filepath.Join(stage, stageMoving), []byte(strings.Join(names, "\x00")), 0o600)
		}
		if err != nil {
			return wrap(CodeIO, err, "restore into %s", into)
		}
	}
	fsutil.CrashPoint("archive-restore-built")
	moving = true
	if err := moveInto(root, tree, "", merge); err != nil {
		return wrap(CodeIO, err, "restore into %s (run the restore again to finish or undo it)", into)
	}
	if err := root.Sync(); err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	fsutil.CrashPoint("archive-restore-moved")
	// Everything is in: the staging directory holds only empty
	// directories and the list.
	if err := removeTree(stage); err != nil {
		return wrap(CodeIO, err, "restore into %s: remove the staging directory", into)
	}
	return root.Sync()
}

// sweepDead removes the staging directories named prefix* in dir whose
// restore is dead (no one holds their lock).
func sweepDead(dir, prefix string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && dead(filepath.Join(dir, e.Name())) {
			removeTree(filepath.Join(dir, e.Name())) // best effort: never visible as into
		}
	}
}

// dead reports whether no live restore holds the staging directory p.
func dead(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close() // the lock goes with it
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// undoDead finishes with the staging directories a killed restore left
// inside into: one that was moving a tree into an empty directory is
// undone (the names it moved in are removed, so into is empty again);
// one that was merging is dropped (what it moved in stays; a merge
// again writes the rest).
func undoDead(into string) error {
	ents, err := os.ReadDir(into)
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	for _, e := range ents {
		stage := filepath.Join(into, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), restoreTag) || !dead(stage) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(stage, stageMoving)); err == nil {
			root, err := fsutil.OpenRoot(into)
			if err != nil {
				return wrap(CodeIO, err, "restore into %s", into)
			}
			for _, n := range strings.Split(string(b), "\x00") {
				if !fsutil.ValidName(n) || strings.HasPrefix(n, restoreTag) {
					continue
				}
				if _, err := os.Lstat(filepath.Join(stage, stageTree, n)); err == nil {
					continue // not moved in yet
				}
				if err := removeIn(root, n); err != nil {
					root.Close()
					return wrap(CodeIO, err, "restore into %s: undo a killed restore", into)
				}
			}
			root.Close()
		}
		if err := removeTree(stage); err != nil {
			return wrap(CodeIO, err, "restore into %s: remove a killed restore's staging", into)
		}
	}
	return nil
}

// removeIn removes name beneath root, read-only directories included,
// following no symlink.
func removeIn(root *fsutil.Dir, name string) error {
	st, err := root.Lstat(name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		root.Chmod(name, 0o700) // a restored 0500 directory must not keep its contents
		sub, err := root.OpenDir(name)
		if err != nil {
			return err
		}
		names, err := sub.ReadDirNames()
		for _, n := range names {
			if err == nil {
				err = removeIn(sub, n)
			}
		}
		sub.Close()
		if err != nil {
			return err
		}
	}
	return root.RemoveAll(name)
}

// removeTree removes a staging directory of ours, whatever modes the
// restored tree in it has.
func removeTree(p string) error {
	parent, err := fsutil.OpenRoot(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer parent.Close()
	return removeIn(parent, filepath.Base(p))
}

// isEmpty reports whether the directory p holds nothing.
func isEmpty(p string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, wrap(CodeIO, err, "restore into %s", p)
	}
	defer f.Close() // read-only
	names, _ := f.Readdirnames(1)
	return len(names) == 0, nil
}

// dropPrivileges returns m without what an archive from elsewhere should
// not grant: setuid and setgid bits, security.* and trusted.* xattrs
// (file capabilities, SELinux labels, overlayfs metadata), and owners
// other than the restoring user.
func dropPrivileges(m record.Manifest) record.Manifest {
	out := make(record.Manifest, len(m))
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	for i, e := range m {
		e.Mode &^= unix.S_ISUID | unix.S_ISGID
		e.UID, e.GID = uid, gid
		var xs []fsutil.Xattr
		for _, x := range e.Xattrs {
			if !strings.HasPrefix(x.Name, "security.") && !strings.HasPrefix(x.Name, "trusted.") {
				xs = append(xs, x)
			}
		}
		e.Xattrs = xs
		out[i] = e
	}
	return out
}

// checkRestorable refuses a manifest restore cannot write beneath the
// directory it is restored into. Symlinks are data: they are recreated
// as archived, wherever they point, and never followed while writing.
func checkRestorable(m record.Manifest) error {
	for i := range m {
		e := &m[i]
		if e.Path != "" && !record.ValidPath(e.Path) {
			return errf(CodeUnsafe, "path %q: not a relative path beneath the restore directory", e.Path)
		}
		switch e.Type {
		case record.Absent, record.File, record.Dir, record.Fifo, record.Symlink:
		default:
			return errf(CodeUnsafe, "path %q: a %s cannot be restored", e.Path, e.Type)
		}
		if e.Path == TargetsDirName || strings.HasPrefix(e.Path, TargetsDirName+"/") {
			return errf(CodeUnsafe, "path %q: the name is reserved for target payloads", e.Path)
		}
		if inStore(e.Path) {
			return errf(CodeStoreEntry, "path %q: an archive never writes a project's store (a %s directory, at any depth)", e.Path, snapshot.StoreDir)
		}
	}
	return nil
}

// inStore reports whether the slash-separated path p has a component
// named like a store: written anywhere, the directory holding it would
// be a project whose store the archive wrote (a planted journal is
// "finished" by the next snapback there, over that project's tree).
func inStore(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == snapshot.StoreDir {
			return true
		}
	}
	return false
}

// refuseStoreTarget refuses to restore into a store, or beneath one, or
// into a path that would make one: no component of into, as written or
// as the kernel resolves its existing part (a symlink to a store), is
// named .snapback.
func refuseStoreTarget(into string) error {
	refuse := func(p string) error {
		return errf(CodeStoreEntry, "restore into %s: %s is a project's store (or would become one); a restore never writes into a store", into, p)
	}
	if inStore(filepath.ToSlash(into)) {
		return refuse(into)
	}
	p := into
	for {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		up := filepath.Dir(p)
		if up == p {
			return nil
		}
		p = up
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	if inStore(filepath.ToSlash(real)) {
		return refuse(real)
	}
	return nil
}

// moveInto moves the entries of root/stage/rel into root/rel: a name not
// there is renamed in; with merge, a directory on both sides is merged
// and anything else replaced.
func moveInto(root *fsutil.Dir, stage, rel string, merge bool) error {
	src, err := root.OpenDir(filepath.Join(stage, rel))
	if err != nil {
		return err
	}
	defer src.Close()
	names, err := src.ReadDirNames()
	if err != nil {
		return err
	}
	dst, err := root.OpenDir(rel)
	if err != nil {
		return err
	}
	defer dst.Close()
	for _, n := range names {
		st, err := dst.Lstat(n)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return err
		case !merge:
			return fmt.Errorf("%s appeared during the restore", filepath.Join(rel, n))
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			sst, err := src.Lstat(n)
			if err != nil {
				return err
			}
			if sst.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := moveInto(root, stage, filepath.Join(rel, n), merge); err != nil {
					return err
				}
				// Emptied: the directory there takes the archive's mode,
				// owner and time, which moving entries in has disturbed.
				if err := dst.Chmod(n, uint32(sst.Mode)&07777); err != nil {
					return err
				}
				if os.Geteuid() == 0 {
					if err := dst.Lchown(n, int(sst.Uid), int(sst.Gid)); err != nil {
						return err
					}
				}
				if err := dst.SetTimes(n, time.Unix(sst.Mtim.Unix())); err != nil {
					return err
				}
				if err := src.Rmdir(n); err != nil {
					return err
				}
				continue
			}
			if err := dst.RemoveAll(n); err != nil {
				return err
			}
		default:
			// A file or symlink there: a rename replaces it, but not with
			// a directory; the link itself goes, never what it points to.
			if sst, err := src.Lstat(n); err != nil {
				return err
			} else if sst.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := dst.Unlink(n); err != nil {
					return err
				}
			}
		}
		if err := src.Rename(n, dst, n); err != nil {
			return err
		}
		fsutil.CrashPoint("archive-restore-move")
	}
	return nil
}

// writeEntry copies one archive entry to a new file at p (0600),
// checking its SHA-256 against the index as it goes: a target payload is
// content like any other.
func writeEntry(ctx context.Context, r *reader, l indexLine, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return wrap(CodeIO, err, "restore %s", l.name)
	}
	rc, _, err := r.open(l.name)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return wrap(CodeIO, err, "restore %s", l.name)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, rc}, l.size+1))
	if ctx.Err() != nil {
		err = interrupted(ctx, "restore "+l.name)
	}
	if err == nil && (n != l.size || !bytes.Equal(h.Sum(nil), l.sum[:])) {
		err = errf(CodeChecksum, "restore %s: it changed since it was verified", l.name)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if CodeOf(err) != "" {
		return err
	}
	if err != nil {
		return wrap(CodeIO, err, "restore %s", l.name)
	}
	return nil
}

// boundedReader stops a content at its verified size: never more is
// written (its hash is checked by the applier as it writes).
type boundedReader struct {
	ctx  context.Context // a stop ends the read
	rc   io.ReadCloser
	want record.ObjectID
	left int64 // bytes the verified entry holds
}

func (c *boundedReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, interrupted(c.ctx, "restore")
	}
	n, err := c.rc.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return 0, errf(CodeTooLarge, "object %s holds more than its verified size", c.want)
	}
	return n, err
}

func (c *boundedReader) Close() error { return c.rc.Close() }
