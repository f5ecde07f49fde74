package main

import (
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

func newDiscardCmd(g *globals) *cobra.Command {
	var patch bool
	c := &cobra.Command{
		Use:   "discard [ID] [-p [PATH...]]",
		Short: "Throw away a pending run's changes (the newest, or ID)",
		Long: `Throw away a pending run's changes (the newest, or run ID) and bring its
targets back to their states before it: nothing of it reaches the tree.

With -p, review the changes (at or below PATHs, when given) hunk by hunk,
as commit -p does, asking "Discard this hunk [y,n,q,a,d,s,?]?": the
chosen hunks are dropped from the pending run, the rest stays pending
(a directory goes with what is discarded in it). Answers are lines read
from stdin; stdin ending first is an error (exit 2) and nothing is
discarded. -p takes no --json.`,
		Args: func(_ *cobra.Command, args []string) error {
			if !patch && len(args) > 1 {
				return usageErr("discard takes one ID (PATHs only with -p), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if patch {
				return runPick(g, "discard", args, false)
			}
			repo, p, err := g.openPending(snapshot.Options{Verb: "discard", Access: snapshot.ForChange}, args)
			if err != nil {
				return err
			}
			defer repo.Close()
			excluded, err := repo.ExcludedIn(p, nil)
			if err != nil {
				return err
			}
			// Read before the discard releases the payloads.
			writes, through := repo.TargetWrites(p.Targets, p.WroteThrough)
			n := -1
			if g.summary() {
				// Counted before: the layer goes with the discard.
				target, cur, err := repo.PendingChanges(p)
				if err != nil {
					return err
				}
				n = len(record.DiffManifests(cur, target))
			}
			if err := repo.DiscardViewRun(p); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(discardJSON{Discarded: p.ID, KeptIgnored: nonNil(through), DroppedExcluded: nonNil(excluded),
					RestoredTargets: restoredJSON(writes)})
			}
			g.say("discarded run %s\n", p.ID)
			noteRestored(g, "discard", p.ID, writes)
			noteUnreverted(g, "discard", through, nil)
			noteDropped(g, excluded)
			if n >= 0 {
				g.summarize(fmt.Sprintf("discarded %s of run %s; the tree is as it was (there is nothing to undo)", nPaths(n), p.ID))
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&patch, "patch", "p", false, "pick the hunks to discard, one question each")
	return c
}

// noteUnreverted names, on stderr, the paths a run wrote that verb did not
// take back: ignored ones (written through) and excluded ones (moved by
// its commit).
func noteUnreverted(g *globals, verb string, through, excluded []string) {
	if len(through) > 0 {
		fmt.Fprintf(g.stderr, "snapback: %s kept what the run wrote to ignored paths (never rolled back): %s\n", verb, quoteList(through))
	}
	if len(excluded) > 0 {
		fmt.Fprintf(g.stderr, "snapback: %s kept what the run wrote to excluded paths (not in snapshots): %s\n", verb, quoteList(excluded))
	}
}

// noteRestored names, on stderr, the targets verb brought back through
// their backends to the state saved in id, with the paths of the tree the
// run wrote to them directly (an overlay run does not isolate a target).
func noteRestored(g *globals, verb, id string, writes []snapshot.TargetWrite) {
	if len(writes) == 0 {
		return
	}
	var names []string
	for _, w := range writes {
		n := quote(w.Name) + " (" + w.Backend
		if len(w.Paths) > 0 {
			n += "; the run wrote " + quoteList(w.Paths) + " directly"
		}
		names = append(names, n+")")
	}
	what := "target " + names[0] + " to its state"
	if len(names) > 1 {
		what = "targets " + strings.Join(names, ", ") + " to their states"
	}
	fmt.Fprintf(g.stderr, "snapback: %s restored %s saved in %s\n", verb, what, id)
}

// restoredJSON lists restored targets for --json: name, backend and
// the paths of the tree the run wrote to them.
func restoredJSON(writes []snapshot.TargetWrite) []restoredTarget {
	out := []restoredTarget{}
	for _, w := range writes {
		out = append(out, restoredTarget{Name: w.Name, Backend: w.Backend, Paths: nonNil(w.Paths)})
	}
	return out
}

// noteDropped names the excluded paths a discard threw away with the run.
func noteDropped(g *globals, excluded []string) {
	if len(excluded) > 0 {
		fmt.Fprintf(g.stderr, "snapback: discard dropped what the run wrote to excluded paths: %s\n", quoteList(excluded))
	}
}
