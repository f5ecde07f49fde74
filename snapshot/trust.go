package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// A store is input from outside: a repository can be cloned with a
// committed .snapback/, an archive can hold one, a command of a copy-mode
// run can write into it. Open therefore checks, before anything is read
// or written there:
//
//   - the layout: .snapback and each directory snapback keeps in it are
//     plain directories, each file it keeps there a plain regular file of
//     a sane size, every one owned by the store's owner (or by root;
//     objects, checked against their hash on every read, by anyone); a
//     symbolic link, a FIFO, a device or a file of someone else is never
//     opened, and each path is refused in one line naming it;
//   - the identity: the store records, when it is made, the inode numbers
//     of its own directory and of the root. A store that arrived by `git
//     clone`, an archive or a copy (new inodes) does not match and is
//     refused as a whole.
//
// `snapback check --repair` sets what is refused aside ([ForRepair]),
// deleting nothing: a bad part into the store under an untrusted- name, a
// foreign store beside itself as <store>.untrusted-<time>.
//
// A store outside the tree (locate.go) is checked the same way, from its
// parent directory on; it is always made with its identity record, so
// one without it is adopted only when empty (an outside directory with
// other files is someone's, not a store).
//
// Owners: the store must be the running user's. Root may use a store of
// another user only where that user also owns the root directory (sudo in
// a user's own project); files in a store may be owned by its owner or by
// root, who could write them anyway.
//
// A store made by an older snapback has no identity record. Its layout is
// checked as any store's, and it is adopted (the identity written) unless
// it holds a journal: a journal makes the next verb that changes things
// finish an operation, deleting and writing tree files, so one found in a
// store that cannot prove it was made here is refused (check --repair sets
// it aside, its interrupted operation then unfinished but nothing lost).
// The same adoption is the user's way to vouch for a store refused as
// copied (a project copied with cp -a, or a filesystem whose inode
// numbers change at each mount): delete the identity record.
//
// Adopted or not, a store never chooses what a restore writes outside
// it: a target payload is restored only into the target snapback.toml
// declares now that it matches (Repo.declaredTarget), so an adopted
// store, which may have come by a clone with a crafted record, can name
// no file, database or volume of its own.

// UntrustedPrefix begins the name, in the root, of a store check --repair
// set aside whole; no snapshot holds it and no restore touches it.
const UntrustedPrefix = StoreDir + ".untrusted-"

// IdentityFile is the store's identity record, inside the store.
const IdentityFile = "identity"

// ErrUntrusted: a store, or a part of it, is not what snapback makes.
var ErrUntrusted = errors.New("untrusted store")

// UntrustedError says what part of a store was refused, and why.
type UntrustedError struct {
	Path   string // the part refused, absolute
	Reason string
	// Whole: the store as a whole is refused (it is not a directory of
	// the user's, or not the one made for this root).
	Whole bool
}

func (e *UntrustedError) Error() string {
	what := "it"
	if e.Whole && filepath.Base(e.Path) != StoreDir {
		what = "the store"
	}
	return fmt.Sprintf("refusing store: %s %s; `snapback check --repair` sets %s aside (nothing is deleted)", e.Path, e.Reason, what)
}

func (e *UntrustedError) Unwrap() error { return ErrUntrusted }

// identity is the content of the identity record.
type identity struct {
	Version  int    `json:"version"`
	Root     string `json:"root"` // for a person reading it; moving the project is fine
	RootIno  uint64 `json:"root_ino"`
	StoreIno uint64 `json:"store_ino"`
	Dev      uint64 `json:"dev"`
}

// Bounds on the small files of the store, checked at Open.
const (
	maxLockFile  = 64 << 10 // a holder line
	maxIdentity  = 64 << 10
	maxAgentFile = 16 << 20 // a turn note
)

// storeDirs are the directories snapback keeps in the store; storeFiles
// the files, with their bounds.
var (
	storeDirs  = []string{"objects", "snapshots", "tmp", "runs", "targets", "agent", DamagedDir, "prune-tokens", packsDir, "watch", liveDir}
	storeFiles = map[string]int64{
		"lock": maxLockFile, "treerun.lock": maxLockFile, "journal.json": maxJournal,
		"index": maxIndexSize, IdentityFile: maxIdentity, ".gitignore": maxLockFile,
		"project-id": maxLockFile, // the catalog's id of the project
	}
	// runFiles are the files of runs/<id>/ (the layers are the run's tree).
	runFiles = map[string]int64{"lock": maxLockFile, "run.json": maxRunSize, "git-index": maxGitIndex, "seen": maxManifestSize}
)

// trusted reports whether a file owned by uid may be in the store.
func (s *Store) trusted(uid uint32) bool { return uid == s.owner || uid == 0 }

// checkOwned is the reader's check of a store file's owner.
func (s *Store) checkOwned(st *unix.Stat_t) error {
	if !s.trusted(st.Uid) {
		return fmt.Errorf("%w: owned by uid %d, not by the store's owner (uid %d)", ErrUntrusted, st.Uid, s.owner)
	}
	return nil
}

// checkTop checks the store directory itself and sets s.owner.
func (s *Store) checkTop() error {
	var st, rst unix.Stat_t
	if err := unix.Lstat(s.Dir, &st); err != nil {
		return fmt.Errorf("open store %s: %w", s.Dir, err)
	}
	if err := unix.Stat(s.Root, &rst); err != nil {
		return fmt.Errorf("open store %s: %w", s.Root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &UntrustedError{Path: s.Dir, Reason: "is " + kindName(uint32(st.Mode)) + ", not a directory", Whole: true}
	}
	euid := uint32(os.Geteuid())
	if st.Uid != euid && !(euid == 0 && st.Uid == rst.Uid) {
		return &UntrustedError{Path: s.Dir, Reason: fmt.Sprintf("is owned by uid %d, not by you (uid %d)", st.Uid, euid), Whole: true}
	}
	s.owner = st.Uid
	return nil
}

// checkLayout checks every directory and small file the store keeps (see
// above); the objects themselves, the records and the packs are checked
// as they are read (openPack: a pack is only ever read, and a new one
// renamed into packs/, which replaces rather than follows what is there).
// It runs at every open, so it looks at nothing whose number grows with
// the history: every begin of a checkpoint writes a pack, and listing
// them all cost each verb a stat per turn since the last gc. Each part is
// looked at relative to its directory, held open (a short lookup, not
// the store's whole path).
func (s *Store) checkLayout() error {
	top, err := s.openDir("")
	if err != nil {
		return fmt.Errorf("open store: %w", err) // checkTop found a directory
	}
	defer top.Close() // read-only
	for _, d := range storeDirs {
		if err := s.checkPart(top, "", d, true, 0); err != nil {
			return err
		}
	}
	for f, max := range storeFiles {
		if err := s.checkPart(top, "", f, false, max); err != nil {
			return err
		}
	}
	if err := s.checkEach(top, "objects", func(name string) (bool, int64, bool) {
		return len(name) == 2, 0, true
	}); err != nil {
		return err
	}
	if err := s.checkEach(top, "agent", func(string) (bool, int64, bool) { return false, maxAgentFile, true }); err != nil {
		return err
	}
	if err := s.checkEach(top, "targets", func(string) (bool, int64, bool) { return true, 0, true }); err != nil {
		return err
	}
	if err := s.checkEach(top, liveDir, func(name string) (bool, int64, bool) { // empty markers (live.go)
		return false, 0, name == liveComplete || record.ValidID(name)
	}); err != nil {
		return err
	}
	return s.checkEach(top, "runs", func(name string) (bool, int64, bool) { return true, 0, record.ValidID(name) })
}

// checkEach checks the entries of the store directory dir (in top, the
// store): want says, for a name, whether it must be a directory (else a
// file of at most max bytes), and whether it is snapback's at all.
func (s *Store) checkEach(top *fsutil.Dir, dir string, want func(name string) (isDir bool, max int64, ours bool)) error {
	d, err := top.OpenDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err // checkPart has refused anything but a directory
	}
	defer d.Close() // read-only
	names, err := d.ReadDirNames()
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	for _, n := range names {
		isDir, max, ours := want(n)
		if !ours || strings.HasPrefix(n, ".tmp-") {
			continue // not snapback's, or a temp file of an interrupted write
		}
		if err := s.checkPart(d, dir, n, isDir, max); err != nil {
			return err
		}
		if dir == "runs" {
			for f, max := range runFiles {
				if err := s.checkPart(d, dir, n+"/"+f, false, max); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkPart checks the store path dir/rel (missing is fine), rel looked
// up in d, the store directory dir ("": the store) held open.
func (s *Store) checkPart(d *fsutil.Dir, dir, rel string, isDir bool, max int64) error {
	var st unix.Stat_t
	if err := unix.Fstatat(d.Fd(), rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil // a missing part, or one below a file (refused itself)
		}
		return fmt.Errorf("open store: %s: %w", s.path(dir, rel), err)
	}
	p := func() string { return s.path(dir, rel) }
	typ := st.Mode & unix.S_IFMT
	switch {
	case isDir && typ != unix.S_IFDIR:
		return &UntrustedError{Path: p(), Reason: "is " + kindName(uint32(st.Mode)) + ", not a directory"}
	case !isDir && typ != unix.S_IFREG:
		return &UntrustedError{Path: p(), Reason: "is " + kindName(uint32(st.Mode)) + ", not a regular file"}
	case !s.trusted(st.Uid):
		return &UntrustedError{Path: p(), Reason: fmt.Sprintf("is owned by uid %d, not by the store's owner (uid %d)", st.Uid, s.owner)}
	case !isDir && st.Size > max:
		return &UntrustedError{Path: p(), Reason: fmt.Sprintf("holds %d bytes, more than snapback ever writes there (%d)", st.Size, max)}
	}
	return nil
}

func kindName(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "a regular file"
}

// checkIdentity compares the store with its identity record, writing the
// record for a store just made (made) or made by an older snapback.
func (s *Store) checkIdentity(made bool) error {
	var st, rst unix.Stat_t
	if err := unix.Lstat(s.Dir, &st); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if err := unix.Stat(s.Root, &rst); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	here := identity{Version: 1, Root: s.Root, RootIno: rst.Ino, StoreIno: st.Ino, Dev: uint64(st.Dev)}
	p := s.path(IdentityFile)
	b, err := s.readFile(p, maxIdentity)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !made {
			// An older snapback's store: adopt it, unless a journal
			// would act on the tree (see above).
			if _, err := os.Lstat(s.path("journal.json")); err == nil {
				return &UntrustedError{Path: s.path("journal.json"), Reason: "is a journal in a store with no identity record (made by an older snapback, or brought here by a clone or an archive): it is not followed"}
			}
		}
		return s.writeIdentity(here)
	case err != nil:
		return &UntrustedError{Path: p, Reason: "cannot be read: " + err.Error(), Whole: true}
	}
	var rec identity
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != 1 {
		return &UntrustedError{Path: p, Reason: "is not an identity record snapback wrote", Whole: true}
	}
	if rec.StoreIno != here.StoreIno || rec.RootIno != here.RootIno {
		if !s.InTree() {
			return &UntrustedError{Path: s.Dir, Reason: fmt.Sprintf("was not made for %s (its identity record names %s: another project's store, or a copy)", s.Root, rec.Root), Whole: true}
		}
		return &UntrustedError{Path: s.Dir, Reason: fmt.Sprintf("was not made here for %s (its identity record names another directory: it came by a clone, an archive or a copy)", s.Root), Whole: true}
	}
	if rec.Dev != here.Dev || rec.Root != here.Root {
		// The same inodes: the same store, the project moved or its
		// filesystem was given another device number (btrfs does so
		// across mounts). Keep the record current.
		return s.writeIdentity(here)
	}
	return nil
}

func (s *Store) writeIdentity(id identity) error {
	if err := writeIdentityAt(s.path(IdentityFile), id); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	return nil
}

func writeIdentityAt(p string, id identity) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(p, append(b, '\n'), 0o600)
}

// setAsideUntrusted moves what makes the store of root at dir ("": in
// the tree) untrusted out of the way, one part after another, and says
// what went where: a bad part into the store as untrusted-<name>-<time>,
// a store refused as a whole beside itself, as <store>.untrusted-<time>
// (<root>/.snapback.untrusted-<time> in the tree). Nothing is deleted. It
// returns nothing to do when the store is trusted (or missing).
func setAsideUntrusted(root, dir string) ([]string, error) {
	var out []string
	for i := 0; i < 1000; i++ {
		_, err := openStore(root, dir, false)
		var ue *UntrustedError
		if !errors.As(err, &ue) {
			if errors.Is(err, ErrNoStore) {
				err = nil
			}
			return out, err
		}
		store := dir
		if store == "" {
			abs, err := filepath.Abs(root)
			if err != nil {
				return out, err
			}
			store = filepath.Join(abs, StoreDir)
		}
		stamp := time.Now().UTC().Format("20060102-150405.000000000")
		from, to := ue.Path, ""
		if ue.Whole {
			from = store
			to = store + ".untrusted-" + stamp
		} else {
			rel, err := filepath.Rel(store, ue.Path)
			if err != nil || strings.HasPrefix(rel, "..") {
				return out, fmt.Errorf("set aside %s: not in the store", ue.Path)
			}
			to = filepath.Join(store, "untrusted-"+strings.ReplaceAll(rel, "/", "_")+"-"+stamp)
		}
		if err := renameAside(filepath.Dir(store), from, to); err != nil {
			return out, fmt.Errorf("set aside %s: %w", from, err)
		}
		out = append(out, fmt.Sprintf("moved %s to %s (%s)", from, to, ue.Reason))
	}
	return out, fmt.Errorf("set aside: the store of %s keeps being refused", root)
}

// renameAside renames from to to (both below root, the store's parent,
// to's directory a plain one), following no symlink on the way and
// replacing nothing, then syncs both directories.
func renameAside(root, from, to string) error {
	rd, err := fsutil.OpenRoot(root)
	if err != nil {
		return err
	}
	defer rd.Close()
	open := func(p string) (*fsutil.Dir, error) {
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return nil, err
		}
		return rd.OpenDir(filepath.ToSlash(rel))
	}
	fd, err := open(from)
	if err != nil {
		return err
	}
	defer fd.Close()
	td, err := open(to)
	if err != nil {
		return err
	}
	defer td.Close()
	if err := fd.RenameNoReplace(filepath.Base(from), td, filepath.Base(to)); err != nil {
		return err
	}
	if err := fd.Sync(); err != nil {
		return err
	}
	return td.Sync()
}

// openDir opens the store directory rel (slash-separated, "" for the
// store itself) without following any symlink from the store's parent
// directory on (the root, for a store in the tree).
func (s *Store) openDir(rel string) (*fsutil.Dir, error) {
	parent, err := fsutil.OpenRoot(filepath.Dir(s.Dir))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	if rel == "" {
		return parent.OpenDir(filepath.Base(s.Dir))
	}
	return parent.OpenDir(filepath.Base(s.Dir) + "/" + rel)
}

// readFile reads the store file at path (below s.Dir) as every read of
// the store is made: no symlink followed on the way, a regular file of
// the store's owner of at most max bytes, a FIFO refused without
// blocking. Errors about the file itself do not repeat its path (callers
// name it in their own terms); they match fs.ErrNotExist when it is
// missing.
func (s *Store) readFile(path string, max int64) ([]byte, error) {
	rel, err := filepath.Rel(s.Dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("read %s: not in the store", path)
	}
	rel = filepath.Join(filepath.Base(s.Dir), rel)
	root, err := fsutil.OpenRoot(filepath.Dir(s.Dir))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	check := s.checkOwned
	if strings.HasPrefix(rel, filepath.Join(filepath.Base(s.Dir), "objects")+"/") {
		// A content is checked against its name on every read: whose
		// file holds it does not matter (and check --repair, which
		// re-hashes, would not see an owner as damage).
		check = nil
	}
	b, err := root.ReadFileLimit(filepath.ToSlash(rel), max, check)
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return nil, pe.Err // callers name the file in their own terms (still an fs.ErrNotExist)
	}
	return b, err
}
