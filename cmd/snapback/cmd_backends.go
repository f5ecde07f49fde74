package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/snapback/snapback/backends"
	"github.com/spf13/cobra"
)

func newBackendsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backends",
		Short: "List the target backends, whether each works here, and why not",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			st := backends.Statuses()
			if g.json {
				return g.printJSON(backendsJSON{Backends: st})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "BACKEND\tAVAILABLE\tREASON")
			for _, s := range st {
				yes := "no"
				if s.Available {
					yes = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, yes, s.Reason)
			}
			return tw.Flush()
		},
	}
}
