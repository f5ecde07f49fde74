package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/runner/isolation"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

type runOptions struct {
	mode      string
	then      string
	continue_ string
}

func newRunCmd(g *globals) *cobra.Command {
	var o runOptions
	c := &cobra.Command{
		Use:   "run [--mode MODE] [--then commit|review|discard] -- CMD [ARGS...]",
		Short: "Run a command so that `undo` can revert what it changes",
		Long: `Run a command so that ` + "`undo`" + ` can revert what it changes.

In the overlay modes the command works in a copy-on-write view of the
project; its changes are then committed into the tree (--then commit, the
default), kept pending for review (--then review: see status, diff, commit,
discard), or thrown away (--then discard). In the copy mode it works on
the tree itself, after a snapshot.

The command keeps snapback's stdin, stdout, stderr, terminal, environment
and working directory; signals sent to snapback reach it; snapback exits
with its status (128+N if signal N killed it, 125 if snapback failed).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			g.runStarted = true
			if c.ArgsLenAtDash() != 0 {
				return usageErr("run: put the command after --, as in: snapback run -- make test")
			}
			switch o.then {
			case "commit", "review", "discard":
			default:
				return usageErr("run: --then %s: must be commit, review or discard", o.then)
			}
			return runRun(g, o, args)
		},
	}
	c.Flags().StringVar(&o.mode, "mode", "", "isolation mode: "+strings.Join(isolation.Names(), ", ")+" (default: snapshot.mode from snapback.toml, else auto; snapback doctor says which work here)")
	_ = c.RegisterFlagCompletionFunc("mode", completeMode) // the flag exists: no error
	c.Flags().StringVar(&o.then, "then", "commit", "after an overlay run: commit, review (keep pending) or discard")
	c.Flags().StringVar(&o.continue_, "continue", "", "run on top of the pending run ID's changes")
	return c
}

// pickMode resolves the isolation mode (see isolation.Pick).
func pickMode(flag, configured, root string) (string, error) {
	m := flag
	if m == "" {
		m = configured
	}
	mode, err := isolation.Pick(m, root)
	if err != nil {
		return "", usageErr("run: --mode %s: %w", m, err)
	}
	return mode.Name, nil
}

// completeMode offers every mode name, with what it does.
func completeMode(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	out := []string{isolation.Auto + "\tthe first mode that works here (snapback doctor)"}
	for _, m := range isolation.All {
		out = append(out, m.Name+"\t"+m.Help)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func runRun(g *globals, o runOptions, argv []string) error {
	repo, cfg, err := g.open(true, "run")
	if err != nil {
		return err
	}
	defer repo.Close()
	var p *snapshot.Pending
	mode := ""
	if o.continue_ != "" {
		if p, err = repo.FindPending(o.continue_); err != nil {
			return err
		}
		mode = p.Mode
		if err := repo.Resume(p); err != nil {
			return err
		}
	} else if mode, err = pickMode(o.mode, cfg.Snapshot.Mode, repo.Root); err != nil {
		return err
	} else if err := repo.CheckTargets(); err != nil {
		return err // before anything runs or changes
	}
	if m := isolation.Find(mode); m != nil && !m.View {
		// These modes run on the tree itself: nothing can wait for
		// review, and discarding means undoing at once.
		if o.then == "review" {
			return usageErr("run: --then review needs an overlay mode; the %s mode changes the tree itself (snapback doctor says which modes work here)", mode)
		}
		return runCopy(g, repo, argv, mode, o.then == "discard")
	}
	if p == nil {
		if p, err = repo.StartPending(argv, mode); err != nil {
			return err
		}
	}
	status, err := runInOverlay(g, repo, p, argv)
	if err != nil {
		return err
	}
	switch o.then {
	case "commit":
		rec, err := repo.CommitPending(p, nil, false)
		var ce *snapshot.ConflictError
		if errors.As(err, &ce) {
			return fmt.Errorf("%w; the run stays pending as %s (snapback diff, commit --force, discard)", err, p.ID)
		}
		if err != nil {
			return err
		}
		_ = rec // quiet on success, as the command would be without snapback
	case "review":
		fmt.Fprintf(g.stderr, "snapback: run %s is pending: snapback diff, then snapback commit or discard\n", p.ID)
	case "discard":
		if err := repo.DiscardPending(p); err != nil {
			return err
		}
	}
	if status != 0 {
		return &statusError{status: status}
	}
	return nil
}

// runInOverlay runs argv in p's view and leaves p pending, with the
// store unlocked while the command runs.
func runInOverlay(g *globals, repo *snapshot.Repo, p *snapshot.Pending, argv []string) (int, error) {
	spec := overlay.Spec{Root: repo.Root, Upper: repo.UpperDir(p.ID), Work: repo.WorkDir(p.ID), UserNS: os.Geteuid() != 0}
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	spec.Dir = wd
	repo.Unlock() // the command may run for hours: do not hold others off
	var s interface {
		Prepare(*exec.Cmd) error
		Signal(os.Signal) error
		Finish() error
	} = overlay.NewSession(spec)
	if p.Mode == isolation.Fuse {
		s = fuse.NewSession(spec)
	}
	status, runErr := runner.Run(runner.Command{Args: argv, Dir: wd, Prepare: s.Prepare, Signal: s.Signal, Outside: true})
	if err := s.Finish(); err != nil { // the upper layer is complete only once the server is gone
		return 0, err
	}
	if err := repo.Lock(lockWait(), "run (finishing)"); err != nil {
		return 0, err
	}
	if runErr != nil {
		var re *runner.Error
		if errors.As(runErr, &re) && re.Status != runner.StatusFailed {
			fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(runErr.Error()))
		} else {
			return 0, runErr
		}
	}
	p.ExitStatus, p.State = &status, "pending"
	repo.Release(p)
	if err := repo.SavePending(p); err != nil {
		return 0, err
	}
	if err := repo.WriteThrough(p); err != nil {
		return 0, err
	}
	return status, nil
}

// runCopy: snapshot, run on the real tree, record what changed.
func runCopy(g *globals, repo *snapshot.Repo, argv []string, mode string, discard bool) error {
	run, err := repo.BeginRun(argv, mode)
	if err != nil {
		return err
	}
	repo.Unlock()       // the command may run for hours: do not hold others off
	wd, _ := os.Getwd() // the command's cwd: ours, as without snapback
	status, runErr := runner.Run(runner.Command{Args: argv, Dir: wd})
	if runErr != nil {
		fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(runErr.Error()))
	}
	if err := repo.Lock(lockWait(), "run (finishing)"); err != nil {
		return err
	}
	if err := repo.FinishRun(run, &status); err != nil {
		return err
	}
	if discard {
		if _, _, err := repo.Undo(run.Meta.ID, false); err != nil {
			return fmt.Errorf("run --then discard: %w", err)
		}
	}
	if status != 0 {
		return &statusError{status: status}
	}
	return nil
}
