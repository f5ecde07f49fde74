package main

import (
	"fmt"
	"os/exec"
	"text/tabwriter"

	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/snapshot"
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
	for _, m := range isolation.All {
		v := runner.Check(m, root)
		out = append(out, modeJSON{Name: m.Name, Available: v.OK, Reason: v.Why, Limit: v.Limit})
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
			st, err := storeReport(root)
			if err != nil {
				return err
			}
			hooks := agentHooks(root, st.existing)
			kept, _ := fuse.KeptServer(root)
			wr := writerState(st.existing)
			if g.json {
				return g.printJSON(doctorJSON{Agents: nonNil(hooks), KeptView: kept, Modes: ms, Root: root, Store: st.Path, StoreWarning: st.Warning, Covered: pr.Covered, Uncovered: pr.Uncovered, Writers: wr})
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
			if m, err := runner.Pick(isolation.Auto, root); err == nil {
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
			fmt.Fprintf(g.stdout, "fuse kept view: %s\n", keptViewText(root, kept))
			if wr.On {
				fmt.Fprintln(g.stdout, "writer attribution: on (the tree's watcher tells each session's shell commands' writes apart)")
			} else {
				fmt.Fprintf(g.stdout, "writer attribution: off (%s)\n", wr.Why)
			}
			fmt.Fprintf(g.stdout, "\nstore: %s\n", st.Text)
			if st.Warning != "" {
				fmt.Fprintf(g.stdout, "warning: %s\n", st.Warning)
			}
			if len(hooks) > 0 {
				fmt.Fprintln(g.stdout)
				printAgentHooks(g.stdout, hooks)
			}
			return printProtection(g, pr)
		},
	}
}

// doctorStore is what doctor says of the project's store.
type doctorStore struct {
	Path     string // where it is, or is to be made
	existing string // Path when the store is there, else ""
	Text     string // the line for a person
	Warning  string // what may take the history, and the remedy ("" when nothing)
}

// storeReport says where the store of the project at root is
// (snapshot.Locate, as every verb), and, for one in the tree of a git work
// tree, that `git clean -fdx` removes it: git sees an ignored directory.
func storeReport(root string) (doctorStore, error) {
	loc, err := storeOf(root)
	if err != nil {
		return doctorStore{}, err
	}
	r := doctorStore{Path: loc.Dir}
	if loc.Exists {
		r.existing = loc.Dir
	}
	switch {
	case !loc.Exists && loc.InTree:
		r.Text = loc.Dir + " (none yet: the first snap or run makes it there, in the tree)"
	case !loc.Exists:
		r.Text = loc.Dir + " (none yet: made there, outside the tree)"
	case loc.InTree:
		r.Text = loc.Dir + " (in the tree)"
	default:
		r.Text = loc.Dir + " (outside the tree)"
	}
	if loc.InTree && loc.Exists && exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Run() == nil {
		to := "a directory outside the project"
		if p, err := snapshot.StateStore(root); err == nil {
			to = p
		}
		r.Warning = fmt.Sprintf("`git clean -fdx` removes the store in the tree, and with it every undo step (git sees an ignored directory); keep it outside: [snapshot] store = %q in snapback.toml (move %s there first to keep its history)", to, snapshot.StoreDir)
	}
	return r, nil
}

// keptViewText says whether a kept fuse view serves the project
// (SNAPBACK_FUSE_KEEP, docs/modes.md), or why the next fuse run would
// get a fresh view.
func keptViewText(root string, pid int) string {
	if err := fuse.KeepCheck(root); err != nil {
		return fmt.Sprintf("unavailable (%v): each fuse run gets a fresh view", err)
	}
	if !fuse.KeepOn() {
		return "off (" + fuse.KeepEnv + "=0): each fuse run gets a fresh view"
	}
	if pid != 0 {
		return fmt.Sprintf("a server runs for this project (pid %d): the next fuse run starts warm", pid)
	}
	return "no server runs for this project: the next fuse run starts one"
}
