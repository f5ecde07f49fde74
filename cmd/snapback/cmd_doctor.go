package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/snapback/snapback/runner/isolation"
	"github.com/spf13/cobra"
)

type modeJSON struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

// modes reports, in the order auto tries them, which isolation modes work
// here (for the project at root) and why not.
func modes(root string) []modeJSON {
	var out []modeJSON
	for i := range isolation.All {
		ok, why := isolation.All[i].Available(root)
		out = append(out, modeJSON{Name: isolation.All[i].Name, Available: ok, Reason: why})
	}
	return out
}

func newDoctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Say which isolation modes work on this machine, and what the project's protection covers",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			root, err := g.rootDir()
			if err != nil {
				return err
			}
			ms := modes(root)
			pr := protection(root)
			if g.json {
				return g.printJSON(map[string]any{"modes": ms, "root": root, "covered": pr.Covered, "uncovered": pr.Uncovered})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "MODE\tAVAILABLE\tREASON")
			auto := ""
			for _, m := range ms {
				yes := "no"
				if m.Available {
					yes = "yes"
					if auto == "" {
						auto = m.Name
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, yes, m.Reason)
			}
			fmt.Fprintf(tw, "\n--mode auto uses %s\n", auto)
			if err := tw.Flush(); err != nil {
				return err
			}
			return printProtection(g, pr)
		},
	}
}
