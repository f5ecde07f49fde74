package main

import (
	"fmt"
	"github.com/snapback/snapback/snapshot"

	"github.com/spf13/cobra"
)

func newRecoverCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "recover",
		Short: "Finish an interrupted undo, redo or restore, clear leftovers, move damaged records aside",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			repo, err := g.open(snapshot.Options{Verb: "recover", Access: snapshot.ForChange, SkipDamaged: true}) // open recovers
			if err != nil {
				return err
			}
			defer repo.Close()
			moved, err := repo.MoveDamagedAside()
			for _, m := range moved {
				fmt.Fprintln(g.stdout, oneLine(m))
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, "store is consistent")
			return nil
		},
	}
}
