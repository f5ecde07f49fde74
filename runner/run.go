package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner/isolation"
	"github.com/snapback/snapback/snapshot"
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
	Then Then
	// Continue is a pending run's id (or a unique prefix): the command
	// runs in its view, on top of its changes, and Mode is the run's.
	Continue string
	// LockWait is how long to wait for the store's lock once the command
	// has ended (others may have taken it meanwhile).
	LockWait time.Duration
	// Notify, when set, is told (one line) why the run waits.
	Notify func(string)
}

// Result is what a run did.
type Result struct {
	Status int // the command's exit status (126 or 127 if it could not start)
	// StartErr says why the command could not start, when it could not;
	// the run is recorded all the same (it changed nothing).
	StartErr error
	// Pending is the run kept for review (ThenReview), else nil.
	Pending *snapshot.ViewRun
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
		if p, err = repo.FindPending(o.Continue); err != nil {
			return Result{}, err
		}
		if mode = isolation.Find(p.Mode); mode == nil || !mode.View {
			return Result{}, fmt.Errorf("run %s: mode %q is no view to continue in", p.ID, p.Mode)
		}
		if err := repo.Resume(p); err != nil {
			return Result{}, err
		}
	} else {
		var err error
		if mode, err = isolation.Pick(o.Mode, repo.Root); err != nil {
			return Result{}, badInput("run: --mode %s: %w", o.Mode, err)
		}
		if err := repo.CheckTargets(); err != nil {
			return Result{}, err // before anything runs or changes
		}
	}
	if !mode.View {
		// These modes run on the tree itself: nothing can wait for
		// review, and discarding means undoing at once.
		if o.Then == ThenReview {
			return Result{}, badInput("run: --then review needs an overlay mode; the %s mode changes the tree itself (snapback doctor says which modes work here)", mode.Name)
		}
		return runOnTree(ctx, repo, mode, o)
	}
	if p == nil {
		var err error
		if p, err = repo.StartPending(o.Args, mode.Name); err != nil {
			return Result{}, err
		}
	}
	res, err := runInView(ctx, repo, p, o)
	if err != nil {
		return res, err
	}
	switch o.Then {
	case ThenCommit:
		_, err := repo.CommitPending(p, nil, false)
		var ce *snapshot.ConflictError
		if errors.As(err, &ce) {
			return res, fmt.Errorf("%w; the run stays pending as %s (snapback diff, commit --force, discard)", err, p.ID)
		}
		if err != nil {
			return res, err
		}
	case ThenReview:
		res.Pending = p
	case ThenDiscard:
		if err := repo.DiscardPending(p); err != nil {
			return res, err
		}
	}
	return res, nil
}

// runOnTree snapshots the tree, runs the command on it and records what
// it changed (undone at once with ThenDiscard).
func runOnTree(ctx context.Context, repo *snapshot.Repo, mode *isolation.Mode, o Options) (Result, error) {
	tl, err := lockTree(ctx, repo, mode, o)
	if err != nil {
		return Result{}, err
	}
	defer tl.Unlock()
	run, err := repo.BeginRun(o.Args, mode.Name)
	if err != nil {
		return Result{}, err
	}
	repo.Unlock()       // the command may run for hours: do not hold others off
	wd, _ := os.Getwd() // the command's cwd: ours, as without snapback
	var res Result
	res.Status, res.StartErr = Exec(ctx, Command{Args: o.Args, Dir: wd})
	if err := repo.Lock(o.LockWait, "run (finishing)"); err != nil {
		return res, err
	}
	if err := repo.FinishRun(run, &res.Status); err != nil {
		return res, err
	}
	if o.Then == ThenDiscard && !run.Dropped {
		if _, _, err := repo.Undo(run.Meta.ID, false); err != nil {
			return res, fmt.Errorf("run --then discard: %w", err)
		}
	}
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

// view is an overlay mode's session: it prepares the command's process to
// start in the view and takes it down after.
type view interface {
	Prepare(*exec.Cmd) error
	Signal(os.Signal) error
	Finish() error
}

// runInView runs the command in p's view and leaves p pending, with the
// store unlocked while the command runs.
func runInView(ctx context.Context, repo *snapshot.Repo, p *snapshot.ViewRun, o Options) (Result, error) {
	spec := overlay.Spec{Root: repo.Root, Upper: repo.UpperDir(p.ID), Work: repo.WorkDir(p.ID), UserNS: os.Geteuid() != 0}
	wd, err := os.Getwd()
	if err != nil {
		return Result{}, err
	}
	spec.Dir = wd
	repo.Unlock() // the command may run for hours: do not hold others off
	var v view = overlay.NewSession(spec)
	if p.Mode == isolation.Fuse {
		v = fuse.NewSession(spec)
	}
	var res Result
	res.Status, res.StartErr = Exec(ctx, Command{Args: o.Args, Dir: wd, Prepare: v.Prepare, Signal: v.Signal, Outside: true})
	if err := v.Finish(); err != nil { // the upper layer is complete only once the server is gone
		return Result{}, err
	}
	if err := repo.Lock(o.LockWait, "run (finishing)"); err != nil {
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
