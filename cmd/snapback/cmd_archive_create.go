package main

import (
	"errors"
	"fmt"

	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

func newArchiveCreateCmd(g *globals, openCat catalogOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "create [SNAPSHOT]",
		Short: "Write an archive of a snapshot (default: the newest) into the catalog",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cat, err := openCat(true)
			if err != nil {
				return err
			}
			repo, err := g.open(snapshot.Options{Verb: "archive create", Access: snapshot.ForChange, SkipDamaged: true})
			if err != nil {
				return err
			}
			defer repo.Close()
			var m *record.Meta
			if len(args) == 1 {
				if m, err = repo.Resolve(args[0]); err != nil {
					return err
				}
			} else {
				all, err := repo.List()
				if err != nil {
					return err
				}
				for i := len(all) - 1; i >= 0 && m == nil; i-- {
					if all[i].Kind.Undoable() && all[i].State != "running" {
						m = all[i]
					}
				}
				if m == nil {
					return &exitError{code: 2, kind: catalog.CodeNotFound, err: errors.New("archive create: no snapshot yet (snapback snap makes one)")}
				}
			}
			plan, err := catalog.PlanArchive(repo, m)
			if err != nil {
				return err
			}
			pid, err := catalog.ProjectID(repo.Dir, true)
			if err != nil {
				return err
			}
			// Ctrl-C (c's context: interrupt.go) stops the write, and the
			// partial file goes with it.
			ctx := c.Context()
			p, done := g.progress("archive "+m.ID, plan.Bytes)
			s, existed, err := cat.Create(ctx, repo, plan, catalog.Project{Root: repo.Root, ID: pid}, p)
			done()
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(archiveCreateJSON{Archive: mkArchiveJSON(s, catalog.FileName(s.ID)), Existed: existed})
			}
			verb := "wrote"
			if existed {
				verb = "already had"
			}
			fmt.Fprintf(g.stdout, "%s %s (snapshot %s, %d files, %s)\n", verb, cat.Path(s.ID), s.Snapshot, s.Files, humanBytes(s.Bytes))
			return nil
		},
	}
}
