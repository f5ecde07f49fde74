package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Sessions side by side: each session has its own open checkpoint, and
// turns of different sessions may overlap in time (two agents in one
// project). Each checkpoint narrows to the paths changed while it was
// open, whoever changed them; its step then keeps only what its session
// changed, by what is known exactly:
//
//   - Claimed: the paths the session's edit tools named before writing
//     (a hook's PreToolUse payload), each with the directories above it;
//   - AnyPath: the session may have written any path (a shell command, or
//     a checkpoint begun from the command line, whose writer is unknown).
//
// A changed path's candidates are the sessions, among the checkpoint's
// and those whose checkpoints overlapped it, that claimed it or may have
// written any path. With no overlap the path is the session's, as it
// always was. With overlap: one candidate, the session itself, and it is
// the session's; one candidate, another session, and it is left out of
// this step (that session's step holds it); none or several, and it is
// shared: kept in the step, listed in Shared, and left alone by undo and
// redo unless --include-shared. A directory whose only change is its
// times (a child came or went) follows the paths below it and is never
// shared. A target (a database) cannot be told apart by path: it is the
// session's when the session is the only candidate for any path, else
// shared (SharedTargets).
//
// Claims are made before the tool writes, and every checkpoint open
// during this one is looked at when it closes: what another session's
// tools can have written by then is claimed by then.

// Writes is what a session says it is about to write, as its turn's
// checkpoint is begun or found open.
type Writes struct {
	// Paths are the paths its edit tools will write, relative to the
	// root and slash-separated.
	Paths []string
	// Any: it may write any path (a shell command).
	Any bool
}

// maxClaims bounds the paths a checkpoint claims: past it, its session is
// taken to have written any path (a step's record is read by every list).
const maxClaims = 4096

// ErrWhichCheckpoint refuses an end without a session while checkpoints
// of several sessions are open.
var ErrWhichCheckpoint = errors.New("several checkpoints are open")

// validateSessions checks what a record says of its session's writes.
func (m *Meta) validateSessions() error {
	if m.Kind != KindCheckpoint {
		if len(m.Claimed)+len(m.Overlaps)+len(m.Shared)+len(m.SharedTargets) > 0 || m.AnyPath || m.EndedAt != nil {
			return fmt.Errorf("kind %s with a session's writes", m.Kind)
		}
		return nil
	}
	if len(m.Claimed) > maxClaims {
		return fmt.Errorf("over %d claimed paths", maxClaims)
	}
	for _, p := range append(append([]string(nil), m.Claimed...), m.Shared...) {
		if !ValidPath(p) {
			return fmt.Errorf("bad claimed or shared path %q", p)
		}
	}
	for _, id := range m.Overlaps {
		if !ValidID(id) || id == m.ID {
			return fmt.Errorf("bad overlaps reference %q", id)
		}
	}
	if m.State == StateOpen && (m.EndedAt != nil || len(m.Overlaps)+len(m.Shared)+len(m.SharedTargets) > 0) {
		return fmt.Errorf("open checkpoint with an end")
	}
	return nil
}

// claim adds w to m's writes and reports whether anything was new.
func (m *Meta) claim(w Writes) (bool, error) {
	grew := false
	if w.Any && !m.AnyPath {
		m.AnyPath, grew = true, true
	}
	for _, p := range w.Paths {
		if !ValidPath(p) {
			return false, fmt.Errorf("claimed path %q: not a clean path relative to the root", p)
		}
		i, found := slices.BinarySearch(m.Claimed, p)
		if found {
			continue
		}
		if len(m.Claimed) >= maxClaims {
			m.AnyPath, grew = true, true
			continue
		}
		m.Claimed, grew = slices.Insert(m.Claimed, i, p), true
	}
	return grew, nil
}

// OpenCheckpoints lists the open checkpoints, oldest first (at most one
// per session). A damaged record is as for [Reader.OpenCheckpoint].
func (r *Reader) OpenCheckpoints() ([]*Meta, error) {
	all, damaged, err := r.records()
	if err != nil {
		return nil, err
	}
	if len(damaged) > 0 && !r.SkipDamaged {
		return nil, damagedError(damaged)
	}
	var out []*Meta
	for _, m := range all {
		if m.Kind == KindCheckpoint && m.State == StateOpen {
			out = append(out, m)
		}
	}
	return out, nil
}

// openOf picks from open the checkpoint of session; "" picks the one
// begun without a session, or else the only one open (nil when none is).
func openOf(open []*Meta, session string) (*Meta, error) {
	for _, m := range open {
		if m.Session == session {
			return m, nil
		}
	}
	if session != "" || len(open) == 0 {
		return nil, nil
	}
	if len(open) == 1 {
		return open[0], nil
	}
	var names []string
	for _, m := range open {
		names = append(names, m.Session)
	}
	return nil, fmt.Errorf("%w (sessions %s): name the session", ErrWhichCheckpoint, strings.Join(names, ", "))
}

// overlapping lists the checkpoints of other sessions open at some time
// between m's beginning and end: open now, or closed after m began.
func (r *Repo) overlapping(m *Meta, end time.Time) ([]*Meta, error) {
	all, _, err := r.records() // a damaged record holds no claim anyone can read
	if err != nil {
		return nil, err
	}
	var out []*Meta
	for _, o := range all {
		if o.Kind != KindCheckpoint || o.ID == m.ID || o.Session == m.Session || !o.CreatedAt.Before(end) {
			continue
		}
		if o.State == StateOpen || o.EndedAt != nil && o.EndedAt.After(m.CreatedAt) {
			out = append(out, o)
		}
	}
	return out, nil
}

// claimSet is a session's claims with the directories above them: a
// directory an edit tool made to write a file below it is its too.
func claimSet(claimed []string) map[string]bool {
	set := map[string]bool{}
	for _, p := range claimed {
		for q := p; !set[q]; q = Parent(q) {
			set[q] = true
			if q == "" {
				break
			}
		}
	}
	return set
}

// attribute cuts m, narrowed to the paths changed while it was open, to
// what its session changed, and lists what it shares with the sessions
// whose checkpoints overlapped it (see the top of this file).
func (r *Repo) attribute(m *Meta, end time.Time) error {
	others, err := r.overlapping(m, end)
	if err != nil || len(others) == 0 {
		return err
	}
	for _, o := range others {
		m.Overlaps = append(m.Overlaps, o.ID)
	}
	type writer struct {
		session string
		any     bool
		claims  map[string]bool
	}
	writers := []writer{{m.Session, m.AnyPath, claimSet(m.Claimed)}}
	for _, o := range others {
		writers = append(writers, writer{o.Session, o.AnyPath, claimSet(o.Claimed)})
	}
	// candidates names the sessions that may have written p; own is
	// whether m's is one of them.
	candidates := func(p string) (n int, own bool) {
		seen := map[string]bool{}
		for _, w := range writers {
			if (w.any || w.claims[p]) && !seen[w.session] {
				seen[w.session] = true
				own = own || w.session == m.Session
			}
		}
		return len(seen), own
	}
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return err
	}
	after, err := r.LoadManifest(m.After)
	if err != nil {
		return err
	}
	keep, shared, churn := map[string]bool{}, []string{}, []string{}
	for i := range after {
		a := &after[i]
		b := before.Find(a.Path)
		if b != nil && b.Type == Dir && a.Type == Dir && !b.Changed(a) {
			churn = append(churn, a.Path)
			continue
		}
		switch n, own := candidates(a.Path); {
		case n == 1 && own:
			keep[a.Path] = true
		case n == 1:
			// Another session's alone: its step holds it.
		default:
			keep[a.Path] = true
			shared = append(shared, a.Path)
		}
	}
	for _, d := range churn {
		for p := range keep {
			if Under(p, d) {
				keep[d] = true
				break
			}
		}
	}
	// A target is written by a shell command or a tool, never an edit
	// tool's path: its candidates are the sessions that may write any.
	anyOthers := false
	for _, o := range others {
		anyOthers = anyOthers || o.AnyPath
	}
	if !m.AnyPath || anyOthers {
		for _, t := range m.Targets {
			m.SharedTargets = append(m.SharedTargets, t.Name)
		}
	}
	if len(keep) == len(after) && len(shared) == 0 {
		return nil
	}
	sort.Strings(shared)
	m.Shared = shared
	return r.recordNarrowed(m, before, after, keep)
}

// SharedLeft is what an undo or redo left of a step because it is shared
// with another session's turn: paths and targets' names.
type SharedLeft struct {
	Paths   []string
	Targets []string
}

func (s *SharedLeft) add(o SharedLeft) {
	s.Paths = append(s.Paths, o.Paths...)
	s.Targets = append(s.Targets, o.Targets...)
}

// ownPart is s without what it shares with another session's turn (the
// paths and targets undo leaves), or s itself when it shares nothing or
// all is taken.
func (r *Repo) ownPart(s *Meta, includeShared bool) (*Meta, SharedLeft, error) {
	if includeShared || len(s.Shared)+len(s.SharedTargets) == 0 {
		return s, SharedLeft{}, nil
	}
	part := *s
	part.Targets = nil
	for _, t := range s.Targets {
		if !slices.Contains(s.SharedTargets, t.Name) {
			part.Targets = append(part.Targets, t)
		}
	}
	left := SharedLeft{Paths: s.Shared, Targets: s.SharedTargets}
	if len(s.Shared) == 0 {
		return &part, left, nil
	}
	before, err := r.LoadManifest(s.Manifest)
	if err != nil {
		return nil, left, err
	}
	after, err := r.LoadManifest(s.After)
	if err != nil {
		return nil, left, err
	}
	keep := map[string]bool{}
	for i := range after {
		if _, found := slices.BinarySearch(s.Shared, after[i].Path); !found {
			keep[after[i].Path] = true
		}
	}
	b, a := Subset(before, after, keep)
	if part.Manifest, err = r.record(b); err != nil {
		return nil, left, err
	}
	if part.After, err = r.record(a); err != nil {
		return nil, left, err
	}
	return &part, left, nil
}

// sortedSet sorts s and drops repeats.
func sortedSet(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}
