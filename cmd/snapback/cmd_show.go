package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

func newShowCmd(g *globals) *cobra.Command {
	var o diffOptions
	c := &cobra.Command{
		Use:   "show [ID]",
		Short: "Show what one step changed, as git show does: its header, then its patch",
		Long: `Show what one step changed, as git show shows a commit: a header (id,
kind, time, command or message, exit status), then the step's own
changes as a patch in git's format, from the state before it to the
state right after it, read from the store (later edits to the tree do
not show; snapback diff ID shows the tree since). Without ID: the step
undo would revert. What git did in a git directory of the tree is
summed up (--git-raw lists its paths). A snapshot taken by snap records
a state, not a change: show gives its header alone.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runShow(g, args, o)
		},
	}
	c.Flags().BoolVar(&o.stat, "stat", false, "a summary of lines added and removed per file (git's --stat) instead of the patch")
	c.Flags().BoolVar(&o.gitRaw, "git-raw", false, "list the paths under .git/ one by one instead of what git did (commits made, refs moved)")
	return c
}

type showJSON struct {
	Step    snapshotJSON     `json:"step"`
	Changes []diffChangeJSON `json:"changes"`
	Git     []gitSummaryJSON `json:"git"`
}

func runShow(g *globals, args []string, o diffOptions) error {
	repo, err := g.openReader(snapshot.Options{Verb: "show", Access: snapshot.ForRead})
	if err != nil {
		return err
	}
	defer repo.Close()
	var m *record.Meta
	if len(args) == 1 {
		var p *snapshot.ViewRun
		if m, p, err = repo.Lookup(args[0]); err != nil {
			return err
		}
		if p != nil {
			return usageErr("show: %s is a pending run, not a step yet: snapback diff %s shows what it changes", p.ID, p.ID)
		}
	} else if m, err = repo.DefaultDiffBase(); err != nil {
		return err
	}
	h, err := repo.History()
	if err != nil {
		return err
	}
	var changes []record.Change
	if m.After != "" {
		if changes, err = repo.DiffRecorded(m); err != nil {
			return err
		}
	}
	d := &differ{repo: repo, recorded: true}
	changes, gits := splitGitChanges(d, changes, o)
	if g.json {
		out := showJSON{Step: snapJSON(m, h.Undone[m.ID])}
		o.patch, o.stat = true, true
		out.Changes, out.Git = d.changesJSON(changes, gits, o)
		return g.printJSON(out)
	}
	writeStepHeader(g, m, h.Undone[m.ID])
	if m.After == "" {
		fmt.Fprintf(g.stdout, "(a snapshot of the tree's state, no change of its own: snapback diff %s shows what changed since)\n", m.ID)
		return nil
	}
	if len(changes) == 0 && len(gits) == 0 {
		return nil
	}
	// What git did belongs to the header (git apply skips text before
	// the first diff --git).
	for _, s := range gits {
		for _, l := range gitSummaryLines(s) {
			fmt.Fprintf(g.stdout, "    %s\n", l)
		}
	}
	if len(gits) > 0 {
		fmt.Fprintln(g.stdout)
	}
	o.patch = !o.stat
	d.writeChanges(g, changes, nil, o)
	return nil
}

// writeStepHeader writes a step's header as git show writes a commit's,
// and the blank line after it.
func writeStepHeader(g *globals, m *record.Meta, undone bool) {
	w := g.stdout
	fmt.Fprintf(w, "step %s\n", m.ID)
	kind := string(m.Kind)
	if m.Mode != "" {
		kind += " (" + m.Mode + " mode)"
	}
	if undone {
		kind += ", undone"
	}
	fmt.Fprintf(w, "Kind:    %s\n", kind)
	fmt.Fprintf(w, "Date:    %s\n", m.CreatedAt.Local().Format("Mon Jan 2 15:04:05 2006 -0700"))
	if len(m.Command) > 0 {
		cmd := shellLine(m.Command)
		if m.ExitStatus != nil {
			cmd += fmt.Sprintf("  (exit %d)", *m.ExitStatus)
		}
		fmt.Fprintf(w, "Command: %s\n", cmd)
	}
	for i, st := range m.Steps {
		if len(m.Steps) > 1 {
			fmt.Fprintf(w, "Step %d:  %s\n", i+1, describeStep(st))
		}
	}
	if m.Session != "" {
		fmt.Fprintf(w, "Session: %s\n", m.Session)
	}
	for _, t := range m.Targets {
		fmt.Fprintf(w, "Target:  %s (%s)\n", quote(t.Name), t.Backend)
	}
	if m.Message != "" {
		fmt.Fprintln(w)
		for _, l := range strings.Split(strings.TrimRight(m.Message, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", printable(l))
		}
	}
	fmt.Fprintln(w)
}

// readStored reads a side of a recorded step from the store; a
// content the store does not hold (a run's commit moves it into the
// tree without a copy) is read from the tree while the tree still has
// it unchanged.
func (d *differ) readStored(e *record.Entry, path string, limit int64) ([]byte, error) {
	b, err := d.repo.ReadObjectPrefix(e.Object, limit)
	if err == nil {
		return b, nil
	}
	t, terr := d.repo.ReadTreeFile(path, limit)
	if terr == nil && int64(len(t)) == e.Size && sha256.Sum256(t) == [32]byte(e.Object) {
		return t, nil
	}
	return nil, errors.Join(err, fmt.Errorf("%s: the store does not hold this content and the tree no longer has it", path))
}
