package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/zfs"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// Then is what becomes of a view's changes once its command ends.
type Then string

const (
	ThenCommit  Then = "commit"  // into the tree, as one undoable run
	ThenReview  Then = "review"  // kept pending: diff, commit or discard later
	ThenDiscard Then = "discard" // thrown away (a run on the tree is undone)
)

// Options say what to run and how.
type Options struct {
	Args []string // the command; Args[0] is looked up in PATH
	Mode string   // an isolation mode's name; "" or auto: the first that works
	// Then is what becomes of the changes; "" is the session's own for
	// Continue (review for a run that recorded none), else commit.
	Then Then
	// CommitFailed commits (Then commit) even when the command failed: by
	// default a run whose command exits non-zero, or is killed, stays
	// pending, so that half-done changes are not committed unseen.
	CommitFailed bool
	// Continue is a pending run's id (or a unique prefix): the command
	// runs in its view, on top of its changes, and Mode is the run's.
	Continue string
	// Wait makes Continue wait while another command runs in the view
	// (Waiting is told which, once); without it that is refused at once.
	Wait    bool
	Waiting func(*snapshot.ViewRun)
	// Grace is how long the overlay modes wait, once the command has
	// exited, for processes it left running before they end them.
	Grace time.Duration
	// LockWait is how long to wait for the store's lock once the command
	// has ended (others may have taken it meanwhile).
	LockWait time.Duration
	// Notify, when set, is told (one line) why the run waits.
	Notify func(string)
	// Count fills Result.Changes: it costs a comparison of the run's
	// paths, so only callers that report them ask.
	Count bool
}

// DefaultGrace is Options.Grace's default.
const DefaultGrace = 10 * time.Second

// Result is what a run did.
type Result struct {
	Status int // the command's exit status (126 or 127 if it could not start)
	// StartErr says why the command could not start, when it could not;
	// the run is recorded all the same (it changed nothing).
	StartErr error
	// Pending is the run kept pending (ThenReview, or a failed command's),
	// else nil.
	Pending *snapshot.ViewRun
	// Failed: the command failed and its changes were kept pending
	// instead of being committed (Then commit without CommitFailed).
	Failed bool
	// KeptIgnored and DroppedExcluded are, for a run discarded at once,
	// the ignored paths it wrote through (kept) and the excluded ones it
	// wrote (dropped with it).
	KeptIgnored, DroppedExcluded []string
	// Recorded is the record of a run on the tree (copy and btrfs modes):
	// there is no pending state, what the command did is in the tree.
	Recorded *record.Meta
	// ID is the run's id, Mode its isolation mode and State what became
	// of it: committed, pending, discarded, or empty (it changed nothing
	// and left no record).
	ID, Mode, State string
	// Snapshot is the record undo reverts (committed runs), else "".
	Snapshot string
	// Targets are the states outside the tree saved before the command.
	Targets []record.TargetState
	// Changes are the paths the run changed (kept pending, committed or
	// thrown away), with Options.Count.
	Changes []record.Change
	// Skipped are the sockets and devices the command left that the
	// commit (or the copy mode's record) does not carry.
	Skipped []record.Skipped
}

// BadInputError is a run refused before anything ran or changed.
type BadInputError struct{ Err error }

func (e *BadInputError) Error() string { return e.Err.Error() }
func (e *BadInputError) Unwrap() error { return e.Err }

func badInput(format string, a ...any) error {
	return &BadInputError{fmt.Errorf(format, a...)}
}

// Run runs a command as o says, in the project repo holds locked, and
// leaves it locked again. An error means snapback failed (or refused,
// [*BadInputError]); the command's own failure is only its status.
func Run(ctx context.Context, repo *snapshot.Repo, o Options) (Result, error) {
	var p *snapshot.ViewRun
	var mode *isolation.Mode
	if o.Continue != "" {
		var err error
		if p, err = findIdle(ctx, repo, o); err != nil {
			return Result{}, err
		}
		if mode = isolation.Find(p.Mode); mode == nil || mode.View == nil {
			return Result{}, fmt.Errorf("run %s: mode %q is no view to continue in", p.ID, p.Mode)
		}
		if mode.View.ZFS {
			// Its clones are gone once its first command ended: a second
			// view would have to be the tree with the layer put on it.
			return Result{}, badInput("run --continue %s: a zfs run keeps no view between commands (not built yet); commit or discard it, or run in the overlayfs or fuse mode", p.ID)
		}
		if o.Then == "" {
			o.Then = Then(p.Then)
		}
		if o.Then == "" {
			o.Then = ThenReview // a run from before sessions kept theirs: commit nothing unasked
		}
		if err := repo.Resume(p); err != nil {
			return Result{}, err
		}
	} else {
		if err := CheckRoot(repo.Root, o.Mode); err != nil {
			return Result{}, err
		}
		var err error
		if mode, err = Pick(o.Mode, repo.Root); err != nil {
			return Result{}, badInput("run: --mode %s: %w", o.Mode, err)
		}
		if err := repo.CheckTargets(); err != nil {
			return Result{}, err // before anything runs or changes
		}
		if o.Then == "" {
			o.Then = ThenCommit
		}
	}
	if mode.View == nil {
		// These modes run on the tree itself: nothing can wait for
		// review, and discarding means undoing at once.
		if o.Then == ThenReview {
			return Result{}, badInput("run: --then review needs an overlay mode; the %s mode changes the tree itself (snapback doctor says which modes work here)", mode.Name)
		}
		return runOnTree(ctx, repo, mode, o)
	}
	if p == nil {
		var err error
		if p, err = repo.StartViewRun(o.Args, mode.Name); err != nil {
			return Result{}, err
		}
		p.Then = string(o.Then) // saved by BeginStep
	}
	if err := repo.BeginStep(p, o.Args); err != nil {
		repo.Release(p)
		return Result{}, err
	}
	res, err := runInView(ctx, repo, mode, p, o)
	if err != nil {
		return res, err
	}
	res.ID, res.Mode, res.Targets = p.ID, p.Mode, p.Targets
	if o.Count {
		// Before the commit or discard: what the layer holds is then gone.
		target, cur, err := repo.PendingChanges(p)
		if err != nil {
			return res, err
		}
		res.Changes = record.DiffManifests(cur, target)
	}
	switch o.Then {
	case ThenCommit:
		if res.Status != 0 && !o.CommitFailed {
			// Half of a migration is worse than none or all: the user
			// decides. A failure that wrote nothing has nothing to keep.
			empty, err := repo.LayerEmpty(p)
			if err != nil {
				return res, err
			}
			if !empty || !repo.UnchangedGitOnly(p.Targets) {
				res.Pending, res.Failed, res.State = p, true, "pending"
				return res, nil
			}
			// Dropped here, not by a commit: an open checkpoint refuses
			// a commit, and this one has nothing to bring into the tree.
			if err := repo.DiscardViewRun(p); err != nil {
				return res, err
			}
			res.State = "empty"
			return res, nil
		}
		// Read before the commit drops the layer: what it does not carry.
		if res.Skipped, err = repo.SkippedIn(p); err != nil {
			return res, err
		}
		rec, err := repo.CommitViewRun(p, nil, false)
		var ce *snapshot.ConflictError
		if errors.As(err, &ce) {
			return res, fmt.Errorf("%w; the run stays pending as %s (snapback diff, commit --force, discard)", err, p.ID)
		}
		if errors.Is(err, snapshot.ErrCheckpointOpen) {
			return res, fmt.Errorf("%w; the run stays pending as %s (snapback commit %s once the checkpoint has ended)", err, p.ID, p.ID)
		}
		if err != nil {
			return res, err
		}
		res.State = "empty"
		if rec != nil {
			res.State, res.Snapshot = "committed", rec.ID
		}
	case ThenReview:
		res.Pending, res.State = p, "pending"
	case ThenDiscard:
		if res.DroppedExcluded, err = repo.ExcludedIn(p, nil); err != nil {
			return res, err
		}
		if err := repo.DiscardViewRun(p); err != nil {
			return res, err
		}
		res.KeptIgnored, res.State = p.WroteThrough, "discarded"
	}
	return res, nil
}

// CheckRoot refuses, before anything is made, a run in mode (a name, ""
// for auto) at a root that no view can cover (overlay.Uncovered: /): in a
// view mode it would be isolated in name only, and auto would fall back
// to a snapshot of the whole machine. The modes that run on the tree
// itself, named explicitly, are the user's choice.
func CheckRoot(root, mode string) error {
	why := overlay.Uncovered(root)
	if why == "" {
		return nil
	}
	if mode == "" || mode == isolation.Auto {
		return badInput("run: %s; --mode copy (or btrfs) runs it on the tree itself after a snapshot of all of it, or -C names a project directory", why)
	}
	if m := isolation.Find(mode); m != nil && m.View != nil {
		return badInput("run: --mode %s: %s", mode, why)
	}
	return nil
}

// commandEnv is the command's environment: snapback's, plus the run's id
// and the project root, so that a script can name its own run (diff,
// commit) and find the project from a subdirectory.
func commandEnv(repo *snapshot.Repo, id string) []string {
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SNAPBACK_RUN_ID=") && !strings.HasPrefix(e, "SNAPBACK_ROOT=") {
			env = append(env, e)
		}
	}
	return append(env, "SNAPBACK_RUN_ID="+id, "SNAPBACK_ROOT="+repo.Root)
}

// findIdle finds the pending run o continues; while a command runs in
// it, it waits with o.Wait (the store unlocked meanwhile), else refuses,
// naming the step that runs.
func findIdle(ctx context.Context, repo *snapshot.Repo, o Options) (*snapshot.ViewRun, error) {
	told := false
	for {
		p, err := repo.FindViewRun(o.Continue)
		if err != nil {
			if told {
				return nil, fmt.Errorf("run %s: committed or discarded while we waited: %w", o.Continue, err)
			}
			return nil, err
		}
		if p.State != record.StateRunning {
			return p, nil
		}
		if !o.Wait {
			return nil, fmt.Errorf("run %s: %w: %s (--wait waits for it)", p.ID, snapshot.ErrRunning, RunningStep(p))
		}
		if !told && o.Waiting != nil {
			o.Waiting(p)
		}
		told = true
		repo.Unlock()
		for p.State == record.StateRunning {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if p, err = repo.FindViewRun(p.ID); err != nil {
				break // gone: said so above, with the lock held again
			}
		}
		if err := repo.Lock(o.LockWait, "run --continue"); err != nil {
			return nil, err
		}
	}
}

// RunningStep says which command runs in p: "step 2 ($ make test) since
// 12:03:04".
func RunningStep(p *snapshot.ViewRun) string {
	if len(p.Steps) == 0 {
		return "$ " + strings.Join(p.Command, " ") + " since " + p.StartedAt.Local().Format("15:04:05")
	}
	s := p.Steps[len(p.Steps)-1]
	return fmt.Sprintf("step %d ($ %s) since %s", len(p.Steps), strings.Join(s.Command, " "), s.StartedAt.Local().Format("15:04:05"))
}

// runOnTree snapshots the tree, runs the command on it and records what
// it changed (undone at once with ThenDiscard).
func runOnTree(ctx context.Context, repo *snapshot.Repo, mode *isolation.Mode, o Options) (Result, error) {
	tl, err := lockTree(ctx, repo, mode, o)
	if err != nil {
		return Result{}, err
	}
	defer tl.Unlock()
	run, err := repo.BeginTreeRun(o.Args, mode.Name)
	if errors.Is(err, snapshot.ErrCheckpointOpen) {
		return Result{}, &BadInputError{err} // refused before anything ran
	}
	if err != nil {
		return Result{}, err
	}
	repo.Unlock()       // the command may run for hours: do not hold others off
	wd, _ := os.Getwd() // the command's cwd: ours, as without snapback
	var res Result
	res.Status, res.StartErr = Exec(ctx, Command{Args: o.Args, Dir: wd, Env: commandEnv(repo, run.Meta.ID)})
	if err := repo.Lock(o.LockWait, "run (finishing)"); err != nil {
		return res, err
	}
	if err := repo.FinishTreeRun(run, &res.Status); err != nil {
		return res, err
	}
	res.Skipped = run.Skipped
	res.ID, res.Mode, res.Targets = run.Meta.ID, mode.Name, run.Meta.Targets
	if run.Dropped {
		res.State = "empty"
		return res, nil
	}
	if o.Count {
		if res.Changes, err = repo.Diff(run.Meta); err != nil {
			return res, err
		}
	}
	if o.Then == ThenDiscard {
		if _, _, err := repo.Undo(run.Meta.ID, false); err != nil {
			return res, fmt.Errorf("run --then discard: %w", err)
		}
		res.State = "discarded"
		return res, nil
	}
	res.Recorded, res.State, res.Snapshot = run.Meta, "committed", run.Meta.ID
	return res, nil
}

// lockTree takes the tree lock for a run on the tree, waiting (with the
// store unlocked, so that the run holding it can finish) while another
// such run works: each would otherwise record the other's changes.
func lockTree(ctx context.Context, repo *snapshot.Repo, mode *isolation.Mode, o Options) (*snapshot.TreeLock, error) {
	tl, err := repo.TryLockTree()
	if !errors.Is(err, snapshot.ErrTreeBusy) {
		return tl, err
	}
	if o.Notify != nil {
		who := "another run"
		if m := repo.TreeRunning(); m != nil {
			who = fmt.Sprintf("run %s ($ %s)", m.ID, strings.Join(m.Command, " "))
		}
		o.Notify(fmt.Sprintf("waiting for %s to finish: runs on the tree itself (%s mode) take turns, or each would record the other's changes", who, mode.Name))
	}
	repo.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("run: waiting for the tree: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if tl, err = repo.TryLockTree(); !errors.Is(err, snapshot.ErrTreeBusy) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := repo.Lock(o.LockWait, "run"); err != nil {
		tl.Unlock()
		return nil, err
	}
	return tl, nil
}

// runInView runs the command in p's view (of mode) and leaves p pending,
// with the store unlocked while the command runs.
func runInView(ctx context.Context, repo *snapshot.Repo, mode *isolation.Mode, p *snapshot.ViewRun, o Options) (Result, error) {
	spec := overlay.Spec{Root: repo.Root, Upper: repo.UpperDir(p.ID), Work: repo.WorkDir(p.ID), UserNS: os.Geteuid() != 0,
		Grace: o.Grace}
	if !repo.InTree() {
		spec.Store = repo.Dir
	}
	wd, err := os.Getwd()
	if err != nil {
		return Result{}, err
	}
	// The helper and the init inherit the run's lock: if snapback dies,
	// the run stays running until the last of its processes is gone.
	if spec.Lock, err = overlay.Pass(p.LockFile()); err != nil {
		return Result{}, err
	}
	spec.Dir = wd
	if mode.View.ZFS {
		if spec.Bind, err = repo.MakeZFSView(p); err != nil {
			return Result{}, err
		}
		spec.Cover = zfs.MountDir
	}
	repo.Unlock() // the command may run for hours: do not hold others off
	v := newView(mode, spec)
	var res Result
	res.Status, res.StartErr = Exec(ctx, Command{Args: o.Args, Dir: wd, Env: commandEnv(repo, p.ID), Prepare: v.Prepare, Signal: v.Signal, Outside: true})
	if err := v.Finish(); err != nil { // the upper layer is complete only once the server is gone
		return Result{}, err
	}
	if err := repo.Lock(o.LockWait, "run (finishing)"); err != nil {
		return Result{}, err
	}
	// The zfs view's changes become its layer (every process of the run
	// is gone: the init exited last).
	if err := repo.SettleZFSView(p); err != nil {
		return Result{}, err
	}
	if res.StartErr != nil {
		var re *Error
		if !errors.As(res.StartErr, &re) || re.Status == StatusFailed {
			return Result{}, res.StartErr // the view failed, not the command
		}
	}
	return res, repo.EndCommand(p, res.Status)
}
