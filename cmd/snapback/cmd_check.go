package main

import (
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

type checkOptions struct {
	readData bool
	repair   bool
}

func newCheckCmd(g *globals) *cobra.Command {
	var o checkOptions
	c := &cobra.Command{
		Use:   "check [--read-data=false] [--repair]",
		Short: "Verify the whole store: every object's hash, every manifest and record and what they refer to",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runCheck(g, o) },
	}
	c.Flags().BoolVar(&o.readData, "read-data", true, "re-hash every object (false: only check that each exists)")
	c.Flags().BoolVar(&o.repair, "repair", false, "move damaged records and objects aside into .snapback/damaged/ (nothing is deleted) and store again, from the tree, contents it still holds")
	return c
}

// checkJSON is check's --json output (version 1).
type checkJSON struct {
	Version int  `json:"version"`
	OK      bool `json:"ok"`
	*snapshot.CheckReport
}

// check checks the store, or with --repair repairs it: a verb of each
// kind, as each opens the store.
func check(g *globals, o checkOptions) (*snapshot.CheckReport, error) {
	co := snapshot.CheckOptions{ReadData: o.readData}
	if o.repair {
		repo, err := g.open(snapshot.Options{Verb: "check --repair", Access: snapshot.ForRepair, SkipDamaged: true})
		if err != nil {
			return nil, err
		}
		defer repo.Close()
		return repo.Repair(co)
	}
	r, err := g.openReader(snapshot.Options{Verb: "check", Access: snapshot.ForRead, SkipDamaged: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Check(co)
}

func runCheck(g *globals, o checkOptions) error {
	rep, err := check(g, o)
	if err != nil {
		return err
	}
	if g.json {
		if err := g.printJSON(checkJSON{Version: 1, OK: len(rep.Damaged) == 0, CheckReport: rep}); err != nil {
			return err
		}
	} else {
		for _, d := range rep.Damaged {
			line := fmt.Sprintf("damaged %s %s: %s", d.Kind, d.ID, d.Problem)
			if len(d.Snapshots) > 0 {
				line += " (snapshots: " + strings.Join(d.Snapshots, ", ") + ")"
			}
			if d.Repair != "" {
				line += "; repair: " + d.Repair
			}
			fmt.Fprintln(g.stdout, oneLine(line))
		}
		read := ""
		if o.readData {
			read = fmt.Sprintf(", %s read", humanBytes(rep.BytesRead))
		}
		fmt.Fprintf(g.stdout, "checked %d objects%s, %d snapshot records, %d pending runs: ", rep.ObjectsChecked, read, rep.SnapshotsChecked, rep.RunsChecked)
		if len(rep.Damaged) == 0 {
			fmt.Fprintln(g.stdout, "no damage")
		} else {
			fmt.Fprintf(g.stdout, "%d damaged\n", len(rep.Damaged))
		}
	}
	if len(rep.Damaged) == 0 {
		return nil
	}
	var names []string
	for i, d := range rep.Damaged {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(rep.Damaged)-5))
			break
		}
		names = append(names, d.Kind+" "+d.ID)
	}
	hint := "; `snapback check --repair` moves damaged records aside"
	if o.repair {
		hint = "; see above for what was repaired"
	}
	return &exitError{code: 1, kind: "damaged", err: fmt.Errorf("store damaged: %s%s", strings.Join(names, ", "), hint)}
}
