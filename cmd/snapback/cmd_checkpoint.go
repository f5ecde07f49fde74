package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// checkpointLockWait: a checkpoint verb waits this long for the store's
// lock, unless SNAPBACK_LOCK_WAIT says otherwise. Several hooks of one
// agent turn call begin at once, and the first, on a large tree seen for
// the first time, may take a while: the others must wait for it and then
// find it open, not fail after 5 s.
const checkpointLockWait = 2 * time.Minute

func newCheckpointCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "checkpoint",
		Short: "Record a stretch of time as one undo step: begin, then end",
		Long: `Record a stretch of time as one undo step, for tools that change the
tree from their own process (an agent harness's tools), which no run can
wrap. begin snapshots the tree and the targets (incrementally, as a copy-mode
run does); end records exactly the paths changed since, before and after:
one step that undo reverts and redo reapplies. A stretch that changed
nothing leaves no step.

Each session (--session) has its own checkpoint: begin while the session's
is open does nothing and says so; parallel begins open exactly one. Sessions'
checkpoints may be open side by side (two agents in one project): each step
then keeps only what its session changed, and a path changed while both
were open that nothing tells apart is shared, left by undo unless
--include-shared (docs/agents.md). A checkpoint begun here may have written
any path: snapback does not see who writes. A checkpoint stays open until
end, however long, whichever process calls it: recover never closes it.
While one is open, snap, undo, redo, restore, a run on the tree and a
commit are refused.`,
	}
	c.AddCommand(newCheckpointBeginCmd(g), newCheckpointEndCmd(g), newCheckpointStatusCmd(g))
	return c
}

type checkpointOptions struct {
	message string
	session string
}

func newCheckpointBeginCmd(g *globals) *cobra.Command {
	var o checkpointOptions
	c := &cobra.Command{
		Use:   "begin [-m MSG] [--session S]",
		Short: "Open the session's checkpoint (nothing is done when it is open already)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runCheckpointBegin(g, o) },
	}
	c.Flags().StringVarP(&o.message, "message", "m", "", "what the stretch is for (an agent's prompt, say)")
	c.Flags().StringVar(&o.session, "session", "", "the session the stretch belongs to (undo --session reverts all of a session's)")
	return c
}

func newCheckpointEndCmd(g *globals) *cobra.Command {
	var o checkpointOptions
	c := &cobra.Command{
		Use:   "end [--session S]",
		Short: "Close the session's checkpoint into one undo step (nothing is done when none is open)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runCheckpointEnd(g, o) },
	}
	c.Flags().StringVar(&o.session, "session", "", "the session whose checkpoint to close (without it: the one begun without a session, or the only one open)")
	return c
}

func newCheckpointStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say which checkpoints are open, since when and for which sessions",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runCheckpointStatus(g) },
	}
}

// checkSession refuses a session name the store would refuse, as bad input.
func checkSession(verb, s string) error {
	if err := record.ValidSession(s); err != nil {
		return usageErr("checkpoint %s: --session: %v", verb, err)
	}
	return nil
}

// openForCheckpoint opens the store as g.open does, waiting longer for
// its lock (see checkpointLockWait).
func (g *globals) openForCheckpoint(o snapshot.Options) (*snapshot.Repo, error) {
	// A checkpoint's scan keeps the tree's state and the stat cache in
	// memory for the whole of its short life: collecting garbage less
	// often saves a tenth of its CPU time (tens of MB more at most).
	debug.SetGCPercent(400)
	o.HeldAhead = true
	if os.Getenv("SNAPBACK_LOCK_WAIT") == "" {
		g.lockWait = checkpointLockWait
	}
	return g.open(o)
}

func runCheckpointBegin(g *globals, o checkpointOptions) error {
	if err := checkSession("begin", o.session); err != nil {
		return err
	}
	repo, err := g.openForCheckpoint(snapshot.Options{Verb: "checkpoint begin", Access: snapshot.ForChange, Create: true, Outside: true})
	if err != nil {
		return err
	}
	defer repo.Close()
	w := snapshot.Writes{Any: true}
	// A hook's (a session named, its payload or nothing on stdin, not a
	// person's terminal): what its agent's processes write is the
	// session's.
	if o.session != "" && !term.IsTerminal(int(os.Stdin.Fd())) {
		w.Agent = snapshot.HookAgent()
	}
	m, opened, err := repo.BeginTurn(o.session, o.message, w)
	if err != nil {
		return err
	}
	var unc uncoveredJSON
	if opened { // said once per checkpoint, not on every hook's begin
		unc = g.noteUncovered(repo.Root, savedBy(m))
	}
	if g.json {
		return g.printJSON(struct {
			ID        string        `json:"id"`
			Opened    bool          `json:"opened"`
			Session   string        `json:"session"`
			Message   string        `json:"message"`
			CreatedAt time.Time     `json:"created_at"`
			Uncovered uncoveredJSON `json:"uncovered,omitempty"`
		}{m.ID, opened, m.Session, m.Message, m.CreatedAt, unc})
	}
	if opened {
		fmt.Fprintf(g.stdout, "opened checkpoint %s\n", m.ID)
	} else {
		fmt.Fprintf(g.stdout, "checkpoint %s is open already (%s): nothing to do\n", m.ID, oneLine(snapshot.DescribeCheckpoint(m)))
	}
	return nil
}

func runCheckpointEnd(g *globals, o checkpointOptions) error {
	if err := checkSession("end", o.session); err != nil {
		return err
	}
	type endJSON struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Files   int    `json:"files"`
		Changes int    `json:"changes"`
		Session string `json:"session"`
		Message string `json:"message"`
		Targets int    `json:"targets"`
		Open    string `json:"open,omitempty"`
		// Watched: only the paths the tree's watcher named were read.
		Watched bool `json:"watched"`
	}
	repo, err := g.openForCheckpoint(snapshot.Options{Verb: "checkpoint end", Access: snapshot.ForChange})
	if errors.Is(err, snapshot.ErrNoStore) {
		if g.json {
			return g.printJSON(endJSON{State: "none"})
		}
		fmt.Fprintln(g.stdout, "no checkpoint open")
		return nil
	}
	if err != nil {
		return err
	}
	defer repo.Close()
	m, dropped, err := repo.EndCheckpoint(o.session)
	if errors.Is(err, snapshot.ErrWhichCheckpoint) {
		return usageErr("checkpoint end: %v with --session", err)
	}
	if err != nil {
		return err
	}
	if m == nil {
		open, err := repo.OpenCheckpoint()
		if err != nil {
			return err
		}
		if g.json {
			out := endJSON{State: "none"}
			if open != nil {
				out.Open = open.ID
			}
			return g.printJSON(out)
		}
		if open != nil {
			fmt.Fprintf(g.stdout, "no checkpoint of session %s open (checkpoint %s is: %s)\n", oneLine(o.session), open.ID, oneLine(snapshot.DescribeCheckpoint(open)))
		} else {
			fmt.Fprintln(g.stdout, "no checkpoint open")
		}
		return nil
	}
	out := endJSON{ID: m.ID, State: "done", Session: m.Session, Message: m.Message, Targets: len(m.Targets), Watched: repo.LastWatched}
	if dropped {
		out.State = "dropped"
	} else {
		changes, err := repo.DiffRecorded(m)
		if err != nil {
			return err
		}
		out.Files, out.Changes = m.Files, len(changes)
	}
	if g.json {
		return g.printJSON(out)
	}
	if dropped {
		fmt.Fprintf(g.stdout, "checkpoint %s changed nothing: no undo step\n", m.ID)
		return nil
	}
	fmt.Fprintf(g.stdout, "closed checkpoint %s: %s changed\n", m.ID, nPaths(out.Changes))
	g.summarize(fmt.Sprintf("checkpoint %s: %s changed; snapback undo reverts them", m.ID, nPaths(out.Changes)))
	return nil
}

func runCheckpointStatus(g *globals) error {
	type statusJSON struct {
		Open      bool       `json:"open"`
		ID        string     `json:"id,omitempty"`
		Session   string     `json:"session,omitempty"`
		Message   string     `json:"message,omitempty"`
		CreatedAt *time.Time `json:"created_at,omitempty"`
		// Checkpoints are all the open ones, oldest first (the fields
		// above are the newest's): one per session.
		Checkpoints []checkpointJSON `json:"checkpoints"`
		// Agents: the harnesses' hooks installed for the project.
		Agents []agentHooksJSON `json:"agents,omitempty"`
		// Writers: whether the tree's watcher tells whose processes
		// wrote what changed (a store's project only).
		Writers *writersJSON `json:"writers,omitempty"`
	}
	var writers *writersJSON
	var hooks []agentHooksJSON
	repo, err := g.openReader(snapshot.Options{Verb: "checkpoint status", Access: snapshot.ForRead, SkipDamaged: true})
	var open []*record.Meta
	switch {
	case errors.Is(err, snapshot.ErrNoStore):
		if root, err := g.rootDir(); err == nil {
			hooks = agentHooks(root, "")
		}
	case err != nil:
		return err
	default:
		defer repo.Close()
		if open, err = repo.OpenCheckpoints(); err != nil {
			return err
		}
		hooks = agentHooks(repo.Store.Root, repo.Dir)
		w := writerState(repo.Dir)
		writers = &w
	}
	if g.json {
		out := statusJSON{Checkpoints: openJSON(open), Agents: hooks, Writers: writers}
		if n := len(open); n > 0 {
			m := open[n-1]
			out.Open, out.ID, out.Session, out.Message, out.CreatedAt = true, m.ID, m.Session, m.Message, &m.CreatedAt
		}
		return g.printJSON(out)
	}
	if len(open) == 0 {
		fmt.Fprintln(g.stdout, "no checkpoint open")
	}
	sayOpen(g, open, "")
	for _, e := range hooks {
		// Hooks in the user's home (absolute) run in every project:
		// never fired in this one is no news, doctor says it.
		if e.NeverFired && !filepath.IsAbs(e.File) {
			g.warn(neverFired(e))
		}
	}
	return nil
}

// sayOpen says which checkpoints are open, one a line, and that they
// overlap when several are; hint ends each line.
func sayOpen(g *globals, open []*record.Meta, hint string) {
	for _, m := range open {
		fmt.Fprintf(g.stdout, "checkpoint %s is open (%s)%s\n", m.ID, oneLine(snapshot.DescribeCheckpoint(m)), hint)
	}
	if len(open) > 1 {
		fmt.Fprintf(g.stdout, "%d sessions' turns overlap: each step keeps what its session's tools wrote; a path none tells apart is shared\n", len(open))
	}
}

// openJSON lists the open checkpoints, each with the others open beside
// it.
func openJSON(open []*record.Meta) []checkpointJSON {
	out := []checkpointJSON{}
	for _, m := range open {
		j := checkpointJSON{ID: m.ID, Session: m.Session, Message: m.Message, CreatedAt: m.CreatedAt, Overlaps: []string{}}
		for _, o := range open {
			if o != m {
				j.Overlaps = append(j.Overlaps, o.ID)
			}
		}
		out = append(out, j)
	}
	return out
}
