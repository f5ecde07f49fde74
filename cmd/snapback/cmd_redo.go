package main

import (
	"fmt"
	"github.com/snapback/snapback/snapshot"

	"github.com/spf13/cobra"
)

func newRedoCmd(g *globals) *cobra.Command {
	var o undoOptions
	c := &cobra.Command{
		Use:   "redo",
		Short: "Reapply the most recent undo",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runRedo(g, o) },
	}
	c.Flags().BoolVar(&o.force, "force", false, "overwrite paths changed since (they are saved first)")
	return c
}

func runRedo(g *globals, o undoOptions) error {
	repo, err := g.open(snapshot.Options{Verb: "redo", Access: snapshot.ForChange})
	if err != nil {
		return err
	}
	defer repo.Close()
	p, saved, err := repo.Redo(o.force)
	if err != nil {
		return err
	}
	s, err := repo.ReadMeta(p.Undoes)
	if err != nil {
		s = p // the undone snapshot was collected; name the record instead
	}
	if n := len(p.UndoesMore); n > 0 && !g.json {
		// The redo of an undo --session: it brings back the whole session.
		named := *s
		named.Message = fmt.Sprintf("%s (and %d earlier checkpoint(s) of session %s)", s.Message, n, s.Session)
		s = &named
	}
	return reportRevert(g, repo, "redid", s, saved)
}
