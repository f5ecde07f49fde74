package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newRecoverCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "recover",
		Short: "Finish an interrupted undo, redo or restore and clear leftovers",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			repo, _, err := g.open(false, "recover") // open recovers
			if err != nil {
				return err
			}
			repo.Close()
			fmt.Fprintln(g.stdout, "store is consistent")
			return nil
		},
	}
}
