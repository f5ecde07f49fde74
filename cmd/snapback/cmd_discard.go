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
			repo, _, err := g.open(false, "discard")
			if err != nil {
				return err
			}
			defer repo.Close()
			ref := ""
			if len(args) == 1 {
				ref = args[0]
			}
			p, err := repo.FindPending(ref)
			if err != nil {
				return err
			}
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
