package snapshot

import (
	"fmt"
	"os"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot/record"
)

// seeGit reads, at the start of a step, the HEAD of the git dir outside
// the root the project depends on, if there is one. It returns nil for a
// plain repository (its git dir is in the snapshots) and when HEAD cannot
// be read: the verb has said already, naming the path, that the git dir
// is not covered (see [gitdirs.Repo.Uncovered]).
func (r *Repo) seeGit() []record.GitHead {
	g, err := gitdirs.Find(r.Root, os.Getenv)
	if err != nil || g == nil || !g.HeadUncovered(r.Root) {
		return nil
	}
	h, err := g.ReadHead()
	if err != nil {
		r.warn(fmt.Sprintf("HEAD of %s: %v: undo will not see whether this step moves it", g.GitDir, err))
		return nil
	}
	return []record.GitHead{{GitDir: g.GitDir, Before: h}}
}

// sawGit fills in, at the end of a step, what HEAD became. A HEAD that
// can no longer be read is left with no After: nothing is claimed.
func (r *Repo) sawGit(gs []record.GitHead) []record.GitHead {
	out := make([]record.GitHead, 0, len(gs))
	for _, g := range gs {
		if g.Validate() != nil {
			continue // a pending run's record is input too: a bad entry says nothing
		}
		g.After = nil
		if repo, err := gitdirs.Open(g.GitDir); err == nil {
			if h, err := repo.ReadHead(); err == nil {
				g.After = &h
			}
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// GitMovedError refuses an undo or a redo that would leave the files
// disagreeing with HEAD: the step moved HEAD in a git dir outside the
// root, HEAD is not back where the files are going, and no snapshot can
// put it there.
type GitMovedError struct {
	Op     string
	Step   string // the step's id
	GitDir string
	// Want is the HEAD the files will match; Now is HEAD's.
	Want, Now gitdirs.Head
	// Err, when set, is why HEAD could not be read (then Now is unknown).
	Err error
}

func (e *GitMovedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s refused: %s moved HEAD in %s (outside the root), which cannot be read now (%v): snapback cannot tell whether the files would match HEAD; %s --force to go on anyway",
			e.Op, e.Step, e.GitDir, e.Err, e.Op)
	}
	return fmt.Sprintf("%s refused: %s moved HEAD in %s, outside the root, where %s cannot put it back: HEAD is %s, the files would be as of %s; %s first, or %s --force to revert the files alone",
		e.Op, e.Step, e.GitDir, e.Op, e.Now, e.Want, putBack(e.Want, e.Now), e.Op)
}

// putBack says how a user moves HEAD to want (a git command), keeping the
// files as they are for snapback to revert.
func putBack(want, now gitdirs.Head) string {
	switch {
	case want.OID == "":
		return "put HEAD back"
	case want.Ref == now.Ref && want.Ref != "":
		return "git reset " + want.OID + " (HEAD and the index back, the files left for snapback)"
	case want.Ref == "":
		return "git checkout --detach " + want.OID
	}
	return "git checkout " + want.Ref + " (or git reset " + want.OID + ")"
}

// checkGit refuses, unless force, to move the tree to what step s
// recorded before it (toBefore, an undo) or after it (a redo) while a HEAD
// outside the root that s moved is elsewhere. Forced, it warns instead.
func (r *Repo) checkGit(op string, s *record.Meta, toBefore, force bool) error {
	if toBefore {
		if err := r.checkGitTargets(op, s.Targets, force); err != nil {
			return err
		}
	}
	for _, g := range s.Git {
		if !g.Moved() || coveredGit(s, g.GitDir) {
			continue // unmoved, or put back with the files
		}
		want := g.Before
		if !toBefore {
			want = *g.After
		}
		e := &GitMovedError{Op: op, Step: fmt.Sprintf("%s %s", s.Kind, s.ID), GitDir: g.GitDir, Want: want}
		repo, err := gitdirs.Open(g.GitDir)
		if err == nil {
			e.Now, err = repo.ReadHead()
		}
		e.Err = err
		if err == nil && e.Now == want {
			continue
		}
		if !force {
			return e
		}
		r.warn(fmt.Sprintf("%s --force: HEAD in %s stays %s, the files go back to %s", op, g.GitDir, e.Now, want))
	}
	return nil
}

// mergeGit is the HEAD moves of several steps (oldest first) as one:
// each git dir from its first step's before to its last step's after.
func mergeGit(steps []*record.Meta) []record.GitHead {
	var out []record.GitHead
	at := map[string]int{}
	for _, st := range steps {
		for _, g := range st.Git {
			if i, ok := at[g.GitDir]; ok {
				out[i].After = g.After
				continue
			}
			at[g.GitDir] = len(out)
			out = append(out, g)
		}
	}
	return out
}

// checkRedoGit is checkGit for a redo of the pre-undo p: the files go
// back to what the undone steps left (a session's: UndoesMore, oldest
// first, then Undoes), which HEAD must then match.
func (r *Repo) checkRedoGit(p *record.Meta, force bool) error {
	if err := r.checkGitTargets("redo", p.Targets, force); err != nil {
		return err
	}
	var steps []*record.Meta
	for _, id := range append(append([]string(nil), p.UndoesMore...), p.Undoes) {
		s, err := r.ReadMeta(id)
		if err != nil {
			return nil // gone (gc'd): the redo itself reports what it cannot do
		}
		steps = append(steps, s)
	}
	s := *steps[len(steps)-1]
	s.Git = mergeGit(steps)
	return r.checkGit("redo", &s, false, force)
}
