package snapshot

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// journal is the plan of a tree-changing operation, written (and synced)
// before the first change: recover finishes it by applying Apply again
// and then writing Record, the snapshot that saved what it replaced.
type journal struct {
	Op   string `json:"op"`
	OpID string `json:"op_id"`
	// Apply is the manifest (object id) the tree is brought to. (Targets,
	// below, are the states outside the tree.)
	Apply  string       `json:"target"`
	Scope  record.Scope `json:"scope"`
	Record *record.Meta `json:"record"`
	// Source, for a commit, is the upper layer (relative to the store)
	// whose entries are moved into the tree.
	Source string `json:"source,omitempty"`
	// Kept, for a commit of parts of files (commit -p), are the paths
	// whose contents come from the store, not the layer: the layer keeps
	// its entry, which still holds what was not taken.
	Kept []string `json:"kept,omitempty"`
	// Done, for a commit, is the pending run the commit completes.
	Done string `json:"done,omitempty"`
	// Staged: contents the operation saves are hard links in the store's
	// staging area, adopted as objects once the apply has run.
	Staged bool `json:"staged,omitempty"`
	// Targets are restored to these states after the tree is applied.
	Targets []record.TargetState `json:"targets,omitempty"`
	// Rollback: the operation found damaged content half-way and now
	// puts the tree back as it was (Apply is its record's manifest);
	// Failed says why, for the user.
	Rollback bool   `json:"rollback,omitempty"`
	Failed   string `json:"failed,omitempty"`
	// DirTimes are the mtimes, from before the first change, of the
	// directories holding paths of a paths-scope apply that it does not
	// hold itself (the apply puts their times back: a file edited in
	// place never moved them). Recover puts back these, not the times an
	// interrupted attempt left.
	DirTimes map[string]int64 `json:"dir_times,omitempty"`
}

func (r *Reader) journalPath() string { return r.path("journal.json") }

// writeJournal makes j the store's journal, durably: from here on an
// interruption is finished (or rolled back) by recover. Every operation
// that changes the tree goes through it.
func (r *Repo) writeJournal(j *journal) error {
	if err := j.validate(); err != nil {
		return err // a bug: never write what recover would refuse
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	fsutil.CrashPoint("before-journal")
	if err := fsutil.WriteFileAtomic(r.journalPath(), b, 0o600); err != nil {
		return err
	}
	fsutil.CrashPoint("journal-written")
	return nil
}

// maxJournal bounds the journal read back: it holds a record, a few ids
// and the times of the directories a paths apply changes entries in
// (about 60 bytes each).
const maxJournal = 32 << 20

// validate checks a journal read from the store as input from outside:
// every name in it becomes a path, and none may lead out of the store.
func (j *journal) validate() error {
	bad := func(what string) error { return fmt.Errorf("bad %s", what) }
	switch j.Op {
	case "undo", "redo", "restore", "commit", "discard", "run":
	default:
		return bad("op " + strconv.Quote(j.Op))
	}
	if !record.ValidID(j.OpID) {
		return bad("op_id")
	}
	if _, ok := record.ParseObjectID(j.Apply); !ok {
		return bad("target")
	}
	if j.Scope != record.ScopeTree && j.Scope != record.ScopePaths {
		return bad("scope")
	}
	if j.Done != "" && !record.ValidID(j.Done) {
		return bad("done")
	}
	if j.Source != "" && (j.Done == "" && j.Op != "commit" || !validSource(j.Source)) {
		return bad("source")
	}
	for _, p := range j.Kept {
		if j.Source == "" || !record.ValidPath(p) || record.Under(p, StoreDir) {
			return bad("kept path " + strconv.Quote(p))
		}
	}
	switch {
	case j.Rollback:
		if j.Record != nil || j.Source != "" || j.Done != "" || len(j.Targets) > 0 {
			return bad("rollback")
		}
	case j.Op == "discard":
		if j.Record != nil || j.Done == "" {
			return bad("discard")
		}
	default:
		if j.Record == nil {
			return bad("record")
		}
		if err := j.Record.Validate(); err != nil {
			return bad("record: " + err.Error())
		}
	}
	for i := range j.Targets {
		if err := j.Targets[i].Validate(); err != nil {
			return bad("target state: " + err.Error())
		}
	}
	for p := range j.DirTimes {
		if !record.ValidPath(p) || record.Under(p, StoreDir) {
			return bad("dir_times path " + strconv.Quote(p))
		}
	}
	return nil
}

// kept is j.Kept as a set.
func (j *journal) kept() map[string]bool {
	out := map[string]bool{}
	for _, p := range j.Kept {
		out[p] = true
	}
	return out
}

// validSource: a commit's source is a run's upper layer, runs/<id>/upper.
func validSource(s string) bool {
	parts := strings.Split(s, "/")
	return len(parts) == 3 && parts[0] == "runs" && record.ValidID(parts[1]) && parts[2] == "upper"
}

// HasJournal reports whether an interrupted operation awaits recovery.
func (r *Repo) HasJournal() bool {
	_, err := os.Lstat(r.journalPath())
	return err == nil
}

// transitionFrom changes the tree to target (j's scope) as one crash-safe
// step: cur is the current state, which j's record saves. It saves what
// the apply replaces, writes the journal, applies, writes the record, and
// drops the journal. (A commit names its upper layer in j.)
func (r *Repo) transitionFrom(j *journal, target, cur record.Manifest) error {
	op := j.Op
	tid, err := r.record(target)
	if err != nil {
		return err
	}
	staged, err := r.saveCurrent(j, target, cur)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	// Every content the apply will write must be in the store, whole (a
	// stat: the bytes are checked against the hash as they are written).
	// Only those are checked: an undo of 10 files must not stat 100,000
	// objects. A commit's contents come from its upper layer; those that
	// do not (a renamed directory's files, parts of files) are read in
	// full now, as a commit cannot be rolled back once begun (the layer's
	// entries already moved would be lost): a damaged one met half-way
	// left a commit that recover could never finish.
	var missing []string
	kept := j.kept()
	var layer *fsutil.Dir
	if j.Source != "" {
		if layer, err = fsutil.OpenRoot(r.path(j.Source)); err != nil {
			return fmt.Errorf("%s: upper layer: %w", op, err)
		}
		defer layer.Close()
	}
	for i := range target {
		t := &target[i]
		if t.Type != record.File || t.Link != "" || layer != nil && !kept[t.Path] && layerHolds(layer, t.Path) {
			continue
		}
		if c := cur.Find(t.Path); c != nil && c.SameContent(t) {
			continue
		}
		if layer != nil && !staged[t.Object] {
			if err := r.verifyObject(t); err != nil && !errors.Is(err, ErrMissingObject) {
				return fmt.Errorf("%s: %w (nothing was changed)", op, err)
			}
		}
		switch size, err := r.objectSize(t.Object); {
		case errors.Is(err, fs.ErrNotExist) && staged[t.Object]:
			// In the staging area, to become an object.
		case errors.Is(err, fs.ErrNotExist):
			if len(missing) < 5 {
				missing = append(missing, t.Path)
			}
		case err != nil:
			return fmt.Errorf("%s: %w", op, err)
		case size != t.Size:
			return fmt.Errorf("%s: %w (nothing was changed)", op, &DamagedError{Path: t.Path, Object: t.Object})
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %w", op, r.missing(fmt.Sprintf("the contents of %q", missing)))
	}
	if err := r.parentsThere(target); err != nil {
		return fmt.Errorf("%s: %w (nothing was changed)", op, err)
	}
	if err := r.checkSpace(j, target, cur); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := r.Flush(); err != nil {
		return err
	}
	j.Apply = tid
	if j.Scope == record.ScopePaths {
		j.DirTimes = r.dirTimes(target, cur)
	}
	if j.Staged {
		// The staged links must be durable before the journal names them.
		if err := fsutil.SyncDir(r.stagingDir(j.OpID)); err != nil {
			return err
		}
		if err := fsutil.SyncDir(r.path("tmp")); err != nil {
			return err
		}
	}
	if err := r.writeJournal(j); err != nil {
		return err
	}
	return r.finish(j, target, cur)
}

// parentsThere checks, before the journal is written, that each path
// target puts in place has its directory: in target, or in the tree (not
// through a symbolic link). The apply makes no other directory, so a
// target that lacked one stopped half-way, and recover, finishing it,
// stopped at the same place for ever: every verb refused after.
func (r *Repo) parentsThere(target record.Manifest) error {
	seen := map[string]bool{"": true}
	for i := range target {
		t := &target[i]
		d := record.Parent(t.Path)
		if t.Type == record.Absent || seen[d] {
			continue
		}
		seen[d] = true
		if e := target.Find(d); e != nil {
			if e.Type != record.Dir {
				return fmt.Errorf("%s: its directory %s is made a %s by the same change", t.Path, d, e.Type)
			}
			continue
		}
		dir, err := r.treeDir.OpenDir(d) // following no symlink
		if err != nil {
			return fmt.Errorf("%s: its directory is neither in the tree nor made by the change: %w", t.Path, err)
		}
		dir.Close()
	}
	return nil
}

// layerHolds reports whether an upper layer holds a regular file at
// path, which a commit moves into place rather than reading the store.
func layerHolds(layer *fsutil.Dir, path string) bool {
	d, err := layer.OpenDir(record.Parent(path))
	if err != nil {
		return false
	}
	defer d.Close() // read-only
	st, err := d.Lstat(record.Base(path))
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// verifyObject reads t's content from the store in full and checks it
// against its hash: a DamagedError when it does not match.
func (r *Repo) verifyObject(t *record.Entry) error {
	f, err := r.OpenObject(t.Object)
	if err != nil {
		return err
	}
	defer f.Close() // read-only
	h := sha256.New()
	size, err := io.Copy(h, f) // (a packed content is no file of its own)
	if err != nil {
		return err
	}
	if record.ObjectID(h.Sum(nil)) != t.Object || size != t.Size {
		return &DamagedError{Path: t.Path, Object: t.Object}
	}
	return nil
}

// dirTimes reads the mtimes of the directories holding paths of target
// or cur that target does not hold (see journal.DirTimes). A directory
// not there yet has none: the apply makes it.
func (r *Repo) dirTimes(target, cur record.Manifest) map[string]int64 {
	out := map[string]int64{}
	seen := map[string]bool{}
	for _, m := range []record.Manifest{target, cur} {
		for i := range m {
			p := record.Parent(m[i].Path)
			if p == "" || seen[p] || target.Find(p) != nil {
				continue
			}
			seen[p] = true
			d, err := r.treeDir.OpenDir(p)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(d.Fd(), &st) == nil {
				out[p] = st.Mtim.Nano()
			}
			d.Close() // read-only
		}
	}
	return out
}

// saveCurrent makes sure the store will hold every content of cur (the
// state the operation replaces, which its record keeps). A file the apply
// replaces or removes is staged as a hard link, to become an object when
// its tree name has gone: no copy. Anything else is copied now.
func (r *Repo) saveCurrent(j *journal, target, cur record.Manifest) (map[record.ObjectID]bool, error) {
	staged := map[record.ObjectID]bool{}
	a := &applier{target: target, scope: j.Scope}
	// Which contents the store holds: for a large state, one listing of
	// objects/ instead of a stat per file (100,000 stats took ~0.2 s of a
	// 10-file undo of a whole tree). An object missing from the listing
	// is looked up anyway: it may have been written since.
	var listed map[record.ObjectID]bool
	if len(cur) > 4096 {
		listed = r.listObjects()
	}
	for i := range cur {
		c := &cur[i]
		if c.Type != record.File || c.Link != "" || staged[c.Object] {
			continue
		}
		// A file the apply replaces is staged even when the store holds
		// its content: the object may be damaged, and a rollback puts
		// the file back from its own inode (see rollBack).
		t := target.Find(c.Path)
		replaced := a.covered(c.Path) && (t == nil || !t.SameContent(c))
		stored := listed[c.Object] || r.HasObject(c.Object)
		if stored && !replaced {
			continue
		}
		d, err := r.treeDir.OpenDir(record.Parent(c.Path))
		if err != nil {
			return nil, fmt.Errorf("save %s: %w", c.Path, err)
		}
		ok := false
		if replaced {
			if ok, err = r.stageLink(j.OpID, d, c); err != nil {
				d.Close()
				return nil, err
			}
		}
		switch {
		case ok:
			staged[c.Object] = true
			j.Staged = true
		case !stored:
			err = r.copyIn(d, c)
		}
		d.Close()
		if err != nil {
			return nil, err
		}
	}
	return staged, nil
}

// checkSpace refuses, before anything changes, an apply that would write
// more bytes than the filesystem has free: the journal would finish it,
// but only once space is freed, and the tree would wait half-changed.
// (Clones need no space: on a filesystem that has them the estimate is
// pessimistic.)
func (r *Repo) checkSpace(j *journal, target, cur record.Manifest) error {
	var need int64
	for i := range target {
		t := &target[i]
		if t.Type != record.File || t.Link != "" {
			continue
		}
		if c := cur.Find(t.Path); c != nil && c.SameContent(t) {
			continue
		}
		need += t.Size
	}
	if j.Source != "" || need == 0 {
		return nil // a commit moves its files into place
	}
	var st unix.Statfs_t
	if err := unix.Statfs(r.Root, &st); err != nil {
		return nil // unknown: let the writes themselves tell
	}
	if free := int64(st.Bavail) * int64(st.Bsize); need > free {
		return fmt.Errorf("needs %d bytes, %d free on %s: %w", need, free, r.Root, unix.ENOSPC)
	}
	return nil
}

// copyIn stores the content of the tree's file c (in d), checking it is
// still what the scan saw.
func (r *Repo) copyIn(d *fsutil.Dir, c *record.Entry) error {
	f, err := d.Open(record.Base(c.Path), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("save %s: %w", c.Path, err)
	}
	defer f.Close() // read-only
	id, _, err := r.PutFile(f)
	if err != nil {
		return err
	}
	if id != c.Object {
		return fmt.Errorf("save %s: it changed during the operation; nothing was changed, try again", c.Path)
	}
	return nil
}

// finish applies a journal's target and completes it. Idempotent. cur is
// the tree's state as just scanned, or nil to scan it (recover).
func (r *Repo) finish(j *journal, target, cur record.Manifest) error {
	if cur == nil {
		// Recovering. Temps of the interrupted attempt go first: they must
		// not collide with this attempt's names, and removing them moves
		// their directories' mtimes, which the apply then sets right.
		r.sweepTemps(r.treeDir, target, j.OpID)
		var err error
		if cur, err = r.current(target, j.Scope, false); err != nil {
			return fmt.Errorf("%s: %w", j.Op, err)
		}
	}
	cache := r.loadCache()
	a := &applier{s: r.Store, root: r.treeDir, opID: j.OpID, target: target, scope: j.Scope, cache: cache, staged: j.Staged,
		rollback: j.Rollback, knownMtime: j.DirTimes, progress: r.Progress, keep: j.kept()}
	if j.Source != "" {
		src, err := fsutil.OpenRoot(r.path(j.Source))
		switch {
		case err == nil:
			defer src.Close()
			a.src = src
		case errors.Is(err, fs.ErrNotExist):
			// Dropped after a finished apply: everything is in the tree.
		default:
			return fmt.Errorf("%s: upper layer: %w", j.Op, err)
		}
	}
	if err := a.run(cur); err != nil {
		var de *DamagedError
		if errors.As(err, &de) && j.Record != nil && j.Source == "" {
			// Half-way, a content to write turned out damaged: put back
			// what the operation replaced (saved before it started), so
			// that it ends as if it never ran.
			if rerr := r.rollBack(j, de); rerr != nil {
				return fmt.Errorf("%s: %w; putting the tree back failed too: %w", j.Op, de, rerr)
			}
			return fmt.Errorf("%s: %w (nothing was changed)", j.Op, de)
		}
		return fmt.Errorf("%s: %w", j.Op, err)
	}
	if err := r.saveCache(cache); err != nil {
		return err
	}
	fsutil.CrashPoint("applied")
	if err := r.restoreTargets(j.Targets); err != nil {
		return fmt.Errorf("%s: %w: %w (the tree is done; `snapback recover` retries the targets)", j.Op, ErrTargetsPending, err)
	}
	fsutil.CrashPoint("targets-restored")
	if len(j.Targets) > 0 && j.Record == nil {
		// A discard releases the payloads it has just restored from: the
		// journal forgets the targets first, so that a crash while they
		// go is never retried from half-released payloads.
		j.Targets = nil
		if err := r.writeJournal(j); err != nil {
			return fmt.Errorf("%s: %w", j.Op, err)
		}
	}
	switch {
	case j.Staged && j.Rollback:
		// What was staged is back in the tree (or never left it): the
		// links go, none of them becomes an object.
		if err := fsutil.RemoveAll(r.stagingDir(j.OpID)); err != nil {
			return fmt.Errorf("%s: %w", j.Op, err)
		}
	case j.Staged:
		if err := r.adoptStaged(j.OpID); err != nil {
			return fmt.Errorf("%s: %w", j.Op, err)
		}
	}
	if j.Record != nil {
		if err := r.WriteMeta(j.Record); err != nil {
			return err
		}
	}
	fsutil.CrashPoint("recorded")
	if j.Done != "" {
		if err := r.dropRun(j.Done); err != nil {
			return fmt.Errorf("%s: %w", j.Op, err)
		}
		if j.Record == nil { // a discard: the run's payloads go with it
			if err := r.releasePayloads(j.Done); err != nil {
				return fmt.Errorf("%s: %w", j.Op, err)
			}
		}
	}
	fsutil.Mutating()
	if err := os.Remove(r.journalPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: drop journal: %w", j.Op, err)
	}
	return fsutil.SyncDir(r.Dir)
}

// rollBack turns j into a journal that brings the tree back to j's record
// (what j replaced, all of it saved before j started) and finishes that.
// The record is not written, nor are j's targets touched (they are
// restored only after the tree): the operation ends as if never run.
func (r *Repo) rollBack(j *journal, why error) error {
	rb := &journal{Op: j.Op, OpID: j.OpID, Apply: j.Record.Manifest, Scope: j.Scope, Staged: j.Staged, Rollback: true, Failed: why.Error(),
		DirTimes: j.DirTimes}
	target, err := r.LoadManifest(rb.Apply)
	if err != nil {
		return err
	}
	if err := r.writeJournal(rb); err != nil {
		return err
	}
	if err := r.finish(rb, target, nil); err != nil {
		return err
	}
	return r.releasePayloads(j.OpID)
}

// readJournal reads and validates the journal; (nil, nil) when there is
// none.
func (r *Reader) readJournal() (*journal, error) {
	b, err := r.readFile(r.journalPath(), maxJournal)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: journal %s: %w", record.ErrCorrupt, r.journalPath(), err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: journal %s: %v", record.ErrCorrupt, r.journalPath(), err)
	}
	if err := j.validate(); err != nil {
		return nil, fmt.Errorf("%w: journal %s: %w", record.ErrCorrupt, r.journalPath(), err)
	}
	return &j, nil
}

// SetAsideBadJournal moves a journal that snapback would refuse to follow
// (unreadable, or naming paths out of the store or the tree) into
// damaged/, and says where; a good journal, or none, stays ("").
func (r *Repo) SetAsideBadJournal() (string, error) {
	if _, err := r.readJournal(); err == nil || errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return r.moveAside(r.journalPath(), "journal.json")
}

// JournalOp names the operation an interrupted journal would finish
// ("" when there is none), or why the journal will not be followed:
// reading verbs say so instead of recovering.
func (r *Repo) JournalOp() (string, error) {
	j, err := r.readJournal()
	switch {
	case err != nil:
		return "", err
	case j == nil:
		return "", nil
	case j.Rollback:
		return j.Op + " (being rolled back)", nil
	}
	return j.Op, nil
}

// Recover finishes an interrupted operation, if there is one, and clears
// leftovers. It reports whether there was anything to do. The journal is
// validated first, like everything read from the store: a journal that
// would lead outside the store or the tree is refused, not followed.
func (r *Repo) Recover() (bool, error) {
	j, jerr := r.readJournal()
	keep := ""
	if jerr == nil && j != nil && j.Staged {
		keep = filepath.Base(r.stagingDir(j.OpID)) // what the interrupted operation saves
	}
	tmp := r.path("tmp")
	// Listed through a descriptor that followed no symlink (Open checked
	// tmp is the store's own directory; this holds it to that).
	if d, err := r.openDir("tmp"); err == nil {
		names, _ := d.ReadDirNames() // unreadable: nothing to sweep
		d.Close()
		for _, n := range names {
			if n != keep {
				removeTrash(filepath.Join(tmp, n)) // temp objects of a dead process
			}
		}
	}
	dead, err := r.finishDeadRuns()
	if err != nil {
		return false, fmt.Errorf("recover: %w", err)
	}
	zdead, err := r.settleDeadZFSViews()
	if err != nil {
		return false, fmt.Errorf("recover: %w", err)
	}
	dead += zdead
	if jerr != nil {
		return false, fmt.Errorf("recover: %w (snapback did not write it as it is; `snapback check --repair` sets it aside)", jerr)
	}
	if j == nil {
		if dead > 0 {
			return true, r.SweepPayloads()
		}
		return false, nil
	}
	target, err := r.LoadManifest(j.Apply)
	if err != nil {
		return false, fmt.Errorf("recover: %w", err)
	}
	// After a crash, trust no stat cache entry: compare real contents.
	fsutil.Mutating()
	if err := os.Remove(r.path("index")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("recover: %w", err)
	}
	if err := r.finish(j, target, nil); err != nil {
		var de *DamagedError
		if errors.As(err, &de) && !r.HasJournal() {
			// Finishing it met damaged content, and it was rolled back:
			// the store is consistent, the operation did not happen.
			r.RecoverNote = fmt.Sprintf("rolled back an interrupted %s: %v", j.Op, de)
			return true, r.SweepPayloads()
		}
		return false, fmt.Errorf("recover: %w", err)
	}
	r.RecoverNote = "finished an interrupted " + j.Op
	if j.Rollback {
		r.RecoverNote = fmt.Sprintf("rolled back an interrupted %s: %s", j.Op, j.Failed)
	}
	return true, r.SweepPayloads()
}
