package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/overlay"
	"github.com/spf13/cobra"
)

type modeJSON struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
	// Limit is what a mode that works cannot do here.
	Limit string `json:"limit,omitempty"`
}

// modes reports, in the order auto tries them, which isolation modes work
// here (for the project at root), why not, and what they cannot do.
func modes(root string) []modeJSON {
	var out []modeJSON
	for i := range isolation.All {
		v := isolation.All[i].Check(root)
		out = append(out, modeJSON{Name: isolation.All[i].Name, Available: v.OK, Reason: v.Why, Limit: v.Limit})
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
			for _, m := range ms {
				yes, why := "no", m.Reason
				if m.Available {
					yes = "yes"
				}
				if m.Limit != "" {
					yes, why = "yes, but", m.Limit+"; "+why
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, yes, why)
			}
			auto := "none"
			if m, err := isolation.Pick(isolation.Auto, root); err == nil {
				auto = m.Name
			}
			if why := overlay.Uncovered(root); why != "" {
				// runner.CheckRoot: auto would fall back to a snapshot of
				// the whole machine.
				fmt.Fprintf(tw, "\n--mode auto refuses here: %s\n", why)
			} else {
				fmt.Fprintf(tw, "\n--mode auto uses %s\n", auto)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return printProtection(g, pr)
		},
	}
}
