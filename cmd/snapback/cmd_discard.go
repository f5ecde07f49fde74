package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newDiscardCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "discard [ID]",
		Short: "Throw away a pending run's changes (the newest, or ID)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			repo, p, err := g.openPending("discard", args)
			if err != nil {
				return err
			}
			defer repo.Close()
			if err := repo.DiscardPending(p); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"discarded": p.ID})
			}
			fmt.Fprintf(g.stdout, "discarded run %s\n", p.ID)
			return nil
		},
	}
}
