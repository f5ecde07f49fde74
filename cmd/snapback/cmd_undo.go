package main

import (
	"fmt"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

type undoOptions struct {
	force   bool
	session string
}

func newUndoCmd(g *globals) *cobra.Command {
	var o undoOptions
	c := &cobra.Command{
		Use:   "undo [ID [-- PATH...]] [--session S]",
		Short: "Revert the newest snapshot not yet undone (or ID, or every checkpoint of a session); redo puts it back",
		Long: `Revert the newest snapshot not yet undone (or ID, or every checkpoint of
a session); redo puts it back.

undo ID -- PATH... reverts only the paths of step ID (a run or a
checkpoint) at or below each PATH (relative to the current directory):
the step's other paths and its targets stay, and the step is not marked
undone (a later undo ID takes the rest); redo reapplies that part.`,
		Args: func(c *cobra.Command, args []string) error {
			// undo -- ID (as the MCP server passes an id) is a plain undo.
			if dash := c.ArgsLenAtDash(); dash > 0 {
				if dash != 1 || len(args) == dash {
					return usageErr("undo: ID -- PATH...: one ID before --, one or more paths after it")
				}
				return nil
			}
			return cobra.MaximumNArgs(1)(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			ref := ""
			if len(args) >= 1 {
				ref = args[0]
			}
			if c.ArgsLenAtDash() == 1 {
				if o.session != "" {
					return usageErr("undo: PATHs and --session %s: give one", o.session)
				}
				return runUndoPaths(g, ref, args[1:], o)
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
	repo, err := g.open(snapshot.Options{Verb: "undo", Access: snapshot.ForChange})
	if err != nil {
		return err
	}
	defer repo.Close()
	return runUndoOpen(g, repo, ref, o)
}

func runUndoOpen(g *globals, repo *snapshot.Repo, ref string, o undoOptions) error {
	s, saved, err := repo.Undo(ref, o.force)
	if err != nil {
		return err
	}
	if !g.json {
		// After the line saying what it undid: a target's paths the run
		// wrote are restored with it, the ignored ones are not.
		writes, through := repo.TargetWrites(s.Targets, s.WroteThrough)
		defer noteUnreverted(g, "undo", through, s.Excluded)
		defer noteRestored(g, "undo", s.ID, written(writes))
	}
	return reportRevert(g, repo, "undid", s, saved)
}

// runUndoPaths reverts part of a step.
func runUndoPaths(g *globals, ref string, paths []string, o undoOptions) error {
	repo, err := g.open(snapshot.Options{Verb: "undo", Access: snapshot.ForChange})
	if err != nil {
		return err
	}
	defer repo.Close()
	rel, err := relPaths(repo.Root, paths)
	if err != nil {
		return err
	}
	for _, p := range rel {
		if p == "" { // the root: all of the step
			return runUndoOpen(g, repo, ref, o)
		}
	}
	s, saved, err := repo.UndoPaths(ref, rel, o.force)
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(revertJSON{Snapshot: snapJSON(s, false), Saved: snapJSON(saved, false), Paths: rel})
	}
	changes, err := repo.DiffRecorded(saved)
	if err != nil {
		return err
	}
	g.say("undid %s of %s %s (%s; the rest of it stays; previous state saved as %s)\n", nPaths(len(changes)), s.Kind, s.ID, quoteList(rel), saved.ID)
	g.summarize(fmt.Sprintf("undid %s of %s %s; snapback redo puts them back", nPaths(len(changes)), s.Kind, s.ID))
	return nil
}

func reportRevert(g *globals, repo *snapshot.Repo, verb string, s, saved *record.Meta) error {
	unc := g.noteUncovered(repo.Root, savedBy(s))
	if g.json {
		return g.printJSON(revertJSON{Snapshot: snapJSON(s, verb == "undid"), Saved: snapJSON(saved, false), Uncovered: unc})
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
	repo, err := g.open(snapshot.Options{Verb: "undo", Access: snapshot.ForChange})
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

// written keeps the targets a run wrote paths of the tree to.
func written(writes []snapshot.TargetWrite) []snapshot.TargetWrite {
	var out []snapshot.TargetWrite
	for _, w := range writes {
		if len(w.Paths) > 0 {
			out = append(out, w)
		}
	}
	return out
}
