package snapshot

import (
	"errors"
	"fmt"
	"os"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// ErrRunning is returned for a run whose command is still executing.
var ErrRunning = errors.New("its command is still running")

// TreeRun is a run on the tree itself (a tree mode: copy, btrfs) in progress:
// its snapshot and the lock that tells other snapback processes the
// command is still alive. (A run in a view is a [ViewRun].)
type TreeRun struct {
	Meta *record.Meta
	// Dropped is set by FinishTreeRun when the command changed nothing: the
	// run left no record, so that `undo` reverts the last change that did
	// something.
	Dropped bool
	// Skipped, set by FinishTreeRun, are the sockets and devices the command
	// left in the tree: no record carries them (Meta.Skipped).
	Skipped []record.Skipped
	lock    *os.File
	// skipped: what the tree held before the command that snapshots do
	// not carry; FinishTreeRun reports only what the command left.
	skipped map[string]bool
}

func (r *Repo) runDir(id string) string        { return r.path("runs", id) }
func (r *Reader) runLockPath(id string) string { return r.path("runs", id, "lock") }

// lockRun makes the run's directory and takes its lock.
func (r *Repo) lockRun(id string) (*os.File, error) {
	fsutil.Mutating()
	if err := os.MkdirAll(r.runDir(id), 0o700); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	f, err := r.openLockFile("runs/" + id + "/lock")
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("run %s: %w", id, ErrRunning)
	}
	fmt.Fprintf(f, "pid %d\n", os.Getpid()) // informational
	return f, nil
}

// BeginTreeRun records the state of the tree before a command runs on it in
// a tree mode (isolation.Tree: the copy mode reads the tree into the
// store, a mode with a snapshot takes one, see treerun_cow.go): a tree
// snapshot of kind run, state running. While the command runs, this
// process holds the run's lock; if it dies, the next snapback finds the
// lock free and finishes the run (see [Repo.Recover]).
func (r *Repo) BeginTreeRun(command []string, mode string) (*TreeRun, error) {
	tree := treeMode(mode)
	if tree == nil {
		return nil, fmt.Errorf("run: mode %q does not run on the tree", mode)
	}
	// Its changes would land in the open checkpoint as well.
	if err := r.refuseOpen("run"); err != nil {
		return nil, err
	}
	m, err := r.newMeta(record.KindRun, record.ScopeTree)
	if err != nil {
		return nil, err
	}
	m.Command, m.Mode, m.State = command, mode, record.StateRunning
	m.Git = r.seeGit()
	f, err := r.lockRun(m.ID)
	if err != nil {
		return nil, err
	}
	run := &TreeRun{Meta: m, lock: f}
	if m.Targets, err = r.snapTargets(m.ID, r.withGitTarget(r.Targets)); err != nil {
		run.release(r)
		return nil, err
	}
	if tree.Snapshot != nil {
		err = r.snapCoW(m, tree)
	} else {
		err = r.snapInto(m)
	}
	if err != nil {
		r.releasePayloads(m.ID)
		if tree.Drop != nil {
			tree.Drop(r.beforeCoW(m.ID)) // best effort: the run's directory goes next
		}
		run.release(r)
		return nil, err
	}
	run.skipped = map[string]bool{}
	for _, sk := range r.LastScan.Skipped {
		run.skipped[sk.Path] = true
	}
	return run, nil
}

func (run *TreeRun) release(r *Repo) {
	if run.lock == nil {
		return
	}
	// Remove before unlocking: no one may see a free, stale lock.
	fsutil.RemoveAll(r.runDir(run.Meta.ID)) // a leftover is swept as a dead run's
	run.lock.Close()
	run.lock = nil
}

// ErrTreeBusy is returned by TryLockTree while another run works on the
// tree itself.
var ErrTreeBusy = errors.New("another run works on the tree")

// TreeLock is held by a run on the tree itself (a tree mode) from
// before its snapshot until its record is written: two such runs at once
// would each record the other's changes as its own (and undoing one
// would delete the other's files). The kernel drops it with its process.
type TreeLock struct{ f *os.File }

// TryLockTree takes the tree lock, or returns ErrTreeBusy at once.
func (r *Repo) TryLockTree() (*TreeLock, error) {
	f, err := r.openLockFile("treerun.lock")
	if err != nil {
		return nil, fmt.Errorf("lock tree: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrTreeBusy
		}
		return nil, fmt.Errorf("lock tree: %w", err)
	}
	return &TreeLock{f}, nil
}

// Unlock releases the tree lock.
func (l *TreeLock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// TreeRunning returns the run on the tree in progress, if one is found.
func (r *Repo) TreeRunning() *record.Meta {
	all, _, err := r.liveRecords()
	if err != nil {
		return nil
	}
	for i := len(all) - 1; i >= 0; i-- {
		if m := all[i]; m.Kind == record.KindRun && m.State == record.StateRunning && m.Scope == record.ScopeTree {
			return m
		}
	}
	return nil
}

// alive reports whether the process running id still holds its lock.
func (r *Reader) alive(id string) bool {
	f, err := os.OpenFile(r.runLockPath(id), os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false // no lock file: its process is gone
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
}

// FinishTreeRun narrows a finished run's snapshot to the paths the command
// changed: the before state of those paths, and (as After) the state the
// command left them in. `undo` then reverts exactly those paths, keeps
// later edits to other files, and sees later edits to the same paths as
// conflicts. exitStatus is nil when the command's end was not seen.
func (r *Repo) FinishTreeRun(run *TreeRun, exitStatus *int) error {
	m := run.Meta
	tree := treeMode(m.Mode)
	if tree == nil {
		tree = &isolation.Tree{} // no tree mode this build knows (a record is input from outside): narrowed by reading the tree, as in the copy mode
	}
	narrow := r.narrowRun
	if tree.Snapshot != nil {
		narrow = r.narrowCoW
	}
	if err := narrow(m); err != nil {
		return err
	}
	if tree.Snapshot == nil && run.skipped != nil {
		// narrowRun's scan of the tree saw them. (A dead run's
		// snapback, finished by another, did not say what was there
		// before: nothing is reported rather than old sockets.)
		for _, sk := range r.LastScan.Skipped {
			if !run.skipped[sk.Path] {
				m.Skipped = append(m.Skipped, sk)
			}
		}
		run.Skipped = m.Skipped
	}
	m.ExitStatus = exitStatus
	m.State = record.StateDone
	if exitStatus == nil {
		m.State = record.StateInterrupted
	}
	var err error
	if run.Dropped, err = r.closeRecord(m); err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	if tree.Drop != nil {
		if err := tree.Drop(r.beforeCoW(m.ID)); err != nil {
			return err
		}
	}
	run.release(r)
	return nil
}

// closeRecord writes m, narrowed, in place of the record it was while
// its changes were being made; when it holds no change (and no target: what
// was done to them cannot be seen, so a record with targets always stays),
// it removes the record instead and reports dropped: no undo step.
func (r *Repo) closeRecord(m *record.Meta) (dropped bool, err error) {
	m.Git = r.sawGit(m.Git)
	if err := r.sealGit(m.Targets); err != nil {
		return false, err
	}
	if err := r.dropUnchangedGit(m); err != nil {
		return false, err
	}
	after, err := r.LoadManifest(m.After)
	if err != nil {
		return false, err
	}
	if len(after) == 0 && len(m.Targets) == 0 {
		return true, r.deleteMeta(m.ID)
	}
	return false, r.WriteMeta(m)
}

func (r *Repo) narrowRun(m *record.Meta) error {
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	after, err := r.ScanTree(true)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	changed := map[string]bool{}
	record.Zip(before, after, func(x, y *record.Entry) {
		switch {
		case x == nil:
			changed[y.Path] = true
		case y == nil || !x.SameContent(y) || !x.SameMeta(y):
			changed[x.Path] = true
		}
	})
	return r.recordNarrowed(m, before, after, changed)
}

// recordNarrowed makes m a paths record of the changed paths: their state
// before the run (Manifest) and after it (After).
func (r *Repo) recordNarrowed(m *record.Meta, before, after record.Manifest, changed map[string]bool) error {
	b, a := Subset(before, after, changed)
	var err error
	if m.Manifest, err = r.record(b); err != nil {
		return err
	}
	if m.After, err = r.record(a); err != nil {
		return err
	}
	if err := r.Flush(); err != nil {
		return err
	}
	m.Scope = record.ScopePaths
	m.Files, m.Bytes = counts(a)
	return nil
}

// finishDeadRuns finishes runs whose snapback process died while their
// command ran: the changes made up to then become an undoable run.
func (r *Repo) finishDeadRuns() (int, error) {
	all, _, err := r.liveRecords() // a damaged record is none to finish: the verb decides about it
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range all {
		if m.State != record.StateRunning || r.alive(m.ID) {
			continue
		}
		if err := r.FinishTreeRun(&TreeRun{Meta: m}, nil); err != nil {
			return n, err
		}
		fsutil.RemoveAll(r.runDir(m.ID)) // the dead process's lock
		n++
	}
	return n, nil
}

// Subset cuts two states of the tree down to the same set of paths (those
// in keep, plus the first names of hard links they share), with absent
// entries where a state lacks a path.
func Subset(x, y record.Manifest, keep map[string]bool) (record.Manifest, record.Manifest) {
	for grew := true; grew; {
		grew = false
		for _, m := range []record.Manifest{x, y} {
			for i := range m {
				if keep[m[i].Path] && m[i].Link != "" && !keep[m[i].Link] {
					keep[m[i].Link] = true
					grew = true
				}
			}
		}
	}
	pick := func(m record.Manifest) record.Manifest {
		out := record.Manifest{}
		for p := range keep {
			if e := m.Find(p); e != nil {
				out = append(out, *e)
			} else {
				out = append(out, record.Entry{Path: p, Type: record.Absent})
			}
		}
		out.Sort()
		return out
	}
	return pick(x), pick(y)
}
