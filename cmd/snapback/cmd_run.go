package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/runner/isolation"
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
			return runRun(c, g, o, args)
		},
	}
	c.Flags().StringVar(&o.mode, "mode", "", "isolation mode: "+strings.Join(isolation.Names(), ", ")+" (default: snapshot.mode from snapback.toml, else auto; snapback doctor says which work here)")
	_ = c.RegisterFlagCompletionFunc("mode", completeMode) // the flag exists: no error
	c.Flags().StringVar(&o.then, "then", "commit", "after an overlay run: commit, review (keep pending) or discard")
	c.Flags().StringVar(&o.continue_, "continue", "", "run on top of the pending run ID's changes")
	return c
}

// completeMode offers every mode name, with what it does.
func completeMode(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	out := []string{isolation.Auto + "\tthe first mode that works here (snapback doctor)"}
	for _, m := range isolation.All {
		out = append(out, m.Name+"\t"+m.Help)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func runRun(c *cobra.Command, g *globals, o runOptions, argv []string) error {
	repo, cfg, err := g.open(true, "run")
	if err != nil {
		return err
	}
	defer repo.Close()
	mode := o.mode
	if mode == "" {
		mode = cfg.Snapshot.Mode
	}
	res, err := runner.Run(c.Context(), repo, runner.Options{Args: argv, Mode: mode, Then: runner.Then(o.then),
		Continue: o.continue_, LockWait: lockWait(), Notify: func(s string) { fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(s)) }})
	if err == nil {
		retain(g, repo, cfg)
	}
	return runOutcome(g, res, err)
}

// runOutcome says what became of a run, and ends snapback with the
// command's status.
func runOutcome(g *globals, res runner.Result, err error) error {
	if res.StartErr != nil {
		fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(res.StartErr.Error()))
	}
	var bad *runner.BadInputError
	if errors.As(err, &bad) {
		return &exitError{code: 2, kind: "usage", err: err}
	}
	if err != nil {
		return err
	}
	if res.Pending != nil {
		fmt.Fprintf(g.stderr, "snapback: run %s is pending: snapback diff, then snapback commit or discard\n", res.Pending.ID)
	}
	if res.Status != 0 {
		return &statusError{status: res.Status}
	}
	return nil
}
