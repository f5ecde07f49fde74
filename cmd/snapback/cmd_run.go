package main

import (
	"fmt"
	"os"

	"github.com/snapback/snapback/runner"
	"github.com/spf13/cobra"
)

type runOptions struct {
	mode string
}

func newRunCmd(g *globals) *cobra.Command {
	var o runOptions
	c := &cobra.Command{
		Use:   "run [--mode MODE] -- CMD [ARGS...]",
		Short: "Run a command so that `undo` can revert what it changes",
		Long: `Run a command so that ` + "`undo`" + ` can revert what it changes.

The command keeps snapback's stdin, stdout, stderr, terminal, environment
and working directory; signals sent to snapback reach it; snapback exits
with its status (128+N if signal N killed it, 125 if snapback failed).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 {
				return usageErr("run: put the command after --, as in: snapback run -- make test")
			}
			return runRun(g, o, args)
		},
	}
	c.Flags().StringVar(&o.mode, "mode", "", "isolation mode: auto or copy (default: snapshot.mode from snapback.toml, else auto)")
	return c
}

// pickMode resolves the isolation mode. Only the copy mode is built so far:
// auto picks it; naming another mode is an error rather than a silent
// fallback, so a user who asked for isolation knows they did not get it.
func pickMode(flag, configured string) (string, error) {
	m := flag
	if m == "" {
		m = configured
	}
	switch m {
	case "", "auto", "copy":
		return "copy", nil
	}
	return "", usageErr("run: --mode %s: not available in this build (available: auto, copy)", m)
}

func runRun(g *globals, o runOptions, argv []string) error {
	// Any failure of snapback's own exits 125, so that a script can tell it
	// from the command's statuses (as env(1) and timeout(1) do).
	g.runStarted = true
	repo, cfg, err := g.open(true, "run")
	if err != nil {
		return err
	}
	mode, err := pickMode(o.mode, cfg.Snapshot.Mode)
	if err != nil {
		repo.Close()
		return err
	}
	if len(cfg.Targets) > 0 {
		repo.Close()
		return &exitError{code: 2, kind: "config", err: fmt.Errorf("%s: [[target]] entries are not supported by this build yet", cfg.Targets[0].Backend)}
	}
	run, err := repo.BeginRun(argv, mode)
	repo.Unlock() // the command may run for hours: do not hold others off
	if err != nil {
		repo.Close()
		return err
	}
	wd, _ := os.Getwd() // the command's cwd: ours, as without snapback
	status, runErr := runner.Run(runner.Command{Args: argv, Dir: wd})
	if runErr != nil {
		fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(runErr.Error()))
	}
	if err := repo.Lock(lockWait(), "run (finishing)"); err != nil {
		repo.Close()
		return err
	}
	defer repo.Close()
	if err := repo.FinishRun(run, &status); err != nil {
		return err
	}
	if status != 0 {
		return &statusError{status: status}
	}
	return nil
}
