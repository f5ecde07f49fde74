package snapshot

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// StoreDir is the store's directory name inside the root.
const StoreDir = layout.StoreDir

// FindRoot finds the project root from dir (absolute), as every verb
// does: the nearest of dir and its ancestors holding snapback.toml or
// .snapback, or whose store is in the state directory ([Marked]); else
// the top of the enclosing git work tree (the nearest
// holding .git, a directory or, in worktrees and submodules, a file);
// else dir. A verb started in a subdirectory then acts on the whole
// project.
func FindRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, config.FileName)); err == nil || Marked(d) {
			return d
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if d := nearestHolding(dir, ".git"); d != "" {
		return d
	}
	return dir
}

// nearestHolding returns the nearest of dir and its ancestors that holds
// one of names, or "".
func nearestHolding(dir string, names ...string) string {
	for d := dir; ; d = filepath.Dir(d) {
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(d, n)); err == nil {
				return d
			}
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// Errors callers classify.
var (
	// ErrNoStore: the root has no .snapback directory yet.
	ErrNoStore = errors.New("no snapback store here (run `snapback snap` first)")
	// ErrNotFound: no snapshot has that id.
	ErrNotFound = errors.New("no such snapshot")
	// ErrMissingObject: the store lacks content a manifest needs.
	ErrMissingObject = errors.New("object missing from the store")
)

// DamagedError: a stored content does not match its hash (or its size),
// found while it was being written back to Path. It is an [ErrCorrupt].
type DamagedError struct {
	Path   string
	Object record.ObjectID
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("the stored content of %q (object %s) is damaged: it does not match its hash; `snapback check` lists what is damaged", e.Path, e.Object)
}

func (e *DamagedError) Unwrap() error { return record.ErrCorrupt }

// Store is a project's .snapback directory: content-addressed objects,
// snapshot records, the stat cache, the journal and the lock.
//
// A Store's methods that change it must be called with the lock held
// ([Store.Lock]); reading is safe without it.
type Store struct {
	Root string // the project root, absolute
	Dir  string // Root/.snapback

	// Warn, when set, hears what the user should know though nothing
	// failed (a damaged stat cache discarded, damaged records skipped);
	// each message once. The library never prints.
	Warn func(msg string)
	// SkipDamaged lets verbs that only look skip damaged snapshot records
	// (with a warning); otherwise listing them is an error.
	SkipDamaged bool

	lock *os.File
	// waited: Lock found the store locked, and waited.
	waited bool
	owner  uint32 // the store's owner: its files may be this user's or root's

	warned  sync.Map // messages already given to Warn
	mu      sync.Mutex
	pending []string // objects written since the last Flush
	// synced: those of pending whose data was synced before their
	// rename (PutBytes): their directory only is synced at Flush.
	synced  map[string]bool
	noClone atomic.Bool // the store's filesystem refused a clone: copy

	// Small contents are packed (pack.go): packMu guards the rest.
	packMu sync.Mutex
	packed map[record.ObjectID]packLoc // every pack's index; nil until read
	// copies: the other packs that hold a content packed more than once
	// (the first, in packed, is read; these when it does not match).
	copies map[record.ObjectID][]packLoc
	// PackBlind: a small content is packed without reading the packs'
	// indexes first, unless read already; a content some pack holds
	// already is then packed again (pack.go: a content in two packs is
	// read from an intact one). For the few contents a watched
	// checkpoint reads, mostly new ones: reading every pack's index cost
	// more than the rest of its end (20 ms at 100,000 files).
	PackBlind bool
	badPacks  map[string]error    // packs whose index cannot be read
	packFiles map[string]*os.File // packs open for reading
	pend      packBuf             // the pack being made
}

// syncEachLimit: up to this many new files, Flush fsyncs each one; beyond
// it, one syncfs is cheaper. syncfs also waits for every other dirty file
// on the filesystem, which on a busy machine (a build writing gigabytes)
// can take seconds: small operations must not pay that.
const syncEachLimit = 64

// openStore opens the store of root at dir (absolute; "" for the tree's
// .snapback: see [Locate]), unlocked, creating it (mode 0700) when create
// is set. The store is checked first as input from outside (trust.go): a
// part that is not what snapback makes there, or a store not made here
// for this root, is an [*UntrustedError] naming the path, and nothing in
// the store is read or written.
func openStore(root, dir string, create bool) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if dir == "" {
		dir = filepath.Join(abs, StoreDir)
	}
	s := &Store{Root: abs, Dir: filepath.Clean(dir)}
	_, err = os.Lstat(s.Dir)
	made := false
	switch {
	case errors.Is(err, fs.ErrNotExist) && !create:
		return nil, fmt.Errorf("%s: %w", abs, ErrNoStore)
	case errors.Is(err, fs.ErrNotExist) && !s.InTree():
		if made, err = s.makeOutside(); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	case errors.Is(err, fs.ErrNotExist):
		fsutil.Mutating()
		if err := os.Mkdir(s.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("open store: %w", err)
		}
		made = err == nil
	case err != nil:
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.checkTop(); err != nil {
		return nil, err
	}
	if err := s.checkLayout(); err != nil {
		return nil, err
	}
	if !made && !s.InTree() {
		if err := s.checkAdoptable(); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"objects", "snapshots", "tmp"} {
		fsutil.Mutating()
		if err := os.Mkdir(s.path(d), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	// The store holds copies of every file: keep it private even if a
	// umask or a user made it wider. (checkTop found a directory, not a
	// symlink, and nothing in the store follows one.)
	fsutil.Mutating()
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.checkIdentity(made); err != nil {
		return nil, err
	}
	if !s.InTree() {
		return s, nil
	}
	// The store is no part of the project: git must not offer it to
	// `git add -A`, which in a copy-mode run would commit every snapshot.
	ign := filepath.Join(s.Dir, ".gitignore")
	if _, err := os.Lstat(ign); errors.Is(err, fs.ErrNotExist) {
		if err := fsutil.WriteFileAtomic(ign, []byte("*\n"), 0o600); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	return s, nil
}

// InTree reports whether the store is <root>/.snapback, in the tree.
func (s *Store) InTree() bool { return s.Dir == filepath.Join(s.Root, StoreDir) }

// checkAdoptable refuses a directory outside the tree that holds
// something but no identity record: snapback makes every outside store
// with one (makeOutside), so this is someone's directory named by
// [snapshot] store, and filling it with a store would mix the two. An
// empty one is adopted, as are the empty directories a store begins with.
func (s *Store) checkAdoptable() error {
	if _, err := os.Lstat(s.path(IdentityFile)); err == nil {
		return nil
	}
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	for _, e := range ents {
		if sub, err := os.ReadDir(s.path(e.Name())); err == nil && len(sub) == 0 &&
			(e.Name() == "objects" || e.Name() == "snapshots" || e.Name() == "tmp") {
			continue
		}
		return fmt.Errorf("store %s: not a store snapback made (it holds %s and no identity record): name a new or empty directory", s.Dir, e.Name())
	}
	return nil
}

// makeOutside makes a store outside the tree whole: a directory beside
// it holding its identity record, renamed into place, so that a store
// there never lacks one (an outside store without it is not adopted:
// trust.go). It reports false when another snapback made it first.
func (s *Store) makeOutside() (bool, error) {
	parent := filepath.Dir(s.Dir)
	fsutil.Mutating()
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return false, err
	}
	fsutil.Mutating()
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(s.Dir)+".tmp-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp) // gone once renamed; else what it left
	var st, rst unix.Stat_t
	if err := unix.Lstat(tmp, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(s.Root, &rst); err != nil {
		return false, err
	}
	fsutil.Mutating()
	if err := os.Chmod(tmp, 0o700); err != nil {
		return false, err
	}
	id := identity{Version: 1, Root: s.Root, RootIno: rst.Ino, StoreIno: st.Ino, Dev: uint64(st.Dev)}
	if err := writeIdentityAt(filepath.Join(tmp, IdentityFile), id); err != nil {
		return false, err
	}
	err = fsutil.RenamePathNoReplace(tmp, s.Dir)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("make %s: %w", s.Dir, err)
	}
	return true, fsutil.SyncDir(parent)
}

// warn passes msg to Warn once.
func (s *Store) warn(msg string) {
	if _, dup := s.warned.LoadOrStore(msg, true); !dup && s.Warn != nil {
		s.Warn(msg)
	}
}

func (s *Store) path(parts ...string) string {
	return filepath.Join(append([]string{s.Dir}, parts...)...)
}

func (s *Store) objectPath(id record.ObjectID) string {
	h := id.String()
	return s.path("objects", h[:2], h[2:])
}

// HasObject reports whether the object is stored (loose or packed).
func (s *Store) HasObject(id record.ObjectID) bool {
	if _, err := os.Lstat(s.objectPath(id)); err == nil {
		return true
	}
	if s.PackBlind {
		s.packMu.Lock()
		blind := s.packed == nil
		s.packMu.Unlock()
		if blind {
			return false // then stored again (see PackBlind)
		}
	}
	_, ok := s.packedSize(id)
	return ok
}

// listObjects returns the ids of the objects the store holds, from a
// listing of objects/ (nil where it cannot be read: callers then stat).
func (s *Store) listObjects() map[record.ObjectID]bool {
	subs, err := os.ReadDir(s.path("objects"))
	if err != nil {
		return nil
	}
	out := map[record.ObjectID]bool{}
	for _, sub := range subs {
		if len(sub.Name()) != 2 || !sub.IsDir() {
			continue
		}
		f, err := os.Open(s.path("objects", sub.Name()))
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1) // what it could read; the rest is stat'ed
		f.Close()                      // read-only
		for _, n := range names {
			if id, ok := record.ParseObjectID(sub.Name() + n); ok {
				out[id] = true
			}
		}
	}
	s.packedIDs(out)
	return out
}

// objectSize returns the size of a stored object (fs.ErrNotExist when it is
// missing).
func (s *Store) objectSize(id record.ObjectID) (int64, error) {
	st, err := os.Lstat(s.objectPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		if n, ok := s.packedSize(id); ok {
			return n, nil
		}
	}
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%w: object %s is not a regular file", record.ErrCorrupt, id)
	}
	return st.Size(), nil
}

// OpenObject opens a stored object for reading: a loose object's file
// (an *os.File), or a packed content read into memory. Either is read as
// stored: the caller checks it against its hash as it copies it.
func (s *Store) OpenObject(id record.ObjectID) (io.ReadCloser, error) {
	// Never through a symlink, never blocking on a FIFO planted there.
	f, err := os.OpenFile(s.objectPath(id), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		b, ok, perr := s.readPacked(id)
		switch {
		case perr != nil:
			return nil, perr
		case ok:
			return io.NopCloser(bytes.NewReader(b)), nil
		}
		return nil, s.missing(id.String())
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close() // read-only
		return nil, fmt.Errorf("%w: object %s is not a regular file", record.ErrCorrupt, id)
	}
	return f, nil
}

// ReadObject reads a whole object (of at most 1 GiB: a manifest, a git
// index) and checks it against its name. The object is read as every
// store file is: no symlink followed, a FIFO refused without blocking.
func (s *Store) ReadObject(id record.ObjectID) ([]byte, error) {
	b, err := s.readObject(id, maxReadObject)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s.missing(id.String())
	}
	if err != nil {
		return nil, fmt.Errorf("%w: object %s: %w", record.ErrCorrupt, id, err)
	}
	if sha256.Sum256(b) != id {
		return nil, fmt.Errorf("%w: object %s does not match its hash", record.ErrCorrupt, id)
	}
	return b, nil
}

// readObject reads a whole object of at most max bytes, loose or packed,
// as stored (the caller checks its hash); fs.ErrNotExist when neither
// holds it.
func (s *Store) readObject(id record.ObjectID, max int64) ([]byte, error) {
	b, err := s.readFile(s.objectPath(id), max)
	if !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	b, ok, err := s.readPacked(id)
	if err == nil && !ok {
		err = fs.ErrNotExist
	}
	return b, err
}

// PutFile stores the content of src and returns its id and size. A small
// content (at most 16 KiB) waits in memory for the next pack (pack.go),
// written by the next [Store.Flush]; a larger object is complete under
// its final name or absent, and becomes durable at the next Flush. Where
// the filesystem clones, a large content is cloned and the clone hashed;
// elsewhere it is hashed first, so content the store already holds is
// never written again, and copied only when new (the copy's own hash
// names it, so a source changing meanwhile cannot make an object lie
// about its content; a small one is named by the bytes read).
func (s *Store) PutFile(src *os.File) (record.ObjectID, int64, error) {
	if st, err := src.Stat(); err == nil && st.Size() <= packMaxObject {
		// Small: packed (pack.go), unless it grew since the stat (then
		// stored as any content is).
		b := make([]byte, st.Size()+1)
		n, err := io.ReadFull(io.NewSectionReader(src, 0, st.Size()+1), b)
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			return record.ObjectID{}, 0, fmt.Errorf("store %s: %w", src.Name(), err)
		}
		if n <= int(st.Size()) {
			id, err := s.putPacked(b[:n])
			return id, int64(n), err
		}
	}
	if !s.noClone.Load() {
		id, size, err := s.putClone(src)
		if err == nil {
			return id, size, nil
		}
		if !errors.Is(err, errNoClone) {
			return record.ObjectID{}, 0, err
		}
		s.noClone.Store(true)
	}
	sum, size, err := fsutil.HashFile(src)
	if err != nil {
		return record.ObjectID{}, 0, fmt.Errorf("store %s: %w", src.Name(), err)
	}
	if s.HasObject(sum) {
		return sum, size, nil
	}
	return s.putTemp(src, func(tmp *os.File) ([32]byte, int64, error) { return fsutil.CopyHash(tmp, src) })
}

var errNoClone = errors.New("filesystem cannot clone")

func (s *Store) putClone(src *os.File) (record.ObjectID, int64, error) {
	return s.putTemp(src, func(tmp *os.File) ([32]byte, int64, error) {
		if err := fsutil.Clone(tmp, src); err != nil {
			return [32]byte{}, 0, errNoClone
		}
		return fsutil.HashFile(tmp)
	})
}

// putTemp fills a temp file with fill and adopts it under its hash.
func (s *Store) putTemp(src *os.File, fill func(*os.File) ([32]byte, int64, error)) (record.ObjectID, int64, error) {
	fsutil.Mutating()
	tmp, err := os.CreateTemp(s.path("tmp"), "obj-*")
	if err != nil {
		return record.ObjectID{}, 0, fmt.Errorf("store %s: %w", src.Name(), err)
	}
	sum, size, err := fill(tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name()) // best effort: tmp/ is emptied by recover anyway
		if errors.Is(err, errNoClone) {
			return record.ObjectID{}, 0, err
		}
		return record.ObjectID{}, 0, fmt.Errorf("store %s: %w", src.Name(), err)
	}
	id := record.ObjectID(sum)
	if err := s.adopt(tmp.Name(), id, false); err != nil {
		return record.ObjectID{}, 0, err
	}
	return id, size, nil
}

// PutBytes stores b (a manifest, say) and syncs it at once.
func (s *Store) PutBytes(b []byte) (record.ObjectID, error) {
	id := record.ObjectID(sha256.Sum256(b))
	if s.HasObject(id) {
		return id, nil
	}
	fsutil.Mutating()
	tmp, err := os.CreateTemp(s.path("tmp"), "obj-*")
	if err != nil {
		return id, fmt.Errorf("store object: %w", err)
	}
	fsutil.Mutating()
	_, err = tmp.Write(b)
	if err == nil {
		fsutil.Mutating()
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name()) // best effort
		return id, fmt.Errorf("store object: %w", err)
	}
	return id, s.adopt(tmp.Name(), id, true)
}

// adopt renames a finished temp file to its object name (or drops it when
// the object exists: contents are deduplicated by hash); synced says its
// data is durable already.
func (s *Store) adopt(tmp string, id record.ObjectID, synced bool) error {
	dst := s.objectPath(id)
	if s.HasObject(id) {
		os.Remove(tmp) // a duplicate: the stored copy (loose or packed) is identical
		return nil
	}
	fsutil.Mutating()
	if err := os.Chmod(tmp, 0o400); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store object %s: %w", id, err)
	}
	fsutil.Mutating()
	if err := os.Mkdir(filepath.Dir(dst), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		os.Remove(tmp)
		return fmt.Errorf("store object %s: %w", id, err)
	}
	fsutil.Mutating()
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store object %s: %w", id, err)
	}
	s.mu.Lock()
	s.pending = append(s.pending, dst)
	if synced {
		if s.synced == nil {
			s.synced = map[string]bool{}
		}
		s.synced[dst] = true
	}
	s.mu.Unlock()
	return nil
}

// stagingDir holds, during an undo, redo, restore or commit, hard links to
// tree files whose content the operation saves: linked now, they become
// objects once the operation has moved the tree's names away (so saving
// what a commit replaces copies nothing).
func (s *Store) stagingDir(opID string) string { return s.path("tmp", "stage-"+opID) }

// stageLink links the file name in d (the tree's path p, seen by the scan
// as e) into the staging area of opID. It reports false, having done
// nothing, when a link would not do: a file with other names (an object
// must never change), one that changed since the scan, or one on another
// filesystem.
func (s *Store) stageLink(opID string, d *fsutil.Dir, e *record.Entry) (bool, error) {
	st, err := d.Lstat(record.Base(e.Path))
	if err != nil {
		return false, nil // gone or unreadable: the caller's copy reports it
	}
	si := statOf(&st)
	if si.Mode&unix.S_IFMT != unix.S_IFREG || si.Nlink != 1 || si.Size != e.Size || si.Mtime != e.Mtime {
		return false, nil
	}
	dir := s.stagingDir(opID)
	fsutil.Mutating()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("stage %s: %w", e.Path, err)
	}
	sd, err := fsutil.OpenRoot(dir)
	if err != nil {
		return false, err
	}
	defer sd.Close()
	err = d.Link(record.Base(e.Path), sd, e.Object.String())
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM) {
		return false, nil // another filesystem, or links not allowed: copy
	}
	if errors.Is(err, unix.EEXIST) {
		return true, nil // the same content, staged already
	}
	return err == nil, err
}

// openStaged opens a staged object (before adoptStaged).
func (s *Store) openStaged(opID string, id record.ObjectID) (*os.File, error) {
	return os.Open(filepath.Join(s.stagingDir(opID), id.String()))
}

// adoptStaged makes the staged links of opID objects. Idempotent.
func (s *Store) adoptStaged(opID string) error {
	dir := s.stagingDir(opID)
	// The staging area must be the store's own directory: a symlink there
	// would make outside files objects (moving them away).
	if st, err := os.Lstat(dir); err == nil && !st.IsDir() {
		return &UntrustedError{Path: dir, Reason: "is not a directory"}
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("adopt staged contents: %w", err)
	}
	for _, e := range ents {
		id, ok := record.ParseObjectID(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("adopt staged contents: %w", err)
		}
		if st.Nlink > 1 {
			// The tree still has this inode: as an object it would change
			// with the file. Store a copy; the link goes with the rest.
			if err := s.copyStaged(p, id); err != nil {
				return err
			}
			continue
		}
		if err := s.adopt(p, id, false); err != nil {
			return err
		}
	}
	if err := s.Flush(); err != nil {
		return err
	}
	return fsutil.RemoveAll(dir)
}

// copyStaged stores a copy of the staged file p, which must hold id.
func (s *Store) copyStaged(p string, id record.ObjectID) error {
	if s.HasObject(id) {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("adopt staged contents: %w", err)
	}
	defer f.Close() // read-only
	got, _, err := s.PutFile(f)
	if err != nil {
		return fmt.Errorf("adopt staged contents: %w", err)
	}
	if got != id {
		return fmt.Errorf("adopt staged contents: %w", &DamagedError{Path: p, Object: id})
	}
	return nil
}

// Flush makes every object written so far durable: it writes the pack
// being made, then syncs the loose objects (one syncfs rather than an
// fsync per object, when there are many).
func (s *Store) Flush() error {
	if err := s.flushPack(); err != nil {
		return fmt.Errorf("flush store: %w", err)
	}
	s.mu.Lock()
	pending, synced := s.pending, s.synced
	s.pending, s.synced = nil, nil
	s.mu.Unlock()
	if len(pending) > syncEachLimit {
		if err := syncFS(s.Dir); err != nil {
			return fmt.Errorf("flush store: %w", err)
		}
		return nil
	}
	dirs := map[string]bool{}
	for _, p := range pending {
		// One synced before its rename (PutBytes) needs only its
		// directory's sync, below, for the rename to be durable.
		if !synced[p] {
			if err := syncFile(p); err != nil {
				return fmt.Errorf("flush store: %w", err)
			}
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := fsutil.SyncDir(d); err != nil {
			return fmt.Errorf("flush store: %w", err)
		}
	}
	return nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close() // read-only; the sync result is what counts
	fsutil.Mutating()
	return f.Sync()
}

// PutManifest stores an encoded manifest.
func (s *Store) PutManifest(m record.Manifest) (record.ObjectID, error) {
	return s.PutBytes(record.EncodeManifest(m))
}

// LoadManifest reads and decodes a stored manifest.
func (s *Store) LoadManifest(id string) (record.Manifest, error) {
	oid, ok := record.ParseObjectID(id)
	if !ok {
		return nil, fmt.Errorf("%w: manifest id %q", record.ErrCorrupt, id)
	}
	b, err := s.readObject(oid, maxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load manifest: %w", s.missing(oid.String()))
	}
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w: %w", oid, record.ErrCorrupt, err)
	}
	if sha256.Sum256(b) != oid {
		return nil, fmt.Errorf("load manifest: %w: object %s does not match its hash", record.ErrCorrupt, oid)
	}
	return s.decodeManifest(b)
}

// WriteMeta writes a snapshot record atomically and durably.
func (s *Store) WriteMeta(m *record.Meta) error {
	b, err := record.EncodeMeta(m)
	if err != nil {
		return err
	}
	if isLive(m) { // marked first: every live record has its marker (live.go)
		if err := s.markLive(m.ID); err != nil {
			return err
		}
	}
	if err := fsutil.WriteFileAtomic(s.recordPath(m.ID), b, 0o600); err != nil {
		return err
	}
	if !isLive(m) {
		s.unmarkLive(m.ID)
	}
	return nil
}

// ReadMeta reads the record of one snapshot.
func (s *Store) ReadMeta(id string) (*record.Meta, error) {
	if !record.ValidID(id) {
		return nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	m, err := s.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	return m, nil
}

// readRecord reads and checks one record; what is wrong with a damaged
// one is an ErrCorrupt.
func (s *Store) readRecord(id string) (*record.Meta, error) {
	b, err := s.readFile(s.recordPath(id), maxRecordSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", record.ErrCorrupt, err)
	}
	m, err := record.DecodeMeta(b)
	if err != nil {
		return nil, err
	}
	if m.ID != id {
		return nil, fmt.Errorf("%w: it says it is %s", record.ErrCorrupt, m.ID)
	}
	return m, nil
}

func (s *Store) recordPath(id string) string { return s.path("snapshots", id+".json") }

// deleteMeta removes a snapshot record.
func (s *Store) deleteMeta(id string) error {
	fsutil.Mutating()
	err := os.Remove(s.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err == nil {
		s.unmarkLive(id)
	}
	return err
}

// List returns every snapshot record, oldest first. A damaged record is
// an error ([ErrDamaged]) unless SkipDamaged is set; then it is left out,
// with a warning.
func (s *Store) List() ([]*record.Meta, error) {
	out, damaged, err := s.records()
	if err != nil {
		return nil, err
	}
	if len(damaged) > 0 {
		if !s.SkipDamaged {
			return nil, damagedError(damaged)
		}
		s.warn(damagedWarning(damaged))
	}
	return out, nil
}

// records reads every snapshot record, oldest first, and lists apart
// those that cannot be read.
func (s *Store) records() ([]*record.Meta, []DamagedRecord, error) {
	ents, err := os.ReadDir(s.path("snapshots"))
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*record.Meta
	var damaged []DamagedRecord
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !record.ValidID(id) {
			continue // a temp file of an interrupted write, or not ours
		}
		m, err := s.readRecord(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile (a gc does so only under the lock)
		}
		if err != nil {
			damaged = append(damaged, DamagedRecord{ID: id, Path: s.recordPath(id), Err: err})
			continue
		}
		out = append(out, m)
	}
	sortRecords(out)
	return out, damaged, nil
}

// newMeta starts a record with an id and a creation time later than every
// existing snapshot's, so that creation order is total.
func (s *Store) newMeta(kind record.Kind, scope record.Scope) (*record.Meta, error) {
	var last *record.Meta
	if kind == record.KindCheckpoint {
		// An agent's hooks begin one at every turn: only the newest
		// records are read (live.go), and a damaged record elsewhere is
		// for the verbs that read the history to report.
		last, err := s.newest()
		if err != nil {
			return nil, err
		}
		return s.metaAfter(last, kind, scope), nil
	}
	all, err := s.List() // refused while a record is damaged
	if err != nil {
		return nil, err
	}
	if n := len(all); n > 0 {
		last = all[n-1]
	}
	return s.metaAfter(last, kind, scope), nil
}

// metaAfter starts a record made after last (nil: none).
func (s *Store) metaAfter(last *record.Meta, kind record.Kind, scope record.Scope) *record.Meta {
	now := time.Now().UTC()
	if last != nil && !now.After(last.CreatedAt) {
		now = last.CreatedAt.Add(time.Microsecond)
	}
	return &record.Meta{ID: record.NewID(now), Kind: kind, Scope: scope, CreatedAt: now}
}
