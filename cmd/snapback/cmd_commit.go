package main

import (
	"fmt"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

type commitOptions struct{ force, patch bool }

func newCommitCmd(g *globals) *cobra.Command {
	var o commitOptions
	c := &cobra.Command{
		Use:   "commit [ID] [PATH...]",
		Short: "Move a pending run's changes into the tree (only PATHs, when given)",
		Long: `Move a pending run's changes (the newest, or run ID) into the tree, first
saving what they replace so that undo reverts them. With PATHs, only the
changes at or below those paths are committed; the rest stays pending.
A path changed in the tree since the run started is a conflict: nothing
is changed, the paths are listed, exit 1; --force overrides (what it
overwrites is still saved).

With -p, review the changes (at or below PATHs, when given) hunk by hunk,
as git add -p: each hunk of a text file (as diff -p prints it) is asked
"Commit this hunk [y,n,q,a,d,s,?]?" (y yes, n no, q quit: none of the
rest, a this and the rest of the file, d none of the rest of the file,
s split it into smaller hunks, ? help); a binary file, a new or deleted
file, a symlink, a mode change or a directory's deletion is one
question. A directory comes with what is committed in it. The chosen
hunks are committed (the file written is the tree's with them applied,
checked against its hash) and the rest stays pending. Answers are lines
read from stdin, a terminal or not; stdin ending first is an error
(exit 2) and nothing is committed. -p takes no --json.`,
		RunE: func(_ *cobra.Command, args []string) error {
			if o.patch {
				return runPick(g, "commit", args, o.force)
			}
			return runCommit(g, o, args)
		},
	}
	c.Flags().BoolVar(&o.force, "force", false, "commit over paths changed since the run started")
	c.Flags().BoolVarP(&o.patch, "patch", "p", false, "pick the hunks to commit, one question each")
	return c
}

func runCommit(g *globals, o commitOptions, args []string) error {
	repo, err := g.open(snapshot.Options{Verb: "commit", Access: snapshot.ForChange})
	if err != nil {
		return err
	}
	defer repo.Close()
	p, paths, err := pendingAndPaths(repo.Reader, args)
	if err != nil {
		return err
	}
	rel, err := relPaths(repo.Root, paths)
	if err != nil {
		return err
	}
	for _, r := range rel {
		if r == "" {
			rel = nil // the root itself: everything
			break
		}
	}
	// Read before the commit drops the layer: what it will not carry.
	all, err := repo.SkippedIn(p)
	if err != nil {
		return err
	}
	var skipped []record.Skipped
	for _, sk := range all {
		if underAny(sk.Path, rel) {
			skipped = append(skipped, sk)
		}
	}
	rec, err := repo.CommitViewRun(p, rel, o.force)
	if err != nil {
		return err
	}
	if rec == nil && len(rel) > 0 {
		pending, err := repo.IsPending(p.ID)
		if err != nil {
			return err
		}
		if pending {
			if g.json {
				return g.printJSON(commitJSON{Run: p.ID, Partial: true, Skipped: nonNil(skipped)})
			}
			fmt.Fprintf(g.stdout, "nothing to commit: run %s changed nothing there that the tree does not hold already; the run stays pending\n", p.ID)
			return nil
		}
	}
	if rec == nil {
		if g.json {
			return g.printJSON(commitJSON{Run: p.ID, Skipped: nonNil(skipped)})
		}
		fmt.Fprintf(g.stdout, "run %s changed nothing; dropped it\n", p.ID)
		g.noteSkipped(skipped)
		return nil
	}
	if g.json {
		sj := snapJSON(rec, false)
		return g.printJSON(commitJSON{Run: p.ID, Snapshot: &sj, Partial: len(rel) > 0, Skipped: nonNil(skipped)})
	}
	g.say("committed run %s as %s (undo reverts it)\n", p.ID, rec.ID)
	g.noteSkipped(skipped) // before the summary, the last line
	if g.summary() {
		changes, err := repo.Diff(rec)
		if err != nil {
			return err
		}
		g.summarize(fmt.Sprintf("committed %s of run %s as %s; snapback undo reverts it", nPaths(len(changes)), p.ID, rec.ID))
	}
	return nil
}
