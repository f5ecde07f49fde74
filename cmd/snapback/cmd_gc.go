package main

import (
	"fmt"
	"github.com/snapback/snapback/snapshot"

	"github.com/spf13/cobra"
)

func newGCCmd(g *globals) *cobra.Command {
	var keep int
	c := &cobra.Command{
		Use:   "gc --keep N",
		Short: "Delete all but the N newest snapshots (and what undo/redo need) and unreferenced contents",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !c.Flags().Changed("keep") || keep < 0 {
				return usageErr("gc: --keep N (N >= 0) is required")
			}
			repo, err := g.open(snapshot.Options{Verb: "gc", Access: snapshot.ForChange})
			if err != nil {
				return err
			}
			defer repo.Close()
			st, err := repo.GC(keep, nil)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(gcJSON{SnapshotsRemoved: st.Snapshots, ObjectsRemoved: st.Objects, BytesFreed: st.Bytes})
			}
			fmt.Fprintf(g.stdout, "removed %d snapshots and %d objects (%s freed)\n", st.Snapshots, st.Objects, humanBytes(st.Bytes))
			return nil
		},
	}
	c.Flags().IntVar(&keep, "keep", 0, "how many of the newest snapshots to keep")
	return c
}
