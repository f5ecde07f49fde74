package snapshot

import "fmt"

// BeginRun records the state of the tree before a command runs in copy
// mode: a tree snapshot of kind run, state running. If snapback dies while
// the command runs, this snapshot is what `undo` or `restore` goes back to.
func (r *Repo) BeginRun(command []string, mode string) (*Meta, error) {
	m, err := r.Snap(KindRun, "")
	if err != nil {
		return nil, err
	}
	m.Command, m.Mode, m.State = command, mode, "running"
	if err := r.WriteMeta(m); err != nil {
		return nil, err
	}
	return m, nil
}

// FinishRun narrows a finished run's snapshot to the paths the command
// changed: the before state of those paths, and (as After) the state the
// command left them in. `undo` then reverts exactly those paths, keeps
// later edits to other files, and sees later edits to the same paths as
// conflicts.
func (r *Repo) FinishRun(m *Meta, exitStatus int) error {
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	after, err := r.ScanTree(true)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	changed := map[string]bool{}
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j >= len(after) || i < len(before) && before[i].Path < after[j].Path:
			changed[before[i].Path] = true
			i++
		case i >= len(before) || after[j].Path < before[i].Path:
			changed[after[j].Path] = true
			j++
		default:
			if !before[i].SameContent(&after[j]) || !before[i].SameMeta(&after[j]) {
				changed[before[i].Path] = true
			}
			i++
			j++
		}
	}
	b, a := Subset(before, after, changed)
	if m.Manifest, err = r.record(b); err != nil {
		return err
	}
	if m.After, err = r.record(a); err != nil {
		return err
	}
	if err := r.Flush(); err != nil {
		return err
	}
	m.Scope = ScopePaths
	m.ExitStatus = &exitStatus
	m.State = "done"
	m.Files, m.Bytes = counts(a)
	return r.WriteMeta(m)
}

// Subset cuts two states of the tree down to the same set of paths (those
// in keep, plus the first names of hard links they share), with absent
// entries where a state lacks a path.
func Subset(x, y Manifest, keep map[string]bool) (Manifest, Manifest) {
	for grew := true; grew; {
		grew = false
		for _, m := range []Manifest{x, y} {
			for i := range m {
				if keep[m[i].Path] && m[i].Link != "" && !keep[m[i].Link] {
					keep[m[i].Link] = true
					grew = true
				}
			}
		}
	}
	pick := func(m Manifest) Manifest {
		out := Manifest{}
		for p := range keep {
			if e := m.Find(p); e != nil {
				out = append(out, *e)
			} else {
				out = append(out, Entry{Path: p, Type: Absent})
			}
		}
		out.Sort()
		return out
	}
	return pick(x), pick(y)
}
