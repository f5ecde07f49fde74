package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

type runOptions struct {
	mode         string
	then         string
	commitFailed bool
	continue_    string
	wait         bool
	grace        time.Duration
	result       string
}

func newRunCmd(g *globals) *cobra.Command {
	var o runOptions
	c := &cobra.Command{
		Use:   "run [--mode MODE] [--then commit|review|discard] [--commit-failed] [--continue ID [--wait]] [--grace DURATION] [--result FILE] [--] CMD [ARGS...]",
		Short: "Run a command so that `undo` can revert what it changes",
		Long: `Run a command so that ` + "`undo`" + ` can revert what it changes.

In the overlay modes the command works in a copy-on-write view of the
project; its changes are then committed into the tree (--then commit, the
default), kept pending for review (--then review: see status, diff, commit,
discard), or thrown away (--then discard). A command that fails (exits
non-zero, is killed, or is interrupted) has its changes kept pending, not
committed; --commit-failed commits them anyway. In the copy mode it works
on the tree itself, after a snapshot: a failed command's changes are
recorded as usual (undo reverts them).

--continue ID runs another command in a pending run's view, on top of its
changes; the run keeps the --then of its first command unless given
another. Every command of the session is recorded (status, list).

When the command exits, the processes it left running in the view get
--grace to finish; those still running then are ended (snapback says so),
so that nothing writes into the run after it is committed or discarded.

As with nice and time, the first word that is not one of run's flags
starts the command: flags after it are the command's (snapback run ls -l).
A -- before the command is allowed, and needed when its name starts with -.

The command keeps snapback's stdin, stdout, stderr, terminal, environment
and working directory; signals sent to snapback reach it; snapback exits
with its status (128+N if signal N killed it, 125 if snapback failed).
Its environment also holds SNAPBACK_RUN_ID (the run's id) and
SNAPBACK_ROOT (the project root).

With --json, the run's result (id, mode, exit status, state, changed
paths by kind, targets) is one JSON object on the last line of stderr;
--result FILE writes it to FILE instead, apart from the command's own
output (docs/json.md describes the fields).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			g.runStarted = true
			switch o.then {
			case "", "commit", "review", "discard":
			default:
				return usageErr("run: --then %s: must be commit, review or discard", o.then)
			}
			if o.wait && o.continue_ == "" {
				return usageErr("run: --wait needs --continue ID")
			}
			if o.grace < 0 {
				return usageErr("run: --grace %s: must not be negative", o.grace)
			}
			return runRun(c, g, o, args)
		},
	}
	// Flags end at the command's first word, as for nice and time: in
	// `snapback run ls -l`, -l is ls's.
	c.Flags().SetInterspersed(false)
	c.Flags().StringVar(&o.mode, "mode", "", "isolation mode: "+strings.Join(isolation.Names(), ", ")+" (default: snapshot.mode from snapback.toml, else auto; snapback doctor says which work here)")
	_ = c.RegisterFlagCompletionFunc("mode", completeMode) // the flag exists: no error
	c.Flags().StringVar(&o.then, "then", "", "after an overlay run: commit, review (keep pending) or discard (default: commit; with --continue, the run's own)")
	c.Flags().BoolVar(&o.commitFailed, "commit-failed", false, "with --then commit: commit even when the command fails (by default its changes stay pending)")
	c.Flags().StringVar(&o.continue_, "continue", "", "run on top of the pending run ID's changes")
	_ = c.RegisterFlagCompletionFunc("then", completeWords("commit\tmove the changes into the tree", "review\tkeep them pending", "discard\tthrow them away"))
	_ = c.RegisterFlagCompletionFunc("continue", completeIDs(g, runIDs))
	c.Flags().BoolVar(&o.wait, "wait", false, "with --continue: wait while another command runs in the view")
	c.Flags().StringVar(&o.result, "result", "", "write the run's result as JSON to FILE (see --json)")
	c.Flags().DurationVar(&o.grace, "grace", runner.DefaultGrace, "overlay modes: how long processes the command left running may finish before they are ended")
	return c
}

// completeMode offers every mode name, with what it does.
func completeMode(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	out := []string{isolation.Auto + "\tthe first mode that works here (snapback doctor)"}
	for _, m := range isolation.All {
		out = append(out, m.Name+"\t"+m.Help)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func runRun(c *cobra.Command, g *globals, o runOptions, argv []string) error {
	if err := precheckRoot(g, o); err != nil {
		return err
	}
	repo, err := g.open(snapshot.Options{Verb: "run", Access: snapshot.ForChange, Create: true})
	if err != nil {
		return err
	}
	defer repo.Close()
	mode := o.mode
	if mode == "" {
		mode = repo.Config.Snapshot.Mode
	}
	waiting := func(p *snapshot.ViewRun) {
		fmt.Fprintf(g.stderr, "snapback: waiting for run %s: %s\n", p.ID, oneLine(runner.RunningStep(p)))
	}
	res, err := runner.Run(c.Context(), repo, runner.Options{Args: argv, Mode: mode, Then: runner.Then(o.then),
		CommitFailed: o.commitFailed, Continue: o.continue_, Wait: o.wait, Waiting: waiting, Grace: o.grace,
		LockWait: lockWait(), Notify: func(s string) { fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(s)) },
		Count: g.json || o.result != "" || g.summary()})
	if err == nil {
		retain(g, repo)
	}
	// Said once it is known whether the run saved the git state.
	saved := gitdirs.SavedNone
	if snapshot.GitSaved(res.Targets) {
		saved = gitdirs.SavedHead
	}
	unc := g.noteUncovered(repo.Root, saved)
	oerr := runOutcome(g, repo, res, err)
	if err != nil {
		return oerr // the error says what happened, JSON under --json
	}
	g.summarize(runSummary(res))
	if o.result != "" {
		if werr := writeResult(o.result, res, unc); werr != nil {
			return werr
		}
	} else if g.json {
		// The last line of stderr: the command's stdout stays its own.
		b, jerr := json.Marshal(versioned(runResultJSON(res, unc)))
		if jerr != nil {
			return jerr
		}
		fmt.Fprintf(g.stderr, "%s\n", b)
	}
	return oerr
}

// precheckRoot refuses a run at a root no view can cover before the
// store is made there (runner.Run refuses it too, for every caller).
func precheckRoot(g *globals, o runOptions) error {
	if o.continue_ != "" {
		return nil // the pending run's own mode
	}
	root, err := g.rootDir()
	if err != nil {
		return nil // g.open says so
	}
	mode := o.mode
	if mode == "" {
		cfg, err := config.Load(root)
		if err != nil {
			return nil // g.open says so
		}
		mode = cfg.Snapshot.Mode
	}
	if err := runner.CheckRoot(root, mode); err != nil {
		return &exitError{code: 2, kind: "usage", err: err}
	}
	return nil
}

// runResult is run's result under --json and --result (docs/json.md).
type runResult struct {
	ID         string               `json:"id"`
	Mode       string               `json:"mode"`
	ExitStatus int                  `json:"exit_status"`
	State      string               `json:"state"`
	Snapshot   *string              `json:"snapshot"`
	Changes    map[string]int       `json:"changes"`
	Targets    []record.TargetState `json:"targets"`
	Skipped    []record.Skipped     `json:"skipped"`
	// Uncovered are the directories the run's protection does not hold.
	Uncovered uncoveredJSON `json:"uncovered,omitempty"`
}

// changeKinds names DiffManifests' ops in the result.
var changeKinds = map[string]string{"A": "added", "M": "modified", "D": "deleted", "T": "type_changed"}

func runResultJSON(res runner.Result, unc uncoveredJSON) runResult {
	r := runResult{ID: res.ID, Mode: res.Mode, ExitStatus: res.Status, State: res.State,
		Changes: map[string]int{"added": 0, "modified": 0, "deleted": 0, "type_changed": 0}, Targets: res.Targets,
		Skipped: nonNil(res.Skipped), Uncovered: unc}
	if res.Snapshot != "" {
		r.Snapshot = &res.Snapshot
	}
	if r.Targets == nil {
		r.Targets = []record.TargetState{}
	}
	for _, c := range res.Changes {
		r.Changes[changeKinds[c.Op]]++
	}
	return r
}

// writeResult writes the result to path whole or not at all, so that a
// script that finds the file can read it.
func writeResult(path string, res runner.Result, unc uncoveredJSON) error {
	b, err := json.MarshalIndent(versioned(runResultJSON(res, unc)), "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("run --result: %w", err)
	}
	return nil
}

// runSummary is the line a terminal gets once a run is over.
func runSummary(res runner.Result) string {
	n := len(res.Changes)
	switch res.State {
	case "committed":
		as := "" // a run on the tree is its own record
		if res.Snapshot != res.ID {
			as = " as " + res.Snapshot
		}
		return fmt.Sprintf("run %s committed %s%s (%s mode); snapback undo reverts it", res.ID, nPaths(n), as, res.Mode)
	case "pending":
		return "" // runOutcome said so already, with what to do
	case "discarded":
		return fmt.Sprintf("run %s discarded %s (%s mode); nothing changed", res.ID, nPaths(n), res.Mode)
	case "empty":
		return fmt.Sprintf("run %s changed nothing (%s mode); nothing to undo", res.ID, res.Mode)
	}
	return ""
}

// nPaths says "1 path", "3 paths".
func nPaths(n int) string {
	if n == 1 {
		return "1 path"
	}
	return fmt.Sprintf("%d paths", n)
}

// runOutcome says what became of a run, and ends snapback with the
// command's status.
func runOutcome(g *globals, repo *snapshot.Repo, res runner.Result, err error) error {
	if res.StartErr != nil {
		fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(res.StartErr.Error()))
	}
	var bad *runner.BadInputError
	if errors.As(err, &bad) {
		kind := "usage"
		if _, k := classify(bad.Err); k != "error" {
			kind = k // a refusal of its own kind (checkpoint_open)
		}
		return &exitError{code: 2, kind: kind, err: err}
	}
	if err != nil {
		return err
	}
	switch {
	case res.Failed:
		fmt.Fprintf(g.stderr, "snapback: the command failed (%s): nothing committed; run %s stays pending: snapback diff, then snapback commit or discard%s\n",
			describeStatus(res.Status), res.Pending.ID, pendingTargets(repo, res.Pending))
	case res.Pending != nil:
		fmt.Fprintf(g.stderr, "snapback: run %s is pending: snapback diff, then snapback commit or discard%s\n", res.Pending.ID, pendingTargets(repo, res.Pending))
	case res.Recorded != nil && res.Status != 0 && res.StartErr == nil && (res.Recorded.Files > 0 || len(res.Recorded.Targets) > 0):
		// The copy and btrfs modes have no pending state: the command
		// changed the tree itself, and its record is what undo reverts.
		fmt.Fprintf(g.stderr, "snapback: the command failed (%s): the %s mode has no pending state; what it changed is in the tree, recorded as %s: snapback undo reverts it\n",
			describeStatus(res.Status), res.Recorded.Mode, res.Recorded.ID)
	}
	writes, kept := repo.TargetWrites(res.Targets, res.KeptIgnored)
	if res.State == "discarded" {
		noteRestored(g, "discard", res.ID, writes)
	}
	noteUnreverted(g, "discard", kept, nil)
	noteDropped(g, res.DroppedExcluded)
	if !g.json {
		g.noteSkipped(res.Skipped) // the result holds them under --json
	}
	if res.Status != 0 {
		return &statusError{status: res.Status}
	}
	return nil
}

// pendingTargets says, for the line about a pending run, that its
// targets are not isolated: what the command did to them is done already
// (a SQLite database in the tree was written through), and discard
// restores them.
func pendingTargets(repo *snapshot.Repo, p *snapshot.ViewRun) string {
	if len(p.Targets) == 0 {
		return ""
	}
	writes, _ := repo.TargetWrites(p.Targets, p.WroteThrough)
	var changed, maybe []string
	for _, w := range writes {
		if len(w.Paths) > 0 {
			changed = append(changed, quote(w.Name)+" ("+quoteList(w.Paths)+")")
		} else {
			maybe = append(maybe, quote(w.Name))
		}
	}
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, "it changed target "+strings.Join(changed, ", "))
	}
	if len(maybe) > 0 {
		parts = append(parts, "target "+strings.Join(maybe, ", ")+" may have changed")
	}
	them := "them"
	if len(writes) == 1 {
		them = "it"
	}
	return "; " + strings.Join(parts, " and ") + " (a view does not isolate targets): snapback discard " + p.ID + " restores " + them
}

// describeStatus says how a command ended: "exit 3", "exit 143, SIGTERM".
func describeStatus(st int) string {
	if st > 128 {
		if name := unix.SignalName(syscall.Signal(st - 128)); name != "" {
			return fmt.Sprintf("exit %d, %s", st, name)
		}
	}
	return fmt.Sprintf("exit %d", st)
}
