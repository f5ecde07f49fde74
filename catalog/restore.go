package catalog

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
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

// Restore writes the snapshot held by the archive name beneath into. The
// archive is verified in full first; every entry is checked before
// anything is written (no "..", no absolute path, no symlink pointing out
// of into, no duplicate, no device); the tree is built in a private
// staging directory inside into and moved into place only when complete,
// so a failure leaves nothing half-written. into must be empty (or
// missing) unless merge is set: then files of the archive replace those
// of the same name, and the rest of into is kept.
func (c *Catalog) Restore(name, into string, merge bool, progress Progress) (*RestoreResult, error) {
	r, err := openArchive(filepath.Join(c.Dir, name), c.Limits, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := r.check(name, progress); err != nil {
		return nil, prefix(name, err)
	}
	m, meta := r.manifest, r.meta // read and checked by check
	if err := checkRestorable(m); err != nil {
		return nil, prefix(name, err)
	}
	into, err = filepath.Abs(into)
	if err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	if err := prepareInto(into, merge); err != nil {
		return nil, err
	}
	var rb [6]byte
	rand.Read(rb[:])
	stageName := ".snapback-restore-" + hex.EncodeToString(rb[:])
	root, err := fsutil.OpenRoot(into)
	if err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	defer root.Close()
	if err := root.Mkdir(stageName, 0o700); err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	stage := filepath.Join(into, stageName)
	ok := false
	defer func() {
		if !ok {
			os.Chmod(stage, 0o700)
			filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
				if d != nil && d.IsDir() {
					os.Chmod(p, 0o700) // a restored 0500 directory must not keep its leftovers
				}
				return nil
			})
			os.RemoveAll(stage)
		}
	}()
	open := func(o snapshot.ObjectID) (io.ReadCloser, error) {
		rc, zf, err := r.open(objectsDir + o.String())
		if err != nil {
			return nil, err
		}
		return &checkedReader{rc: rc, want: o, h: sha256.New(), left: int64(zf.UncompressedSize64)}, nil
	}
	if err := snapshot.Materialize(stage, m, open); err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	res := &RestoreResult{Summary: r.summary}
	for i := range m {
		if m[i].Type == snapshot.File {
			res.Files++
		}
	}
	// Target payloads, as files, for the user to load by hand.
	if len(meta.Targets) > 0 {
		td := filepath.Join(stage, TargetsDirName)
		if err := os.Mkdir(td, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, wrap(CodeIO, err, "restore into %s", into)
		}
		for _, l := range r.index {
			rest, ok := strings.CutPrefix(l.name, targetsDir)
			if !ok {
				continue
			}
			if err := writeEntry(r, l.name, filepath.Join(td, filepath.FromSlash(rest))); err != nil {
				return nil, err
			}
		}
		res.Targets = len(meta.Targets)
	}
	if err := moveInto(root, stageName, "", merge); err != nil {
		return nil, wrap(CodeIO, err, "restore into %s", into)
	}
	ok = true
	if err := root.Rmdir(stageName); err != nil {
		return nil, wrap(CodeIO, err, "restore into %s: remove the staging directory", into)
	}
	return res, root.Sync()
}

// checkRestorable refuses a manifest that could write outside the
// directory it is restored into.
func checkRestorable(m snapshot.Manifest) error {
	for i := range m {
		e := &m[i]
		if e.Path != "" && !snapshot.ValidPath(e.Path) {
			return errf(CodeUnsafe, "path %q: not a relative path beneath the restore directory", e.Path)
		}
		switch e.Type {
		case snapshot.Absent, snapshot.File, snapshot.Dir, snapshot.Fifo:
		case snapshot.Symlink:
			if !symlinkStaysInside(e.Path, e.Target) {
				return errf(CodeUnsafe, "symlink %q points to %q, outside the restore directory", e.Path, e.Target)
			}
		default:
			return errf(CodeUnsafe, "path %q: a %s cannot be restored", e.Path, e.Type)
		}
		if e.Path == TargetsDirName || strings.HasPrefix(e.Path, TargetsDirName+"/") {
			return errf(CodeUnsafe, "path %q: the name is reserved for target payloads", e.Path)
		}
	}
	return nil
}

// symlinkStaysInside reports whether a symlink at p with this target
// resolves beneath the restore directory whatever the other symlinks
// there point to: a relative target whose leading ".." components do not
// climb above the directory and with no ".." after a name (a name may
// itself be a symlink, and ".." after it would leave from its target).
func symlinkStaysInside(p, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") {
		return false
	}
	depth := strings.Count(p, "/") // directories above the link, the root's level being 0
	named := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named || depth == 0 {
				return false
			}
			depth--
		default:
			named = true
		}
	}
	return true
}

// prepareInto makes into if missing, and refuses a non-empty one unless
// merging; into itself must be a directory, not a symlink.
func prepareInto(into string, merge bool) error {
	st, err := os.Lstat(into)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(into, 0o755); err != nil {
			return wrap(CodeIO, err, "restore into %s", into)
		}
		return nil
	}
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	if !st.IsDir() {
		return errf(CodeUnsafe, "restore into %s: not a directory (a symlink is not followed)", into)
	}
	if merge {
		return nil
	}
	f, err := os.Open(into)
	if err != nil {
		return wrap(CodeIO, err, "restore into %s", into)
	}
	defer f.Close() // read-only
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return errf(CodeNotEmpty, "restore into %s: the directory is not empty (use --merge to write into it)", into)
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
				if err := src.Rmdir(n); err != nil { // emptied: the directory there stays as it is
					return err
				}
				continue
			}
			if err := dst.RemoveAll(n); err != nil {
				return err
			}
		}
		if err := src.Rename(n, dst, n); err != nil {
			return err
		}
	}
	return nil
}

// writeEntry copies one archive entry to a new file at p (0600).
func writeEntry(r *reader, name, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return wrap(CodeIO, err, "restore %s", name)
	}
	rc, _, err := r.open(name)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return wrap(CodeIO, err, "restore %s", name)
	}
	_, err = io.Copy(f, rc)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrap(CodeIO, err, "restore %s", name)
	}
	return nil
}

// checkedReader hashes what it reads and fails at the end if the content
// is not the object it claims to be (the archive changed since verified).
type checkedReader struct {
	rc   io.ReadCloser
	want snapshot.ObjectID
	h    hash.Hash
	left int64 // bytes the verified entry holds: never more is written
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return 0, errf(CodeTooLarge, "object %s holds more than its verified size", c.want)
	}
	c.h.Write(p[:n])
	if err == io.EOF && hex.EncodeToString(c.h.Sum(nil)) != c.want.String() {
		return n, errf(CodeChecksum, "object %s changed since it was verified", c.want)
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.rc.Close() }
