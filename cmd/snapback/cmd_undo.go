package main

import (
	"fmt"

	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

type undoOptions struct {
	force   bool
	session string
}

func newUndoCmd(g *globals) *cobra.Command {
	var o undoOptions
	c := &cobra.Command{
		Use:   "undo [ID] [--session S]",
		Short: "Revert the newest snapshot not yet undone (or ID, or every checkpoint of a session); redo puts it back",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ref := ""
			if len(args) == 1 {
				ref = args[0]
			}
			if o.session != "" && ref != "" {
				return usageErr("undo: an ID and --session %s: give one", o.session)
			}
			if o.session != "" {
				return runUndoSession(g, o)
			}
			return runUndo(g, ref, o)
		},
	}
	c.Flags().BoolVar(&o.force, "force", false, "overwrite paths changed since (they are saved first)")
	c.Flags().StringVar(&o.session, "session", "", "revert every checkpoint of session S not yet undone, as one step")
	return c
}

func runUndo(g *globals, ref string, o undoOptions) error {
	repo, _, err := g.open(false, "undo")
	if err != nil {
		return err
	}
	defer repo.Close()
	s, saved, err := repo.Undo(ref, o.force)
	if err != nil {
		return err
	}
	if !g.json {
		defer noteUnreverted(g, "undo", s.WroteThrough, s.Excluded) // after the line saying what it undid
	}
	return reportRevert(g, repo, "undid", s, saved)
}

func reportRevert(g *globals, repo *snapshot.Repo, verb string, s, saved *snapshot.Meta) error {
	unc := g.noteUncovered(repo.Root, savedBy(s))
	if g.json {
		return g.printJSON(withUncovered(map[string]any{"snapshot": snapJSON(s, verb == "undid"), "saved": snapJSON(saved, false)}, unc))
	}
	what := s.Message
	if what == "" && len(s.Command) > 0 {
		what = "$ " + describeCommand(s.Command) // as list shows it, ready to paste
	}
	if what != "" {
		what = " " + oneLine(what)
	}
	g.say("%s %s %s%s (previous state saved as %s)\n", verb, s.Kind, s.ID, what, saved.ID)
	if g.summary() {
		// saved holds what the verb replaced, and After what it put in
		// place: their difference is what the verb changed (no scan of
		// the tree, which for a tree snapshot would read every path).
		changes, err := repo.DiffRecorded(saved)
		if err != nil {
			return err
		}
		back := "snapback undo reverts it"
		if verb == "undid" {
			back = "snapback redo puts it back"
		}
		g.summarize(fmt.Sprintf("%s %s %s: %s changed; %s", verb, s.Kind, s.ID, nPaths(len(changes)), back))
	}
	return nil
}

// runUndoSession reverts every checkpoint of a session as one step.
func runUndoSession(g *globals, o undoOptions) error {
	repo, _, err := g.open(false, "undo")
	if err != nil {
		return err
	}
	defer repo.Close()
	steps, saved, err := repo.UndoSession(o.session, o.force)
	if err != nil {
		return err
	}
	if g.json {
		out := struct {
			Session   string         `json:"session"`
			Snapshot  snapshotJSON   `json:"snapshot"`
			Snapshots []snapshotJSON `json:"snapshots"`
			Saved     snapshotJSON   `json:"saved"`
			Uncovered uncoveredJSON  `json:"uncovered,omitempty"`
		}{Session: o.session, Snapshot: snapJSON(steps[len(steps)-1], true), Saved: snapJSON(saved, false), Uncovered: g.noteUncovered(repo.Root, savedBy(steps[0]))}
		for i := len(steps) - 1; i >= 0; i-- {
			out.Snapshots = append(out.Snapshots, snapJSON(steps[i], true))
		}
		return g.printJSON(out)
	}
	g.noteUncovered(repo.Root, savedBy(steps[0]))
	fmt.Fprintf(g.stdout, "undid session %s: %d checkpoint(s), %s to %s (previous state saved as %s)\n",
		oneLine(o.session), len(steps), steps[0].ID, steps[len(steps)-1].ID, saved.ID)
	if g.summary() {
		changes, err := repo.DiffRecorded(saved)
		if err != nil {
			return err
		}
		g.summarize(fmt.Sprintf("undid session %s (%d checkpoints): %s changed; snapback redo puts it back", o.session, len(steps), nPaths(len(changes))))
	}
	return nil
}
