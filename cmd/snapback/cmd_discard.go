package main

import (
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

func newDiscardCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "discard [ID]",
		Short: "Throw away a pending run's changes (the newest, or ID)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			repo, p, err := g.openPending("discard", args)
			if err != nil {
				return err
			}
			defer repo.Close()
			excluded, err := repo.ExcludedIn(p, nil)
			if err != nil {
				return err
			}
			n := -1
			if g.summary() {
				// Counted before: the layer goes with the discard.
				target, cur, err := repo.PendingChanges(p)
				if err != nil {
					return err
				}
				n = len(snapshot.DiffManifests(cur, target))
			}
			if err := repo.DiscardPending(p); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"discarded": p.ID,
					"kept_ignored": append([]string{}, p.WroteThrough...), "dropped_excluded": append([]string{}, excluded...)})
			}
			g.say("discarded run %s\n", p.ID)
			noteUnreverted(g, "discard", p.WroteThrough, nil)
			noteDropped(g, excluded)
			if n >= 0 {
				g.summarize(fmt.Sprintf("discarded %s of run %s; the tree is as it was (there is nothing to undo)", nPaths(n), p.ID))
			}
			return nil
		},
	}
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

// noteDropped names the excluded paths a discard threw away with the run.
func noteDropped(g *globals, excluded []string) {
	if len(excluded) > 0 {
		fmt.Fprintf(g.stderr, "snapback: discard dropped what the run wrote to excluded paths: %s\n", quoteList(excluded))
	}
}

func quoteList(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = quote(p)
	}
	return strings.Join(q, ", ")
}
