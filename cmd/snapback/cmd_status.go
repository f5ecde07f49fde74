package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List runs whose changes are pending (not yet committed or discarded)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runStatus(g) },
	}
}

type runJSON struct {
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Command    []string `json:"command"`
	Mode       string   `json:"mode"`
	Changes    int      `json:"changes"`
	ExitStatus *int     `json:"exit_status,omitempty"`
	// Targets are the states from before the command that commit keeps
	// for undo and discard restores.
	Targets []record.TargetState `json:"targets,omitempty"`
	// Then is what the session's commands become of unless told otherwise.
	Then string `json:"then,omitempty"`
	// Steps are the commands run in the view, first to last.
	Steps []record.Step `json:"steps,omitempty"`
}

func runStatus(g *globals) error {
	repo, err := g.openReader(snapshot.Options{Verb: "status", Access: snapshot.ForRead, SkipDamaged: true})
	if errors.Is(err, snapshot.ErrNoStore) {
		// No store yet is no error for a question: nothing is pending.
		if g.json {
			return g.printJSON(struct {
				Runs []runJSON `json:"runs"`
			}{Runs: []runJSON{}})
		}
		fmt.Fprintln(g.stdout, "no pending runs")
		return nil
	}
	if err != nil {
		return err
	}
	defer repo.Close()
	runs, err := repo.PendingRuns()
	if err != nil {
		return err
	}
	cp, err := repo.OpenCheckpoint()
	if err != nil {
		return err
	}
	out := struct {
		Runs []runJSON `json:"runs"`
		// Checkpoint is the open checkpoint, if one is.
		Checkpoint *checkpointJSON `json:"checkpoint,omitempty"`
		// Uncovered are the directories the project's protection does not hold.
		Uncovered uncoveredJSON `json:"uncovered,omitempty"`
	}{Runs: []runJSON{}, Uncovered: uncovered(repo.Root, gitdirs.SavedByMode)}
	if cp != nil {
		out.Checkpoint = &checkpointJSON{ID: cp.ID, Session: cp.Session, Message: cp.Message, CreatedAt: cp.CreatedAt}
	}
	for _, p := range runs {
		j := runJSON{ID: p.ID, State: p.State, Command: p.Command, Mode: p.Mode, ExitStatus: p.ExitStatus, Changes: -1, Targets: p.Targets,
			Then: p.Then, Steps: p.Steps}
		if p.State != "running" {
			target, cur, err := repo.PendingChanges(p)
			if err != nil {
				return err
			}
			j.Changes = len(record.DiffManifests(cur, target))
		}
		out.Runs = append(out.Runs, j)
	}
	if g.json {
		return g.printJSON(out)
	}
	for _, d := range out.Uncovered {
		fmt.Fprintf(g.stdout, "not covered: %s: %s\n", oneLine(d.Path), oneLine(d.Reason))
	}
	if cp != nil {
		fmt.Fprintf(g.stdout, "checkpoint %s is open (%s): snapback checkpoint end closes it\n", cp.ID, oneLine(snapshot.DescribeCheckpoint(cp)))
	}
	if len(out.Runs) == 0 {
		fmt.Fprintln(g.stdout, "no pending runs")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tMODE\tCHANGES\tCOMMAND")
	for _, r := range out.Runs {
		changes := fmt.Sprint(r.Changes)
		if r.Changes < 0 {
			changes = "?"
		}
		cmd := "$ " + shellLine(r.Command)
		if r.ExitStatus != nil {
			cmd += fmt.Sprintf("  (exit %d)", *r.ExitStatus)
		}
		if n := len(r.Targets); n > 0 {
			cmd += fmt.Sprintf("  [%d target(s) saved: discard restores them]", n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Mode, changes, oneLine(cmd))
		if len(r.Steps) > 1 {
			for i, st := range r.Steps {
				fmt.Fprintf(tw, "  step %d\t\t\t%d\t%s\n", i+1, st.Changes, oneLine(describeStep(st)))
			}
		}
	}
	return tw.Flush()
}

// checkpointJSON is an open checkpoint in status --json.
type checkpointJSON struct {
	ID        string    `json:"id"`
	Session   string    `json:"session,omitempty"`
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// describeStep says what a step of a session ran and how it ended:
// "$ make test  (exit 2, 1.4s)", or "(running)".
func describeStep(st record.Step) string {
	end := "running"
	if st.ExitStatus != nil {
		end = fmt.Sprintf("exit %d, %s", *st.ExitStatus, (time.Duration(st.DurationMS) * time.Millisecond).String())
	}
	return fmt.Sprintf("$ %s  (%s)", shellLine(st.Command), end)
}
