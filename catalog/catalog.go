package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/snapback/snapback/snapshot"
)

// Catalog is a directory of archives. The directory is the truth: there
// is no index file, every listing reads (and verifies) the archives.
type Catalog struct {
	Dir    string
	Limits Limits
}

// Scan bounds: a listing looks at no more than this.
const (
	MaxCandidates = 1000
	MaxDirEntries = 10000
	MaxScanBytes  = 4 << 30
)

// Open checks the catalog directory: an absolute path with no symlink in
// any component, a directory owned by the user with mode 0700. With
// create, a missing directory is made so (its missing parents 0700 too).
// It then finishes or rolls back a prune apply that was killed
// (recoverPrunes).
func Open(dir string, create bool) (*Catalog, error) {
	if dir == "" {
		return nil, errf(CodeNoCatalog, "no catalog: give --catalog DIR or set [archive] destination in snapback.toml")
	}
	// The path is taken as written: a ".." after a symlink would lead
	// where the kernel goes, not where the text says, and a relative path
	// would depend on the working directory.
	if !filepath.IsAbs(dir) {
		return nil, errf(CodeBadPath, "catalog %s: not an absolute path", dir)
	}
	for _, c := range strings.Split(dir, "/") {
		if c == ".." {
			return nil, errf(CodeBadPath, "catalog %s: a path with \"..\" is refused (write it without)", dir)
		}
		// A store is a project's own: its files are read as records.
		if c == snapshot.StoreDir {
			return nil, errf(CodeBadPath, "catalog %s: a catalog is never inside a project's store (%s); use a directory of its own", dir, snapshot.StoreDir)
		}
	}
	abs := filepath.Clean(dir)
	// Each component, from the top: never a symlink.
	parts := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	p := "/"
	for i, part := range parts {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) && create {
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, wrap(CodeIO, err, "catalog %s: make %s", abs, p)
			}
			st, err = os.Lstat(p)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errf(CodeNotFound, "catalog %s: %s does not exist", abs, p)
		}
		if err != nil {
			return nil, wrap(CodeIO, err, "catalog %s", abs)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil, errf(CodeInsecure, "catalog %s: %s is a symlink (a catalog's path must have none)", abs, p)
		}
		if !st.IsDir() {
			return nil, errf(CodeInsecure, "catalog %s: %s is not a directory", abs, p)
		}
		if i == len(parts)-1 {
			sys := st.Sys().(*syscall.Stat_t)
			if int(sys.Uid) != os.Geteuid() {
				return nil, errf(CodeInsecure, "catalog %s: owned by uid %d, not by you (uid %d)", abs, sys.Uid, os.Geteuid())
			}
			if st.Mode().Perm() != 0o700 {
				return nil, errf(CodeInsecure, "catalog %s: mode %04o, want 0700 (chmod 700 %s)", abs, st.Mode().Perm(), abs)
			}
		}
	}
	c := &Catalog{Dir: abs, Limits: DefaultLimits}
	// A prune apply killed half-way is finished or rolled back first, so
	// that no verb sees, and no archive stays in, its staging directory.
	if err := c.recoverPrunes(); err != nil {
		return nil, err
	}
	return c, nil
}

// Path is where the archive with this id lives.
func (c *Catalog) Path(id string) string { return filepath.Join(c.Dir, FileName(id)) }

// stamp is what stat says of one name: a change to the file's content,
// owner, mode or place shows in it (ctime too, which no one can set back
// as they can the mtime).
type stamp struct {
	dev, ino     uint64
	mode         uint32 // st_mode: type and permissions
	uid, gid     uint32
	size         int64
	mtime, ctime int64 // ns
}

func stampOf(st os.FileInfo) stamp {
	sys := st.Sys().(*syscall.Stat_t)
	mtime, ctime := statTimes(sys)
	return stamp{dev: uint64(sys.Dev), ino: uint64(sys.Ino), mode: uint32(sys.Mode), uid: sys.Uid, gid: sys.Gid, size: sys.Size,
		mtime: mtime, ctime: ctime}
}

func (s stamp) String() string {
	return fmt.Sprintf("dev %d ino %d mode %o uid %d gid %d size %d mtime %d ctime %d", s.dev, s.ino, s.mode, s.uid, s.gid, s.size, s.mtime, s.ctime)
}

// dirEntry is one name of the catalog directory, as a fingerprint sees it.
type dirEntry struct {
	name  string
	size  int64
	mode  fs.FileMode
	stamp stamp
}

// dirIdentity is the catalog directory's own identity: the same path
// holding another directory (moved there, mounted over) is another
// catalog. Its times are not in it: every create changes them.
func dirIdentity(st os.FileInfo) string {
	s := stampOf(st)
	return fmt.Sprintf("dev %d ino %d mode %o uid %d gid %d", s.dev, s.ino, s.mode, s.uid, s.gid)
}

// readDir lists the catalog, bounded, and fingerprints what it saw: the
// directory's identity and every name's full stamp.
func (c *Catalog) readDir() ([]dirEntry, string, error) {
	f, err := os.Open(c.Dir)
	if err != nil {
		return nil, "", wrap(CodeIO, err, "catalog %s", c.Dir)
	}
	defer f.Close() // read-only
	dst, err := f.Stat()
	if err != nil {
		return nil, "", wrap(CodeIO, err, "catalog %s", c.Dir)
	}
	names, err := f.Readdirnames(MaxDirEntries + 1)
	if err != nil && len(names) == 0 && !errors.Is(err, io.EOF) {
		return nil, "", wrap(CodeIO, err, "catalog %s", c.Dir)
	}
	if len(names) > MaxDirEntries {
		return nil, "", errf(CodeTooLarge, "catalog %s: more than %d entries; move some away", c.Dir, MaxDirEntries)
	}
	sort.Strings(names)
	var out []dirEntry
	for _, n := range names {
		st, err := os.Lstat(filepath.Join(c.Dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", errf(CodeChanged, "catalog %s changed during the scan (%s went away); try again", c.Dir, n)
		}
		if err != nil {
			return nil, "", wrap(CodeIO, err, "catalog %s", c.Dir)
		}
		out = append(out, dirEntry{name: n, size: st.Size(), mode: st.Mode(), stamp: stampOf(st)})
	}
	return out, fingerprint(dirIdentity(dst), out, nil), nil
}

// fingerprint hashes the directory's identity and the entries' stamps,
// but those named in skip.
func fingerprint(dir string, ents []dirEntry, skip map[string]bool) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", dir)
	for _, e := range ents {
		if !skip[e.name] {
			fmt.Fprintf(h, "%q %s\n", e.name, e.stamp)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Listed is one archive a listing accepted, after full verification.
type Listed struct {
	Summary
	File string // its file name in the catalog
}

// Rejected is a candidate that failed verification; it is left in place.
type Rejected struct {
	ID    string `json:"id"`
	File  string `json:"file"`
	Error string `json:"error"`
	Msg   string `json:"message"`
}

// Listing is the result of a scan: valid archives (oldest snapshot first),
// rejected candidates, and the fingerprint of what was scanned.
type Listing struct {
	Archives    []Listed
	Rejected    []Rejected
	Fingerprint string
	// VerifiedAt is when this scan finished verifying them.
	VerifiedAt time.Time

	ents []dirEntry // what the scan saw, with each name's stamp
	dir  string     // the directory's identity
}

// Of returns the archives of the project with this id, oldest first.
func (l *Listing) Of(projectID string) []Listed {
	var out []Listed
	for _, a := range l.Archives {
		if a.ProjectID == projectID {
			out = append(out, a)
		}
	}
	return out
}

// List verifies every candidate (a file named like an archive), within
// the scan bounds, and reports the valid and the invalid ones; other
// files are ignored and left alone. A catalog that changes during the
// scan is an error (CodeChanged), not a half listing.
//
// Cancelling ctx stops the scan (CodeInterrupted); it changes nothing.
func (c *Catalog) List(ctx context.Context, progress Progress) (*Listing, error) {
	ents, fp, err := c.readDir()
	if err != nil {
		return nil, err
	}
	l := &Listing{Fingerprint: fp, ents: ents}
	if l.dir, err = c.identity(); err != nil {
		return nil, err
	}
	var scanned int64
	n := 0
	for _, e := range ents {
		id, ok := IDOf(e.name)
		if !ok {
			continue // not a candidate: unknown files are none of our business
		}
		// Past the bounds the scan refuses rather than list part of the
		// catalog as if it were all of it.
		if n == MaxCandidates {
			return nil, errf(CodeTooLarge, "catalog %s: more than %d archives; split the catalog (move some archives to another directory)", c.Dir, MaxCandidates)
		}
		if scanned+e.size > MaxScanBytes {
			return nil, errf(CodeTooLarge, "catalog %s: more than %d GiB of archives; split the catalog (move some archives to another directory)", c.Dir, MaxScanBytes>>30)
		}
		n++
		if ctx.Err() != nil {
			return nil, interrupted(ctx, "list "+c.Dir)
		}
		if err := regularMode(e.name, e.mode); err != nil {
			// Looked at, never opened: a FIFO would block, a symlink lead
			// out of the catalog.
			l.Rejected = append(l.Rejected, Rejected{ID: id, File: e.name, Error: CodeOf(err), Msg: err.Error()})
			continue
		}
		scanned += e.size
		s, err := c.verifyFile(ctx, e.name, progress)
		if isInterrupted(err) {
			return nil, err
		}
		if err != nil {
			l.Rejected = append(l.Rejected, Rejected{ID: id, File: e.name, Error: CodeOf(err), Msg: err.Error()})
			continue
		}
		l.Archives = append(l.Archives, Listed{Summary: *s, File: e.name})
	}
	if _, fp2, err := c.readDir(); err != nil {
		return nil, err
	} else if fp2 != fp {
		return nil, errf(CodeChanged, "catalog %s changed during the scan; try again", c.Dir)
	}
	// Oldest first by the state they hold: an old snapshot archived
	// late is still old (retention keeps the newest states, not the
	// newest files).
	sort.SliceStable(l.Archives, func(i, j int) bool { return l.Archives[i].older(&l.Archives[j].Summary) })
	l.VerifiedAt = time.Now().UTC()
	return l, nil
}

// older orders archives by their snapshot's capture time, then by when
// they were written, then by id: one order, whatever the scan met first.
func (s *Summary) older(t *Summary) bool {
	switch {
	case !s.SnapshotCreatedAt.Equal(t.SnapshotCreatedAt):
		return s.SnapshotCreatedAt.Before(t.SnapshotCreatedAt)
	case !s.CreatedAt.Equal(t.CreatedAt):
		return s.CreatedAt.Before(t.CreatedAt)
	}
	return s.ID < t.ID
}

// identity is the catalog directory's identity (see dirIdentity).
func (c *Catalog) identity() (string, error) {
	st, err := os.Lstat(c.Dir)
	if err != nil {
		return "", wrap(CodeIO, err, "catalog %s", c.Dir)
	}
	return dirIdentity(st), nil
}

// Find resolves ref (an archive's file name or path in the catalog, its
// id, a unique prefix of it, or a snapshot id) to a file name.
func (c *Catalog) Find(ref string) (string, error) {
	base := filepath.Base(ref)
	if _, ok := IDOf(base); ok {
		if filepath.Dir(ref) != "." && filepath.Clean(filepath.Dir(ref)) != c.Dir {
			abs, _ := filepath.Abs(filepath.Dir(ref))
			if abs != c.Dir {
				return "", errf(CodeNotFound, "archive %s is not in the catalog %s", ref, c.Dir)
			}
		}
		if _, err := os.Lstat(filepath.Join(c.Dir, base)); err != nil {
			return "", errf(CodeNotFound, "archive %s: not in the catalog %s", ref, c.Dir)
		}
		return base, nil
	}
	ents, _, err := c.readDir()
	if err != nil {
		return "", err
	}
	var hits []string
	for _, e := range ents {
		if id, ok := IDOf(e.name); ok && ref != "" && strings.HasPrefix(id, ref) {
			hits = append(hits, e.name)
		}
	}
	if len(hits) == 0 { // a snapshot id: the archives holding it
		for _, e := range ents {
			if _, ok := IDOf(e.name); !ok {
				continue
			}
			if s, err := c.readSummary(e.name); err == nil && s.Snapshot == ref {
				hits = append(hits, e.name)
			}
		}
	}
	switch len(hits) {
	case 0:
		return "", errf(CodeNotFound, "archive %q: none in the catalog %s", ref, c.Dir)
	case 1:
		return hits[0], nil
	}
	return "", errf(CodeNotFound, "archive %q is ambiguous: %s", ref, strings.Join(hits, ", "))
}
