package snapshot

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapback/snapback/snapshot/record"
)

// UnknownIDError: ref names no snapshot (Run false) or no pending run.
type UnknownIDError struct {
	Ref string
	Run bool
}

func (e *UnknownIDError) Error() string {
	return fmt.Sprintf("%s %q: %v", map[bool]string{false: "snapshot", true: "run"}[e.Run], e.Ref, e.Unwrap())
}

func (e *UnknownIDError) Unwrap() error {
	if e.Run {
		return ErrNoPending
	}
	return ErrNotFound
}

// AmbiguousIDError: ref names several snapshots or runs.
type AmbiguousIDError struct {
	Ref        string
	Candidates []string // "ID (kind)", oldest first
}

// maxCandidates bounds the ids an ambiguity error lists.
const maxCandidates = 8

func (e *AmbiguousIDError) Error() string {
	c := e.Candidates
	more := ""
	if len(c) > maxCandidates {
		more = fmt.Sprintf(" and %d more", len(c)-maxCandidates)
		c = c[:maxCandidates]
	}
	return fmt.Sprintf("id %q is ambiguous: it names %s%s", e.Ref, strings.Join(c, ", "), more)
}

// Lookup finds what ref names among the snapshots and the pending runs
// alike, so that every verb reads an id the same way: exactly one of
// the results is set. A verb that takes only one kind says so (Resolve,
// FindViewRun) rather than finding another match of the other kind.
func (r *Reader) Lookup(ref string) (*record.Meta, *ViewRun, error) {
	if record.ValidID(ref) {
		// A whole id names only itself: read it without listing.
		m, err := r.ReadMeta(ref)
		if err == nil {
			return m, nil, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, nil, err
		}
	}
	all, err := r.List()
	if err != nil {
		return nil, nil, err
	}
	runs, err := r.PendingRuns()
	if err != nil {
		return nil, nil, err
	}
	var metas []*record.Meta
	var pending []*ViewRun
	var cands []string
	seen := map[string]bool{}
	for _, m := range all {
		if record.IDNames(m.ID, ref) {
			metas = append(metas, m)
			cands = append(cands, fmt.Sprintf("%s (%s)", m.ID, m.Kind))
			seen[m.ID] = true
		}
	}
	for _, p := range runs {
		if record.IDNames(p.ID, ref) && !seen[p.ID] {
			pending = append(pending, p)
			cands = append(cands, fmt.Sprintf("%s (pending run)", p.ID))
		}
	}
	switch {
	case len(cands) == 0:
		return nil, nil, &UnknownIDError{Ref: ref}
	case len(cands) > 1:
		return nil, nil, &AmbiguousIDError{Ref: ref, Candidates: cands}
	case len(metas) == 1:
		return metas[0], nil, nil
	}
	return nil, pending[0], nil
}

// Resolve finds the snapshot ref names (see record.IDNames).
func (r *Reader) Resolve(ref string) (*record.Meta, error) {
	m, p, err := r.Lookup(ref)
	if err != nil {
		return nil, err
	}
	if p != nil {
		return nil, fmt.Errorf("snapshot %q: %w: it names run %s, still pending (snapback commit or discard it first)", ref, ErrNotFound, p.ID)
	}
	return m, nil
}

// FindViewRun finds the pending run ref names (see record.IDNames); "" means
// the newest.
func (r *Reader) FindViewRun(ref string) (*ViewRun, error) {
	if ref == "" {
		all, err := r.PendingRuns()
		if err != nil {
			return nil, err
		}
		if len(all) == 0 {
			return nil, ErrNoPending
		}
		return all[len(all)-1], nil
	}
	m, p, err := r.Lookup(ref)
	var unknown *UnknownIDError
	if errors.As(err, &unknown) {
		return nil, &UnknownIDError{Ref: ref, Run: true}
	}
	if err != nil {
		return nil, err
	}
	if m != nil {
		return nil, fmt.Errorf("run %q: %w: it names snapshot %s (a %s)", ref, ErrNoPending, m.ID, m.Kind)
	}
	return p, nil
}
