package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/zfs"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// ViewRun is a run in a view (an overlay mode): the command's changes
// wait in an upper layer under .snapback/runs/<id>/ until they are
// committed into the tree or discarded; until then it is a pending run.
// Its states are in runstate.go. (A run on the tree is a [TreeRun].)
type ViewRun struct {
	ID         string    `json:"id"`
	Command    []string  `json:"command"`
	Mode       string    `json:"mode"`
	State      string    `json:"state"`
	StartedAt  time.Time `json:"started_at"`
	ExitStatus *int      `json:"exit_status,omitempty"`
	// Committed lists paths already committed by a selective commit, with
	// the ctime the commit left them at: they are not conflicts later.
	Committed map[string]int64 `json:"committed,omitempty"`
	// Targets are the states of the targets before the command ran; the
	// first commit takes them into its record, a discard restores them.
	Targets []record.TargetState `json:"targets,omitempty"`
	// Then is what the session's first command was to become of (commit,
	// review or discard): `run --continue` keeps it unless told otherwise.
	Then string `json:"then,omitempty"`
	// Steps are the session's commands, one per command run in the view.
	Steps []record.Step `json:"steps,omitempty"`
	// WroteThrough are the topmost ignored paths its commands wrote: in
	// the tree already, kept whatever becomes of the run.
	WroteThrough []string `json:"wrote_through,omitempty"`
	// Git is what HEAD outside the root was when the run began (gitseen.go).
	Git []record.GitHead `json:"git,omitempty"`
	// ZFS names the zfs view's clones while they exist (zfsview.go).
	ZFS *zfs.Clones `json:"zfs,omitempty"`

	lock  *os.File
	stamp map[string]layerStamp // the layer before the running step
}

// ErrNoPending is returned when no pending run matches.
var ErrNoPending = errors.New("no pending run")

// UpperDir and WorkDir are the run's overlay directories.
func (r *Reader) UpperDir(id string) string { return r.path("runs", id, "upper") }
func (r *Reader) WorkDir(id string) string  { return r.path("runs", id, "work") }

func (r *Reader) pendingPath(id string) string { return r.path("runs", id, "run.json") }

// gitIndexCopy is the project's git index as it was when the run started.
func (r *Repo) gitIndexCopy(id string) string { return r.path("runs", id, "git-index") }

// saveGitIndex copies the project's git index, if it has one, so that a
// commit can tell whether git only refreshed it meanwhile (see
// sameGitIndex) or someone staged something.
func (r *Repo) saveGitIndex(id string) error {
	b, err := r.ReadTreeFile(gitIndexPath, maxGitIndex+1)
	if err != nil || len(b) > maxGitIndex {
		return nil // none (or too large to compare: judged by its ctime)
	}
	return fsutil.WriteFileAtomic(r.gitIndexCopy(id), b, 0o600)
}

// StartViewRun makes a new overlay run and takes its lock (held until
// [Repo.Release] or the process ends).
func (r *Repo) StartViewRun(command []string, mode string) (*ViewRun, error) {
	m, err := r.newMeta(record.KindRun, record.ScopePaths)
	if err != nil {
		return nil, err
	}
	p := &ViewRun{ID: m.ID, Command: command, Mode: mode, State: record.StateRunning, StartedAt: time.Now(), Git: r.seeGit()}
	if p.lock, err = r.lockRun(p.ID); err != nil {
		return nil, err
	}
	for _, d := range []string{r.UpperDir(p.ID), r.WorkDir(p.ID)} {
		fsutil.Mutating()
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			r.Release(p)
			return nil, fmt.Errorf("run %s: %w", p.ID, err)
		}
	}
	// The merged view's root takes the upper directory's owner and mode:
	// they must be the root's own.
	if err := copyOwnerMode(r.Root, r.UpperDir(p.ID)); err != nil {
		r.Release(p)
		return nil, fmt.Errorf("run %s: %w", p.ID, err)
	}
	if err := r.saveGitIndex(p.ID); err != nil {
		r.dropRun(p.ID)
		r.Release(p)
		return nil, fmt.Errorf("run %s: %w", p.ID, err)
	}
	if err := r.SaveViewRun(p); err != nil {
		r.Release(p)
		return nil, err
	}
	// The git state outside the root is saved as a copy-mode run saves it
	// (the view does not hold it: the command's git writes there): a
	// discard puts it back, a commit keeps it for undo (gitstate.go).
	if ts := r.withGitTarget(r.Targets); len(ts) > 0 {
		if p.Targets, err = r.snapTargets(p.ID, ts); err == nil {
			err = r.SaveViewRun(p)
		}
		if err != nil {
			r.releasePayloads(p.ID)
			r.dropRun(p.ID)
			r.Release(p)
			return nil, err
		}
	}
	return p, nil
}

// Resume takes the lock of a pending run for another command in it.
func (r *Repo) Resume(p *ViewRun) error {
	f, err := r.lockRun(p.ID)
	if err != nil {
		return err
	}
	p.lock = f
	p.State = record.StateRunning
	return r.SaveViewRun(p)
}

// LockFile is the open file of the run's lock while this process holds
// it (nil otherwise): a process that inherits it keeps the run running
// for as long as it lives (the overlay modes' init does, so that a run
// whose snapback died is not committed while its processes still write).
func (p *ViewRun) LockFile() *os.File { return p.lock }

// Release drops the run's lock (its state stays as saved).
func (r *Repo) Release(p *ViewRun) {
	if p.lock != nil {
		p.lock.Close()
		p.lock = nil
	}
}

// EndCommand records that the run's command ended with status: the run
// is pending, its lock released, and what the command wrote to ignored
// paths is in the tree (see [Repo.WriteThrough]).
func (r *Repo) EndCommand(p *ViewRun, status int) error {
	if err := r.endStep(p, status); err != nil {
		return err
	}
	if err := r.noteSeen(p); err != nil {
		return err
	}
	p.ExitStatus, p.State = &status, record.StatePending
	r.Release(p)
	if err := r.SaveViewRun(p); err != nil {
		return err
	}
	return r.WriteThrough(p)
}

// SaveViewRun writes the run's record.
func (r *Repo) SaveViewRun(p *ViewRun) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(r.pendingPath(p.ID), b, 0o600)
}

// IsPending reports whether run id is still pending (or running).
func (r *Reader) IsPending(id string) (bool, error) {
	runs, err := r.PendingRuns()
	if err != nil {
		return false, err
	}
	for _, p := range runs {
		if p.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// PendingRuns lists overlay runs not yet committed or discarded, oldest
// first. A run whose process died while running is reported pending.
func (r *Reader) PendingRuns() ([]*ViewRun, error) {
	ents, err := os.ReadDir(r.path("runs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	var out []*ViewRun
	for _, e := range ents {
		b, err := r.readFile(r.pendingPath(e.Name()), maxRunSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a copy-mode run's lock directory, or not ours
		}
		var p ViewRun
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err != nil || p.ID != e.Name() || !record.ValidID(p.ID) {
			if err := r.damagedRun(e.Name(), err); err != nil {
				return nil, err
			}
			continue
		}
		if p.State == record.StateRunning && !r.alive(p.ID) {
			p.State = record.StatePending // its snapback died; the layer is intact
		}
		out = append(out, &p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// PendingChanges reads a pending run's changeset and the tree's state of
// the same paths.
func (r *Reader) PendingChanges(p *ViewRun) (target, cur record.Manifest, err error) {
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return nil, nil, err
	}
	defer upper.Close()
	if target, err = r.RunChangeset(p, upper); err != nil {
		return nil, nil, err
	}
	// What a commit would leave as the tree has it is no change of the
	// run's to show.
	if target, err = r.dropUnchanged(p, target); err != nil {
		return nil, nil, err
	}
	if cur, err = r.current(target, record.ScopePaths, false); err != nil {
		return nil, nil, err
	}
	// current adds the other names of hard-linked files, which the run
	// did not change (the commit saves them, the diff must not show them
	// as deleted: absent from target means untouched, not removed).
	out := cur[:0]
	for i := range cur {
		if target.Find(cur[i].Path) != nil {
			out = append(out, cur[i])
		}
	}
	for i := range out {
		if out[i].Link != "" && target.Find(out[i].Link) == nil {
			out[i].Link = "" // its partner stays out of the diff
		}
	}
	return target, out, nil
}

// CommitViewRun moves a pending run's changes into the tree (a run that
// changed nothing is dropped and yields no snapshot: nil) (only those
// at or below the given paths, when any are given: nil too when the
// tree holds what the run left there already, and the run stays
// pending unless that was all it changed) as one crash-safe
// step, first saving what they replace as a run snapshot that `undo`
// reverts. A path changed in the tree since the run started is a conflict:
// nothing is changed and the run stays pending, unless force is set.
func (r *Repo) CommitViewRun(p *ViewRun, only []string, force bool) (*record.Meta, error) {
	target, err := r.commitable(p)
	if err != nil {
		return nil, err
	}
	if !force {
		if target, err = r.dropUnchanged(p, target); err != nil {
			return nil, err
		}
	}
	if len(only) > 0 {
		all := target
		var excl []string
		if target, excl, err = r.selectPaths(p, target, only); err != nil {
			return nil, err
		}
		if len(target) == 0 && len(excl) == 0 {
			// What the run changed there, the tree holds so already:
			// nothing to write. The rest stays pending; a run with no
			// rest ends, as one that changed nothing does.
			if len(all) > 0 || !r.UnchangedGitOnly(p.Targets) {
				return nil, nil
			}
			if excl, err = r.ExcludedIn(p, nil); err != nil || len(excl) > 0 {
				return nil, err
			}
			only = nil
		}
	}
	if len(target) == 0 && len(only) == 0 && r.UnchangedGitOnly(p.Targets) {
		// Nothing changed: no snapshot, so that `undo` still reverts the
		// last change that did something. (With targets there is always a
		// record: what the command did to them cannot be seen.)
		if _, err := r.moveExcluded(p, nil); err != nil {
			return nil, err
		}
		if err := r.dropRun(p.ID); err != nil {
			return nil, err
		}
		return nil, r.releasePayloads(p.ID)
	}
	return r.commitSelected(p, target, only, nil, force)
}

// commitable reads the changeset of a pending run about to be committed.
func (r *Repo) commitable(p *ViewRun) (record.Manifest, error) {
	if p.State == record.StateRunning {
		return nil, fmt.Errorf("run %s: %w", p.ID, ErrRunning)
	}
	// Its paths would land in the open checkpoint as well.
	if err := r.refuseOpen("commit"); err != nil {
		return nil, err
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return nil, err
	}
	defer upper.Close()
	return r.RunChangeset(p, upper)
}

// commitSelected commits target, the part of p's changeset chosen (all
// of it unless only or parts say otherwise: a selective commit leaves the
// rest pending). only are the PATHs of `commit PATH...` (the excluded
// paths below them move too); parts, for `commit -p`, maps each file of
// which only some changes are taken to the tree content they were made
// from (target holds the content made: its layer entry stays, and no
// excluded path moves).
func (r *Repo) commitSelected(p *ViewRun, target record.Manifest, only []string, parts map[string]record.ObjectID, force bool) (*record.Meta, error) {
	partial := len(only) > 0 || parts != nil
	cur, err := r.current(target, record.ScopePaths, false) // saved by the transition, linked where it can
	if err != nil {
		return nil, err
	}
	for path, base := range parts {
		if c := cur.Find(path); c == nil || c.Type != record.File || c.Object != base {
			return nil, fmt.Errorf("commit %s: %s changed in the tree since its hunks were read; nothing was changed, try again", p.ID, path)
		}
	}
	if !force {
		conflicts, err := r.changedSince(p, target, cur)
		if err != nil {
			return nil, err
		}
		if len(conflicts) > 0 {
			return nil, &ConflictError{Op: "commit", Paths: conflicts}
		}
	}
	if err := r.keepGitIndexes(p.ID, target); err != nil {
		return nil, err
	}
	// Excluded paths go first, outside the journal: they are not
	// snapshotted, so undo does not take them back either. (A crash
	// before the transition leaves them in the tree and the rest
	// pending.)
	var excl []string
	if parts == nil {
		if excl, err = r.moveExcluded(p, only); err != nil {
			return nil, err
		}
	}
	rec, err := r.newMeta(record.KindRun, record.ScopePaths)
	if err != nil {
		return nil, err
	}
	rec.Command, rec.Mode, rec.ExitStatus, rec.State = p.Command, p.Mode, p.ExitStatus, record.StateDone
	rec.Targets, rec.Steps = p.Targets, p.Steps
	rec.WroteThrough, rec.Excluded = p.WroteThrough, excl
	rec.Git = r.sawGit(p.Git)
	if err := r.sealGit(rec.Targets); err != nil {
		return nil, err
	}
	rec.Files, rec.Bytes = counts(target)
	if rec.Manifest, err = r.record(cur); err != nil {
		return nil, err
	}
	if rec.After, err = r.record(target); err != nil {
		return nil, err
	}
	rec.AfterHashesOnly = true // moved into the tree, not copied (but for git indexes and parts)
	j := &journal{Op: "commit", OpID: rec.ID, Scope: record.ScopePaths, Record: rec, Source: filepath.Join("runs", p.ID, "upper")}
	for path := range parts {
		j.Kept = append(j.Kept, path)
	}
	sort.Strings(j.Kept)
	if !partial {
		j.Done = p.ID
	}
	if err := r.transitionFrom(j, target, cur); err != nil {
		return nil, err
	}
	if partial {
		p.Targets = nil // the first commit's record owns them now
		if err := r.afterPartialCommit(p, target, parts); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// keepGitIndexes stores the git indexes the run wrote: the commit moves
// its other contents into the tree without a copy, but undo compares an
// index by its entries (see sameGitIndex), so it needs the bytes.
func (r *Repo) keepGitIndexes(id string, target record.Manifest) error {
	for i := range target {
		e := &target[i]
		if e.Type != record.File || !isGitIndex(e.Path) {
			continue
		}
		d, err := fsutil.OpenRoot(filepath.Join(r.UpperDir(id), filepath.FromSlash(record.Parent(e.Path))))
		if err != nil {
			continue // (a redirect's source elsewhere: judged by its bytes)
		}
		f, err := d.Open(record.Base(e.Path), unix.O_RDONLY, 0)
		d.Close()
		if err != nil {
			continue
		}
		_, _, err = r.PutFile(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("commit %s: %w", id, err)
		}
	}
	return nil
}

// selectPaths keeps of a changeset what is at or below the given paths,
// each of which the run must have changed (or written excluded paths
// at or below: those it returns).
func (r *Repo) selectPaths(p *ViewRun, target record.Manifest, only []string) (record.Manifest, []string, error) {
	var sel record.Manifest
	var excl []string
	for _, o := range only {
		n := len(sel)
		for i := range target {
			if record.Under(target[i].Path, o) {
				sel = append(sel, target[i])
			}
		}
		if len(sel) > n {
			continue
		}
		x, err := r.ExcludedIn(p, []string{o})
		if err != nil {
			return nil, nil, err
		}
		if len(x) == 0 {
			in, err := r.inLayer(p.ID, o)
			if err != nil {
				return nil, nil, err
			}
			if !in {
				return nil, nil, fmt.Errorf("commit %s: %w: the run did not change %q", p.ID, ErrNotFound, o)
			}
			continue // changed by the run, and the tree holds it so already: nothing to write
		}
		excl = append(excl, x...)
	}
	sel.Sort()
	out := sel[:0]
	for i := range sel { // drop duplicates of overlapping paths
		if len(out) == 0 || out[len(out)-1].Path != sel[i].Path {
			out = append(out, sel[i])
		}
	}
	// A path in a directory the run made comes with the directory (and
	// those above it the tree lacks): the commit wrote the path into a
	// directory that was not there, and stopped half-way for good.
	out, err := r.withNewDirs(target, out)
	if err != nil {
		return nil, nil, err
	}
	// A hard link must name a path of the selection, as in a changeset
	// (the manifest rule): the partner left pending, the entry stands
	// alone with its own content. Kept, it made the journal a manifest
	// no decoder takes, and recover after a kill failed for ever.
	for i := range out {
		if out[i].Link != "" && out.Find(out[i].Link) == nil {
			out[i].Link = ""
		}
	}
	return out, excl, nil
}

// inLayer reports whether run id's layer holds path, or a file, a
// symbolic link or a whiteout above it: the run changed it (a path the
// tree holds as the run left it is no change, and no part of the
// changeset). Each name is looked at without following it.
func (r *Repo) inLayer(id, path string) (bool, error) {
	upper, err := fsutil.OpenRoot(r.UpperDir(id))
	if err != nil {
		return false, err
	}
	defer upper.Close()
	d := upper
	for _, name := range strings.Split(path, "/") {
		st, err := d.Lstat(name)
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return true, nil
		}
		next, err := d.OpenDir(name)
		if err != nil {
			return false, err
		}
		if d != upper {
			d.Close()
		}
		d = next
	}
	if d != upper {
		d.Close()
	}
	return true, nil
}

// excludedWalk walks a run's layer for the excluded paths at or below
// only (all, if none).
func (r *Reader) excludedWalk(only []string) *layerWalk {
	within := func(path string) bool {
		if len(only) == 0 {
			return true
		}
		for _, o := range only {
			if record.Under(path, o) {
				return true
			}
		}
		return false
	}
	return &layerWalk{
		match: func(path string, isDir bool) bool { return within(path) && r.excluded(path, isDir) },
		skip:  r.excluded, // excluded but not selected: left pending
	}
}

// ExcludedIn lists the topmost excluded paths (at or below only, if
// given) the run wrote: not in its changeset or diff, moved into the tree
// by its commit, dropped by its discard.
func (r *Reader) ExcludedIn(p *ViewRun, only []string) ([]string, error) {
	var out []string
	err := r.excludedWrites(p, only, func(upper *fsutil.Dir, w *layerWalk) error {
		w.found = func(path string) { out = addPath(out, path) }
		return r.findInLayer(upper, "", w)
	})
	return out, err
}

// moveExcluded moves what the run wrote to excluded paths (at or below
// only, if given) into the tree, and returns the topmost of them.
func (r *Repo) moveExcluded(p *ViewRun, only []string) ([]string, error) {
	var out []string
	err := r.excludedWrites(p, only, func(upper *fsutil.Dir, w *layerWalk) error {
		w.found = func(path string) { out = addPath(out, path) }
		return r.writeThrough(p, upper, "", false, w)
	})
	return out, err
}

// excludedWrites walks, with walk, what the run wrote to excluded paths.
func (r *Reader) excludedWrites(p *ViewRun, only []string, walk func(*fsutil.Dir, *layerWalk) error) error {
	if r.ign == nil {
		return nil
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	defer upper.Close()
	return walk(upper, r.excludedWalk(only))
}

// changedSince lists the paths of cur (the tree's state of what a commit
// writes) changed in the tree since the run started, but by the run's
// own earlier commits: the commit's conflicts. A path whose ctime moved
// is judged by what the run noted of it at the start (seen.go): its
// type, mode, content and link target; an absent one the run noted
// present was deleted since, unless target (what the commit writes)
// deletes it too. The project's git index is judged by its entries
// against its copy from the run's start: a `git status` meanwhile only
// refreshed what it caches.
func (r *Repo) changedSince(p *ViewRun, target, cur record.Manifest) ([]string, error) {
	seen, err := r.loadSeen(p.ID)
	if err != nil {
		return nil, err
	}
	var conflicts []string
	start := p.StartedAt.UnixNano()
	for i := range cur {
		c := &cur[i]
		if !governs(target, c.Path) {
			// Another name of a file the commit replaces, read so that
			// the saved state keeps the link (current): the commit
			// writes a new file at the path and leaves this name as it
			// is. (A change through it changed the file's own ctime.)
			continue
		}
		if c.Type == record.Absent {
			// Deleted since the run started, if the run noted it there:
			// the commit would bring it back. (One deleted before the
			// command's end has no note: the documented limit.)
			s, t := seen.Find(c.Path), target.Find(c.Path)
			if s != nil && s.Type != record.Absent && t != nil && t.Type != record.Absent {
				conflicts = append(conflicts, c.Path)
			}
			continue
		}
		if c.Ctime < start {
			continue
		}
		at, committed := p.Committed[c.Path]
		if committed && c.Ctime == at {
			continue // changed by this run's own earlier commit
		}
		if c.Path == gitIndexPath && c.Type == record.File && r.sameAsGitIndexCopy(p.ID) {
			continue
		}
		if same, ok := sameAsSeen(seen, cur, c); ok && !committed {
			if !same {
				conflicts = append(conflicts, c.Path)
			}
			continue
		}
		// Not noted (changed before the run's step ended, or a run of
		// an older snapback). A directory's ctime moves with any child:
		// one made since the run started (its birth time says so) is
		// someone else's, and the run's entry would replace it.
		if c.Type == record.Dir && (committed || !bornSince(filepath.Join(r.Root, c.Path), start)) {
			continue // an old directory, or one this run's earlier commit made
		}
		conflicts = append(conflicts, c.Path)
	}
	return conflicts, nil
}

// governs reports whether target holds p or a directory above it: what a
// commit of target writes or replaces.
func governs(target record.Manifest, p string) bool {
	for q := p; ; q = record.Parent(q) {
		if target.Find(q) != nil {
			return true
		}
		if q == "" {
			return false
		}
	}
}

// sameAsGitIndexCopy reports whether the project's git index stages what
// it did when run id started.
func (r *Repo) sameAsGitIndexCopy(id string) bool {
	x, err := r.readFile(r.gitIndexCopy(id), maxGitIndex)
	if err != nil {
		return false
	}
	y, err := r.ReadTreeFile(gitIndexPath, maxGitIndex)
	return err == nil && sameGitIndex(x, y)
}

// afterPartialCommit removes what was committed from the upper layer
// (whiteouts and emptied directories; moved entries are gone already, and
// the files of parts stay, with what was not taken of them) and
// notes the paths, so a later commit of the rest does not see them as
// conflicts.
func (r *Repo) afterPartialCommit(p *ViewRun, done record.Manifest, parts map[string]record.ObjectID) error {
	if p.Committed == nil {
		p.Committed = map[string]int64{}
	}
	upper, err := fsutil.OpenRoot(r.UpperDir(p.ID))
	if err != nil {
		return err
	}
	defer upper.Close()
	now, err := r.ScanPaths(done.Paths(), false, false)
	if err != nil {
		return err
	}
	for i := len(done) - 1; i >= 0; i-- {
		e := &done[i]
		if c := now.Find(e.Path); c != nil && c.Type != record.Absent {
			p.Committed[e.Path] = c.Ctime
		}
		if _, ok := parts[e.Path]; ok {
			continue // the layer keeps the changes not taken
		}
		d, err := upper.OpenDir(record.Parent(e.Path))
		if err != nil {
			continue // its directory went with an earlier removal
		}
		if e.Type == record.Dir {
			d.Rmdir(record.Base(e.Path)) // only if emptied: what remains is still pending
		} else {
			d.Unlink(record.Base(e.Path)) // a whiteout, or a hard link left behind
		}
		d.Close()
	}
	// A commit of PATHs that took the last changes ends the run, as a
	// whole commit does: an empty pending run would make `undo` refuse.
	left, err := r.RunChangeset(p, upper)
	if err != nil {
		return err
	}
	excl, err := r.ExcludedIn(p, nil)
	if err != nil {
		return err
	}
	if len(left) == 0 && len(excl) == 0 {
		return r.dropRun(p.ID)
	}
	return r.SaveViewRun(p)
}

// DiscardViewRun throws a pending run's changes away and brings its
// targets back to their state before the command, as one crash-safe step.
func (r *Repo) DiscardViewRun(p *ViewRun) error {
	if p.State == record.StateRunning {
		return fmt.Errorf("run %s: %w", p.ID, ErrRunning)
	}
	if len(p.Targets) == 0 {
		return r.dropRun(p.ID)
	}
	if err := r.sealGit(p.Targets); err != nil {
		return err
	}
	ts, err := r.stateTargets(p.Targets)
	if err != nil {
		return err
	}
	if err := r.checkTargets(ts); err != nil {
		return err
	}
	if err := r.checkGitTargets("discard", p.Targets, true); err != nil {
		return err
	}
	tid, err := r.record(nil)
	if err != nil {
		return err
	}
	j := &journal{Op: "discard", OpID: p.ID, Apply: tid, Scope: record.ScopePaths, Done: p.ID, Targets: p.Targets}
	if err := r.Flush(); err != nil {
		return err
	}
	if err := r.writeJournal(j); err != nil {
		return err
	}
	return r.finish(j, nil, record.Manifest{})
}

// dropRun removes a run's directory (its upper layer included). The
// directory is first renamed into the store's tmp/ (one atomic step: the
// run is there whole or gone), then deleted; recover sweeps what a crash
// leaves of it there.
func (r *Repo) dropRun(id string) error {
	trash := r.path("tmp", "drop-"+id)
	if err := fsutil.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove run %s: %w", id, err)
	}
	fsutil.Mutating()
	switch err := os.Rename(r.runDir(id), trash); {
	case errors.Is(err, fs.ErrNotExist):
		return nil // gone already
	case err != nil:
		return fmt.Errorf("remove run %s: %w", id, err)
	}
	if err := fsutil.SyncDir(r.path("runs")); err != nil {
		return err
	}
	return removeTrash(trash)
}

// removeTrash deletes a directory a run left, however its command left
// the modes in it.
func removeTrash(dir string) error {
	if err := fsutil.RemoveAll(dir); err != nil {
		// overlayfs leaves work/work with mode 0 (and a command may leave
		// unwritable directories in its layer): open them up, try again.
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				fsutil.Mutating()
				os.Chmod(p, 0o700) // best effort: RemoveAll below says what failed
			}
			return nil
		})
		fsutil.Mutating()
		os.Chmod(filepath.Join(dir, "work", "work"), 0o700) // not reachable by the walk while mode 0
		if err := fsutil.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	return nil
}

func copyOwnerMode(from, to string) error {
	var st unix.Stat_t
	if err := unix.Stat(from, &st); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return unix.Chmod(to, uint32(st.Mode)&0o7777)
}
