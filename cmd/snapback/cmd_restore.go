package main

import (
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

func newRestoreCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "restore ID",
		Short: "Put the tree back as it was at snapshot ID (the current state is saved first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			repo, err := g.open(snapshot.Options{Verb: "restore", Access: snapshot.ForChange})
			if err != nil {
				return err
			}
			defer repo.Close()
			s, saved, err := repo.Restore(args[0])
			if err != nil {
				return err
			}
			return reportRevert(g, repo, "restored", s, saved)
		},
	}
}
