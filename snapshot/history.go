package snapshot

import (
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot/record"
)

// History is the snapshot list with undo state derived from it: which
// snapshots are undone, and which undos redo would reapply (newest last).
// It is derived, never stored, so it cannot disagree with the records.
type History struct {
	All    []*record.Meta // oldest first
	Undone map[string]bool
	Redo   []*record.Meta // pre-undo records, the one redo takes is last
}

// History reads the records and derives undo state: a pre-undo undoes its
// target, a pre-redo reapplies the latest undo, and any new step (a snap,
// a run or checkpoint once done) ends what redo can reach (as in an
// editor). A run or checkpoint not done yet does not: it may end having
// changed nothing (a discarded run, a checkpoint's turn that wrote
// nothing leave no record), and until it ends, gc keeps what redo needs.
func (r *Reader) History() (*History, error) {
	all, err := r.List()
	if err != nil {
		return nil, err
	}
	return historyOf(all), nil
}

// historyOf derives the undo state of all, the records oldest first.
func historyOf(all []*record.Meta) *History {
	h := &History{All: all, Undone: map[string]bool{}}
	byID := map[string]*record.Meta{}
	for _, m := range all {
		byID[m.ID] = m
		switch m.Kind {
		case record.KindPreUndo:
			if len(m.UndoesPaths) > 0 { // part of a step: the step is not undone
				h.Redo = append(h.Redo, m)
				continue
			}
			h.Undone[m.Undoes] = true
			for _, id := range m.UndoesMore {
				h.Undone[id] = true
			}
			h.Redo = append(h.Redo, m)
		case record.KindPreRedo:
			if p := byID[m.Redoes]; p != nil && len(p.UndoesPaths) == 0 {
				delete(h.Undone, p.Undoes)
				for _, id := range p.UndoesMore {
					delete(h.Undone, id)
				}
			}
			if n := len(h.Redo); n > 0 && h.Redo[n-1].ID == m.Redoes {
				h.Redo = h.Redo[:n-1]
			}
		default:
			if !m.InProgress() && m.State != record.StatePending {
				h.Redo = nil
			}
		}
	}
	return h
}

// UndoOptions are how an undo treats what is not plainly its step's.
type UndoOptions struct {
	// Force overwrites paths changed since (they are saved first).
	Force bool
	// IncludeShared takes the paths and targets a checkpoint shares with
	// another session's turn too (sessions.go), which undo otherwise
	// leaves as they are.
	IncludeShared bool
}

// Undo is [Repo.UndoWith] without its shared paths.
func (r *Repo) Undo(ref string, force bool) (undone, saved *record.Meta, err error) {
	undone, saved, _, err = r.UndoWith(ref, UndoOptions{Force: force})
	return undone, saved, err
}

// UndoWith reverts the newest undoable snapshot not yet undone, or ref.
// It returns the reverted snapshot, the pre-undo record that saved what
// the undo replaced, and what it left because another session's turn
// shares it.
func (r *Repo) UndoWith(ref string, o UndoOptions) (undone, saved *record.Meta, left SharedLeft, err error) {
	force := o.Force
	if err := r.refuseOpen("undo"); err != nil {
		return nil, nil, left, err
	}
	h, err := r.History()
	if err != nil {
		return nil, nil, left, err
	}
	var s *record.Meta
	if ref != "" {
		if s, err = r.Resolve(ref); err != nil {
			return nil, nil, left, err
		}
		if !s.Kind.Undoable() {
			return nil, nil, left, fmt.Errorf("snapshot %s is a %s record; undo takes a snap, run or pre-restore (use `restore %s` to go back to it)", s.ID, s.Kind, s.ID)
		}
	} else {
		if !force {
			// A pending run's changes are not in the tree yet: a plain
			// undo would silently revert an older, unrelated run.
			ps, err := r.PendingRuns()
			if err != nil {
				return nil, nil, left, err
			}
			if len(ps) > 0 {
				return nil, nil, left, &PendingError{Runs: ps}
			}
		}
		for i := len(h.All) - 1; i >= 0; i-- {
			if m := h.All[i]; m.Kind.Undoable() && !h.Undone[m.ID] && !m.InProgress() {
				s = m
				break
			}
		}
		if s == nil {
			return nil, nil, left, ErrNothingToUndo
		}
	}
	part, left, err := r.ownPart(s, o.IncludeShared)
	if err != nil {
		return nil, nil, left, fmt.Errorf("undo: %w", err)
	}
	if err := r.checkGit("undo", part, true, force); err != nil {
		return nil, nil, left, err
	}
	rec, err := r.newMeta(record.KindPreUndo, s.Scope)
	if err != nil {
		return nil, nil, left, err
	}
	rec.Undoes = s.ID
	if err := r.revert("undo", part, part.After, rec, force); err != nil {
		return nil, nil, left, r.nameTurns(err, s)
	}
	return s, rec, left, nil
}

// UndoPaths reverts the paths of step ref at or below each of only
// (relative to the root, slash-separated; "" is all of it), and nothing
// else: not its other paths, not its targets. The step stays in the
// history, not undone: a later undo takes the rest of it (the paths put
// back already are no conflict), and redo reapplies this part. A path
// changed since by someone else is a conflict, as for [Repo.Undo].
func (r *Repo) UndoPaths(ref string, only []string, force bool) (undone, saved *record.Meta, err error) {
	if err := r.refuseOpen("undo"); err != nil {
		return nil, nil, err
	}
	s, err := r.Resolve(ref)
	if err != nil {
		return nil, nil, err
	}
	if !s.Kind.Undoable() {
		return nil, nil, fmt.Errorf("snapshot %s is a %s record; undo takes a snap, run or pre-restore", s.ID, s.Kind)
	}
	h, err := r.History()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case h.Undone[s.ID]:
		return nil, nil, fmt.Errorf("undo %s -- PATH: %w: %s is undone already (redo puts it back)", s.ID, ErrNothingToUndo, s.ID)
	case s.InProgress():
		return nil, nil, fmt.Errorf("undo %s -- PATH: %s is %s: its changes are not known yet", s.ID, s.ID, s.State)
	}
	if s.Scope != record.ScopePaths || s.After == "" {
		return nil, nil, fmt.Errorf("undo %s -- PATH: %s is a snapshot of the whole tree, not a step of changed paths (`restore` takes a whole snapshot)", s.ID, s.ID)
	}
	before, err := r.LoadManifest(s.Manifest)
	if err != nil {
		return nil, nil, fmt.Errorf("undo: %w", err)
	}
	after, err := r.LoadManifest(s.After)
	if err != nil {
		return nil, nil, fmt.Errorf("undo: %w", err)
	}
	keep, err := pickStepPaths(s.ID, before, after, only)
	if err != nil {
		return nil, nil, err
	}
	b, a := Subset(before, after, keep)
	part := &record.Meta{ID: s.ID, Kind: s.Kind, Scope: record.ScopePaths}
	if part.Manifest, err = r.record(b); err != nil {
		return nil, nil, err
	}
	if part.After, err = r.record(a); err != nil {
		return nil, nil, err
	}
	rec, err := r.newMeta(record.KindPreUndo, record.ScopePaths)
	if err != nil {
		return nil, nil, err
	}
	rec.Undoes, rec.UndoesPaths = s.ID, only
	if err := r.revert("undo", part, part.After, rec, force); err != nil {
		return nil, nil, err
	}
	return s, rec, nil
}

// pickStepPaths picks the paths of a step (its before and after states) at
// or below each of only, each of which must name one, and the
// directories above them the step removed (put back with them).
func pickStepPaths(id string, before, after record.Manifest, only []string) (map[string]bool, error) {
	keep := map[string]bool{}
	for _, o := range only {
		n := len(keep)
		found := false
		for _, m := range []record.Manifest{before, after} {
			for i := range m {
				if record.Under(m[i].Path, o) {
					keep[m[i].Path], found = true, true
				}
			}
		}
		if !found && len(keep) == n {
			return nil, fmt.Errorf("undo %s: %w: the step did not change %q", id, ErrNotFound, o)
		}
	}
	for p := range keep {
		for q := record.Parent(p); q != ""; q = record.Parent(q) {
			if b := before.Find(q); b != nil && b.Type == record.Dir {
				if a := after.Find(q); a == nil || a.Type != record.Dir {
					keep[q] = true
				}
			}
		}
	}
	return keep, nil
}

// PendingError refuses a plain undo while runs are pending.
type PendingError struct{ Runs []*ViewRun }

func (e *PendingError) Error() string {
	var ids, what []string
	for _, p := range e.Runs {
		ids = append(ids, p.ID)
		what = append(what, fmt.Sprintf("%s ($ %s, %s)", p.ID, strings.Join(p.Command, " "), p.State))
	}
	verb := "run %s is"
	if len(ids) > 1 {
		verb = "runs %s are"
	}
	return fmt.Sprintf("undo refused: "+verb+" pending, not in the tree, so undo would revert an older run instead; "+
		"snapback commit %s or snapback discard %s first, or undo --force to undo the older run anyway",
		strings.Join(what, ", "), ids[len(ids)-1], ids[len(ids)-1])
}

// Redo reapplies the most recent undo not yet redone.
func (r *Repo) Redo(force bool) (redone, saved *record.Meta, err error) {
	if err := r.refuseOpen("redo"); err != nil {
		return nil, nil, err
	}
	h, err := r.History()
	if err != nil {
		return nil, nil, err
	}
	if len(h.Redo) == 0 {
		return nil, nil, ErrNothingToRedo
	}
	p := h.Redo[len(h.Redo)-1]
	if err := r.checkRedoGit(p, force); err != nil {
		return nil, nil, err
	}
	rec, err := r.newMeta(record.KindPreRedo, p.Scope)
	if err != nil {
		return nil, nil, err
	}
	rec.Redoes = p.ID
	if err := r.revert("redo", p, p.After, rec, force); err != nil {
		return nil, nil, err
	}
	return p, rec, nil
}

// Restore puts back the state recorded by ref (all of the tree for a tree
// snapshot, its paths for a paths one), saving the current state first in
// a pre-restore snapshot that `undo` reverts.
func (r *Repo) Restore(ref string) (restored, saved *record.Meta, err error) {
	if err := r.refuseOpen("restore"); err != nil {
		return nil, nil, err
	}
	s, err := r.Resolve(ref)
	if err != nil {
		return nil, nil, err
	}
	if err := r.checkGitTargets("restore", s.Targets, true); err != nil {
		return nil, nil, err
	}
	rec, err := r.newMeta(record.KindPreRestore, s.Scope)
	if err != nil {
		return nil, nil, err
	}
	if err := r.revert("restore", s, "", rec, true); err != nil {
		return nil, nil, err
	}
	return s, rec, nil
}

// revert moves the tree and the targets to the state s recorded, first
// saving the present state of what it governs in rec. afterID, when set,
// is the state those paths should be in now; a path that differs was
// edited by someone else and is a conflict unless force is set.
func (r *Repo) revert(op string, s *record.Meta, afterID string, rec *record.Meta, force bool) error {
	to, scope := s.Manifest, s.Scope
	target, err := r.LoadManifest(to)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	cur, err := r.current(target, scope, false) // saved by the transition, linked where it can
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if afterID != "" && scope == record.ScopePaths && !force {
		after, err := r.LoadManifest(afterID)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if c := conflicts(after, target, cur, r.sameGitIndex); len(c) > 0 {
			return &ConflictError{Op: op, Paths: c}
		}
	}
	rec.Files, rec.Bytes = counts(cur)
	if rec.Manifest, err = r.record(cur); err != nil {
		return err
	}
	rec.After = to
	// The targets' present states are saved first, so that the opposite
	// operation can bring them back.
	ts, err := r.stateTargets(s.Targets)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if rec.Targets, err = r.snapTargets(rec.ID, ts); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	// The git state saved just now goes back, in the opposite operation,
	// by the moves this one makes.
	plan, _, err := r.planGit(op, s.Targets)
	if err == nil {
		err = r.sealGitAs(rec.Targets, plan)
	}
	if err != nil {
		r.releasePayloads(rec.ID)
		return fmt.Errorf("%s: %w", op, err)
	}
	j := &journal{Op: op, OpID: rec.ID, Scope: scope, Record: rec, Targets: s.Targets}
	if err := r.transitionFrom(j, target, cur); err != nil {
		if !r.HasJournal() {
			r.releasePayloads(rec.ID)
		}
		return err
	}
	return nil
}

// conflicts lists the paths of cur (the tree now) that differ in type,
// mode, content or link target from after (the state the guarded change
// left them in) before the operation moves them to target, and are not
// already as target has them; times are no part of it (a tool that
// rewrites a file with the same bytes changed nothing the user sees). A path after does not list is expected absent
// below what after removed, else as target records it; a path neither
// lists is expected absent below what target removes, and is not touched
// otherwise. same, when set, may still find two files of different contents the
// same (see sameGitIndex).
func conflicts(after, target, cur record.Manifest, same func(want, now *record.Entry) bool) []string {
	var out []string
	for i := range cur {
		c := &cur[i]
		a := after.Find(c.Path)
		switch {
		case a != nil:
		case belowRemoved(after, c.Path):
			a = &record.Entry{Path: c.Path, Type: record.Absent} // the change removed what held it
		case target.Find(c.Path) != nil:
			a = target.Find(c.Path) // recorded, but the change left it as it was (another name of a hard link)
		case belowRemoved(target, c.Path):
			a = &record.Entry{Path: c.Path, Type: record.Absent} // below what the operation removes: someone else made it
		default:
			continue // the operation does not touch it
		}
		if !sameState(a, c) && (same == nil || !same(a, c)) && !alreadyThere(target, c, same) {
			out = append(out, c.Path)
		}
	}
	return out
}

// alreadyThere reports whether c is already as the operation leaves it
// (the person put it back by hand): writing it again loses nothing, so it
// is no conflict.
func alreadyThere(target record.Manifest, c *record.Entry, same func(want, now *record.Entry) bool) bool {
	t := target.Find(c.Path)
	if t == nil {
		if !belowRemoved(target, c.Path) {
			return false
		}
		t = &record.Entry{Path: c.Path, Type: record.Absent}
	}
	return sameState(t, c) || same != nil && same(t, c)
}

// sameState reports whether a path is as recorded in what a user sees:
// type, mode (a symbolic link has none), content and link target.
func sameState(a, c *record.Entry) bool {
	switch {
	case a.Type != c.Type:
		return false
	case a.Type == record.Absent:
		return true
	case a.Type != record.Symlink && a.Mode != c.Mode:
		return false
	case a.Type == record.File:
		return a.Object == c.Object
	case a.Type == record.Symlink:
		return a.Target == c.Target
	}
	return true
}

// sameGitIndex finds a git index that differs from the recorded one only
// in what git caches (stat data, extensions) the same: it stages the same
// entries.
func (r *Repo) sameGitIndex(a, c *record.Entry) bool {
	return a.Type == record.File && c.Type == record.File && a.Mode == c.Mode && isGitIndex(c.Path) && r.sameIndexContent(c.Path, a.Object)
}

// belowRemoved reports whether an ancestor of p is, in m, absent or not a
// directory.
func belowRemoved(m record.Manifest, p string) bool {
	for q := record.Parent(p); ; q = record.Parent(q) {
		if e := m.Find(q); e != nil && e.Type != record.Dir {
			return true
		}
		if q == "" {
			return false
		}
	}
}
