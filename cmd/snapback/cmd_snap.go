package main

import (
	"fmt"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

type snapOptions struct{ message string }

func newSnapCmd(g *globals) *cobra.Command {
	var o snapOptions
	c := &cobra.Command{
		Use:   "snap [-m MSG]",
		Short: "Record a snapshot of the whole tree",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runSnap(g, o) },
	}
	c.Flags().StringVarP(&o.message, "message", "m", "", "a note on why")
	return c
}

func runSnap(g *globals, o snapOptions) error {
	repo, err := g.open(snapshot.Options{Verb: "snap", Access: snapshot.ForChange, Create: true})
	if err != nil {
		return err
	}
	defer repo.Close()
	m, err := repo.Snap(record.KindSnap, o.message)
	if err != nil {
		return err
	}
	st := repo.LastScan
	defer retain(g, repo)
	unc := g.noteUncovered(repo.Root, savedBy(m))
	if g.json {
		return g.printJSON(snapResultJSON{Snapshot: snapJSON(m, false), FilesRead: st.FilesRead, BytesRead: st.BytesRead, Uncovered: unc})
	}
	// The id is the line's last word: scripts (agentbox among them) take
	// the last word of snap's output as the snapshot's id.
	fmt.Fprintf(g.stdout, "snapshot of %d files, %s (read %d files, %s): %s\n", m.Files, humanBytes(m.Bytes), st.FilesRead, humanBytes(st.BytesRead), m.ID)
	return nil
}
