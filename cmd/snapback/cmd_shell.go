package main

import (
	"github.com/snapback/snapback/snapshot"
	"os"

	"github.com/snapback/snapback/runner"

	"github.com/spf13/cobra"
)

func newShellCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "shell [ID]",
		Short: "An interactive shell inside a pending run's view (the newest, or ID)",
		Long: `An interactive shell ($SHELL, else /bin/sh) inside a pending run's view:
look around, test, fix things up. What it changes joins the run's pending
changes; nothing is committed when it exits.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			g.runStarted = true
			repo, p, err := g.openPending(snapshot.Options{Verb: "shell", Access: snapshot.ForChange}, args)
			if err != nil {
				return err
			}
			defer repo.Close()
			sh := os.Getenv("SHELL")
			if sh == "" {
				sh = "/bin/sh"
			}
			res, err := runner.Run(c.Context(), repo, runner.Options{Args: []string{sh}, Continue: p.ID,
				Then: runner.ThenReview, Grace: runner.DefaultGrace, LockWait: lockWait()})
			res.Pending = nil // it was pending before: nothing to say
			return runOutcome(g, repo, res, err)
		},
	}
}
