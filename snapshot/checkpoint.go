package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/snapback/snapback/snapshot/record"
)

// A checkpoint records a stretch of time instead of a command: for tools
// that write from their own process (an agent harness's Edit tool), which
// no `run` can wrap. [Repo.BeginCheckpoint] takes a tree snapshot, as a
// copy-mode run takes its "before", and writes it as a record of kind
// checkpoint, state open; [Repo.EndCheckpoint] narrows that record to the
// paths changed since, with their state before and after, exactly as
// [Repo.FinishTreeRun] narrows a run: one undo step. A stretch that changed
// nothing (and saved no target) leaves no record.
//
// An open checkpoint outlives the process that opened it (the hooks of a
// harness begin and end it from different processes): unlike a run, it
// holds no lock, and recover never finishes it; only `checkpoint end`
// does, however late. While one is open, what would mix other changes
// into it, or take them out of the tree under it, is refused
// ([CheckpointOpenError]): snap, undo, redo, restore, a run on the tree,
// a commit. Begin and end never change the tree: a crash in either leaves
// the record as it was (open, or narrowed: the narrowed record replaces
// the open one in one rename), and the next end does the work again.

// ErrCheckpointOpen is what a [CheckpointOpenError] is.
var ErrCheckpointOpen = errors.New("a checkpoint is open")

// CheckpointOpenError refuses an operation while a checkpoint is open.
type CheckpointOpenError struct {
	Op         string
	Checkpoint *record.Meta
}

func (e *CheckpointOpenError) Error() string {
	return fmt.Sprintf("%s refused: checkpoint %s is open (%s): the tree's changes are being recorded in it; `snapback checkpoint end` first",
		e.Op, e.Checkpoint.ID, DescribeCheckpoint(e.Checkpoint))
}

func (e *CheckpointOpenError) Unwrap() error { return ErrCheckpointOpen }

// DescribeCheckpoint says when a checkpoint began, for which session and
// why: "since 12:03:04, session abc, "fix the tests"".
func DescribeCheckpoint(m *record.Meta) string {
	since := m.CreatedAt.Local()
	format := "15:04:05"
	if time.Since(since) > 20*time.Hour {
		format = "2006-01-02 15:04:05"
	}
	parts := []string{"since " + since.Format(format)}
	if m.Session != "" {
		parts = append(parts, "session "+m.Session)
	}
	if m.Message != "" {
		parts = append(parts, fmt.Sprintf("%q", m.Message))
	}
	return strings.Join(parts, ", ")
}

// OpenCheckpoint returns the newest open checkpoint, or nil when none is. A
// damaged record is an error as for [Store.List], but skipped without a
// warning with SkipDamaged: the verb that reads the history warns.
func (r *Reader) OpenCheckpoint() (*record.Meta, error) {
	all, damaged, err := r.liveRecords()
	if err != nil {
		return nil, err
	}
	if len(damaged) > 0 && !r.SkipDamaged {
		return nil, damagedError(damaged)
	}
	for i := len(all) - 1; i >= 0; i-- {
		if m := all[i]; m.Kind == record.KindCheckpoint && m.State == record.StateOpen {
			return m, nil
		}
	}
	return nil, nil
}

// refuseOpen refuses op while a checkpoint is open.
func (r *Repo) refuseOpen(op string) error {
	m, err := r.OpenCheckpoint()
	if err != nil {
		return err
	}
	if m != nil {
		return &CheckpointOpenError{Op: op, Checkpoint: m}
	}
	return nil
}

// BeginCheckpoint opens a checkpoint of session, whose writer is not
// known (it may write any path): [Repo.BeginTurn] with Writes{Any: true}.
func (r *Repo) BeginCheckpoint(session, message string) (m *record.Meta, opened bool, err error) {
	return r.BeginTurn(session, message, Writes{Any: true})
}

// BeginTurn opens session's checkpoint: a snapshot of the tree
// (incremental: files whose stat the cache vouches for are not read) and
// of the targets, recorded open, with what the session says it is about
// to write (sessions.go). When the session's is open already, it adds w
// to it and returns it, opened false: beginning is re-entrant, and
// parallel callers (each holding the store lock in turn) open exactly
// one. Other sessions' open checkpoints are left as they are: each
// session has its own. It refuses while a run works on the tree itself
// (its changes would be recorded twice).
func (r *Repo) BeginTurn(session, message string, w Writes) (m *record.Meta, opened bool, err error) {
	if err := record.ValidSession(session); err != nil {
		return nil, false, fmt.Errorf("checkpoint begin: %w", err)
	}
	open, err := r.OpenCheckpoints()
	if err != nil {
		return nil, false, err
	}
	w = w.valid()
	for _, m := range open {
		if m.Session != session {
			continue
		}
		wasAny := m.AnyPath
		if !claim(m, w) {
			return m, false, nil
		}
		if err := r.claimBeside(open, m, w, m.AnyPath && !wasAny); err != nil {
			return nil, false, fmt.Errorf("checkpoint begin: %w", err)
		}
		return m, false, nil
	}
	tl, err := r.TryLockTree()
	if errors.Is(err, ErrTreeBusy) {
		who := "a run"
		if run := r.TreeRunning(); run != nil {
			who = fmt.Sprintf("run %s ($ %s)", run.ID, strings.Join(run.Command, " "))
		}
		return nil, false, fmt.Errorf("checkpoint begin: %w: %s; begin again once it has finished", ErrTreeBusy, who)
	}
	if err != nil {
		return nil, false, err
	}
	defer tl.Unlock()
	if m, err = r.newMeta(record.KindCheckpoint, record.ScopeTree); err != nil {
		return nil, false, err
	}
	m.Message, m.Session, m.State, m.Agent = message, session, record.StateOpen, w.Agent
	claim(m, w)
	m.Git = r.seeGit()
	if m.Targets, err = r.snapTargets(m.ID, r.withGitTarget(r.Targets)); err != nil {
		return nil, false, err
	}
	if err := r.snapOpen(m, open); err != nil {
		r.releasePayloads(m.ID)
		return nil, false, err
	}
	return m, true, nil
}

// snapOpen records the tree's state in the open checkpoint m's manifest
// (a scan, or what the tree's watcher says changed since the last begin:
// watch.go), marks the other sessions' open checkpoints (sessions.go),
// then writes m and keeps the watcher's token for its end.
func (r *Repo) snapOpen(m *record.Meta, open []*record.Meta) error {
	tree, token, watched, err := r.treeNow(m) // watch.go
	if err != nil {
		return err
	}
	if len(open) > 0 {
		k := record.Mark{At: m.CreatedAt, Tree: m.Manifest}
		for _, o := range open {
			k.Open = append(k.Open, o.ID)
			addClaim(&k, claimOf(o))
		}
		addClaim(&k, claimOf(m))
		m.Marks = []record.Mark{k}
		if err := r.markOthers(open, m, true, m.CreatedAt, m.Manifest); err != nil {
			return err
		}
	}
	if err := r.WriteMeta(m); err != nil {
		return err
	}
	if watched {
		// Without it the end reads the whole tree: no harm.
		_ = r.saveWatchToken(m.ID, token, m.Manifest, tree)
	}
	return nil
}

// EndCheckpoint closes session's open checkpoint into one undo step
// holding the paths its session changed since it began (all changed
// paths when no other session's turn overlapped it; see sessions.go),
// before and after, and the targets' states from its beginning; dropped
// is set when nothing changed (and no target was saved): then no record
// is left. Session "" closes the checkpoint begun without a session, or
// else the only one open ([ErrWhichCheckpoint] when several are). When
// none is to close, m is nil.
func (r *Repo) EndCheckpoint(session string) (m *record.Meta, dropped bool, err error) {
	open, err := r.OpenCheckpoints()
	if err != nil {
		return nil, false, err
	}
	if m, err = openOf(open, session); err != nil || m == nil {
		return nil, false, err
	}
	begin := m.Manifest
	if err := r.narrowCheckpoint(m); err != nil { // watch.go
		return nil, false, fmt.Errorf("checkpoint end: %w", err)
	}
	// The tree as this one leaves it, for the others' marks.
	var tree string
	if len(open) > 1 {
		changed, err := r.LoadManifest(m.After)
		if err == nil {
			tree, err = r.treeAfter(begin, changed)
		}
		if err != nil {
			return nil, false, fmt.Errorf("checkpoint end: %w", err)
		}
	}
	if err := r.attribute(m); err != nil {
		return nil, false, fmt.Errorf("checkpoint end: %w", err)
	}
	m.State = record.StateDone
	if dropped, err = r.closeRecord(m); err != nil {
		return nil, false, fmt.Errorf("checkpoint end: %w", err)
	}
	if tree != "" {
		if err := r.markOthers(open, m, false, time.Now().UTC(), tree); err != nil {
			return nil, false, fmt.Errorf("checkpoint end: %s closed; marking the other sessions' checkpoints: %w", m.ID, err)
		}
	}
	r.keepWatchBase(m.ID)
	return m, dropped, nil
}

// sessionSteps lists the closed checkpoints of session not undone, oldest
// first.
func (h *History) sessionSteps(session string) []*record.Meta {
	var out []*record.Meta
	for _, m := range h.All {
		if m.Kind == record.KindCheckpoint && m.Session == session && m.State == record.StateDone && !h.Undone[m.ID] {
			out = append(out, m)
		}
	}
	return out
}

// UndoSession reverts every step of session not yet undone, as one
// operation (one journal, one pre-undo record that `redo` reapplies): each
// path goes back to its state before the session's first step that
// changed it, each target to its state before the session's first step.
// A path changed since by someone else (after its last step of the
// session) is a conflict, as for [Repo.Undo]; edits to other paths stay.
// What a step shares with another session's turn is left, and returned,
// unless o.IncludeShared.
func (r *Repo) UndoSession(session string, o UndoOptions) (steps []*record.Meta, saved *record.Meta, left SharedLeft, err error) {
	force := o.Force
	if err := r.refuseOpen("undo"); err != nil {
		return nil, nil, left, err
	}
	h, err := r.History()
	if err != nil {
		return nil, nil, left, err
	}
	if steps = h.sessionSteps(session); len(steps) == 0 {
		return nil, nil, left, fmt.Errorf("session %q: %w: it has no checkpoint left that is not undone", session, ErrNothingToUndo)
	}
	parts := make([]*record.Meta, len(steps))
	for i, st := range steps {
		part, l, err := r.ownPart(st, o.IncludeShared)
		if err != nil {
			return nil, nil, left, fmt.Errorf("undo: %w", err)
		}
		parts[i] = part
		left.add(l)
	}
	left.Paths, left.Targets = sortedSet(left.Paths), sortedSet(left.Targets)
	target, after, err := r.mergeSteps(parts)
	if err != nil {
		return nil, nil, left, fmt.Errorf("undo: %w", err)
	}
	newest := steps[len(steps)-1]
	s := &record.Meta{ID: newest.ID, Kind: record.KindCheckpoint, Scope: record.ScopePaths, Session: session}
	if s.Manifest, err = r.record(target); err != nil {
		return nil, nil, left, err
	}
	if s.After, err = r.record(after); err != nil {
		return nil, nil, left, err
	}
	// Each target goes back to its state before the session's first step
	// that saved it.
	seen := map[string]bool{}
	for _, st := range parts {
		for _, t := range st.Targets {
			if !seen[t.Name] && t.Backend != gitBackendName {
				seen[t.Name] = true
				s.Targets = append(s.Targets, t)
			}
		}
	}
	// The git state goes back step by step, newest first: each step's
	// moves are undone from where it left the refs (the next one's start),
	// and HEAD and the index end as the first step found them.
	for i := len(parts) - 1; i >= 0; i-- {
		for _, t := range parts[i].Targets {
			if t.Backend == gitBackendName {
				s.Targets = append(s.Targets, t)
			}
		}
	}
	s.Git = mergeGit(steps)
	if err := r.checkGit("undo", s, true, force); err != nil {
		return nil, nil, left, err
	}
	rec, err := r.newMeta(record.KindPreUndo, record.ScopePaths)
	if err != nil {
		return nil, nil, left, err
	}
	rec.Undoes = newest.ID
	for _, st := range steps[:len(steps)-1] {
		rec.UndoesMore = append(rec.UndoesMore, st.ID)
	}
	if err := r.revert("undo", s, s.After, rec, force); err != nil {
		return nil, nil, left, r.nameTurns(err, steps...)
	}
	return steps, rec, left, nil
}

// mergeSteps makes one change of several paths records (oldest first):
// target holds each path as the first record that has it saved it, after
// as the last one left it.
func (r *Repo) mergeSteps(steps []*record.Meta) (target, after record.Manifest, err error) {
	type pick struct {
		e    record.Entry
		from int
	}
	before, last := map[string]pick{}, map[string]pick{}
	for i, st := range steps {
		b, err := r.LoadManifest(st.Manifest)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s: %w", st.ID, err)
		}
		a, err := r.LoadManifest(st.After)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s: %w", st.ID, err)
		}
		for _, e := range b {
			if _, ok := before[e.Path]; !ok {
				before[e.Path] = pick{e, i}
			}
		}
		for _, e := range a {
			last[e.Path] = pick{e, i}
		}
	}
	build := func(picks map[string]pick) record.Manifest {
		m := make(record.Manifest, 0, len(picks))
		for _, p := range picks {
			e := p.e
			// A hard link names another path of its own record; taken
			// from another record, that path may hold something else:
			// the entry then stands alone, with its own content.
			if e.Link != "" && picks[e.Link].from != p.from {
				e.Link = ""
			}
			m = append(m, e)
		}
		m.Sort()
		return m
	}
	return build(before), build(last), nil
}
