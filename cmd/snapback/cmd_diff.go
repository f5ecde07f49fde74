package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

type diffOptions struct {
	stat, patch bool
}

func newDiffCmd(g *globals) *cobra.Command {
	var o diffOptions
	c := &cobra.Command{
		Use:   "diff [ID]",
		Short: "Show what a pending run changes, or what changed in the tree since a snapshot",
		Long: `Show what a pending run changes, or what changed in the tree since a
snapshot. ID names either (see Ids in the README). Without ID: the newest
pending run; when none is pending, the snapshot undo would revert, else
the newest snapshot.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ref := ""
			if len(args) == 1 {
				ref = args[0]
			}
			return runDiff(g, ref, o)
		},
	}
	c.Flags().BoolVar(&o.stat, "stat", false, "a summary of lines added and removed per file")
	c.Flags().BoolVarP(&o.patch, "patch", "p", false, "a patch in git's format (git apply takes it)")
	return c
}

// textLimit: larger files are summarized, not diffed line by line.
const textLimit = 4 << 20

type diffChangeJSON struct {
	jsonPath
	Op      string `json:"op"`
	Type    string `json:"type"`
	Added   *int   `json:"added,omitempty"`
	Removed *int   `json:"removed,omitempty"`
}

func runDiff(g *globals, ref string, o diffOptions) error {
	repo, _, err := g.open(false, "diff")
	if err != nil {
		return err
	}
	defer repo.Close()
	// A pending run's changes come first: right after `run --then review`,
	// "what did it change?" means the run.
	var changes []snapshot.Change
	var targets []snapshot.TargetState
	// Paths the run wrote that no diff of it shows, named apart: ignored
	// ones (written through) and excluded ones (moved by its commit).
	var through, excluded []string
	base := ""
	d := &differ{repo: repo}
	// An id is read as every verb reads it (snapshot.Repo.Lookup): diff
	// ID shows the pending run or the snapshot that undo ID would take.
	var p *snapshot.ViewRun
	var m *snapshot.Meta
	if ref == "" {
		if p, err = repo.FindPending(""); err != nil && !errors.Is(err, snapshot.ErrNoPending) {
			return err
		}
	} else if m, p, err = repo.Lookup(ref); err != nil {
		return err
	}
	if p != nil {
		targets = p.Targets
		target, cur, err := repo.PendingChanges(p)
		if err != nil {
			return err
		}
		changes, base = snapshot.DiffManifests(cur, target), p.ID
		d.upper = repo.UpperDir(p.ID)
		through = p.WroteThrough
		if excluded, err = repo.ExcludedIn(p, nil); err != nil {
			return err
		}
	} else {
		if m == nil {
			if m, err = repo.DefaultDiffBase(); err != nil {
				return err
			}
		}
		if changes, err = repo.Diff(m); err != nil {
			return err
		}
		base, targets = m.ID, m.Targets
		through, excluded = m.WroteThrough, m.Excluded
	}
	if g.json {
		out := struct {
			Snapshot string           `json:"snapshot"`
			Changes  []diffChangeJSON `json:"changes"`
			// Targets: the states outside the tree the snapshot holds
			// (their contents are not compared).
			Targets []targetDiffJSON `json:"targets"`
			// WroteThrough: ignored paths the run wrote, in the tree at
			// once and kept by discard and undo; Excluded: excluded ones,
			// moved into the tree by a commit (dropped by a discard), kept
			// by undo.
			WroteThrough []string `json:"wrote_through"`
			Excluded     []string `json:"excluded"`
		}{Snapshot: base, Changes: []diffChangeJSON{}, Targets: []targetDiffJSON{},
			WroteThrough: append([]string{}, through...), Excluded: append([]string{}, excluded...)}
		for _, t := range targets {
			out.Targets = append(out.Targets, targetDiffJSON{TargetState: t, State: "saved"})
		}
		for _, c := range changes {
			j := diffChangeJSON{jsonPath: mkJSONPath(c.Path), Op: c.Op, Type: entryType(c)}
			if o.stat {
				if a, r, ok := d.lineCounts(c); ok {
					j.Added, j.Removed = &a, &r
				}
			}
			out.Changes = append(out.Changes, j)
		}
		return g.printJSON(out)
	}
	switch {
	case o.patch:
		// git's format, which `git apply` takes; what a patch cannot say
		// (a fifo) is named on stderr rather than dropped unseen.
		for _, c := range changes {
			fmt.Fprint(g.stdout, d.gitPatch(c))
			for _, e := range []*snapshot.Entry{c.Old, c.New} {
				if e != nil && e.Type == snapshot.Fifo {
					g.warn(fmt.Sprintf("diff -p: %s is a fifo: a patch cannot hold it", quote(c.Path)))
					break
				}
			}
		}
	case o.stat:
		var files, adds, dels int
		for _, c := range changes {
			files++
			if a, r, ok := d.lineCounts(c); ok {
				adds += a
				dels += r
				fmt.Fprintf(g.stdout, " %s %s | +%d -%d\n", c.Op, displayPath(c), a, r)
			} else {
				fmt.Fprintf(g.stdout, " %s %s | %s\n", c.Op, displayPath(c), entryType(c))
			}
		}
		fmt.Fprintf(g.stdout, " %d paths changed, %d insertions(+), %d deletions(-)\n", files, adds, dels)
	default:
		for _, c := range changes {
			fmt.Fprintf(g.stdout, "%s\t%s\n", c.Op, displayPath(c))
		}
	}
	for _, t := range targets {
		fmt.Fprintf(g.stdout, "T\t%s (%s: saved in %s, contents not compared)\n", quote(t.Name), t.Backend, base)
	}
	for _, p := range through {
		fmt.Fprintf(g.stdout, "I\t%s (ignored: written through, kept by discard and undo)\n", quote(p))
	}
	for _, p := range excluded {
		fmt.Fprintf(g.stdout, "X\t%s (excluded: not compared; commit moves it, discard drops it, undo keeps it)\n", quote(p))
	}
	return nil
}

// targetDiffJSON is a target in diff --json: its saved state.
type targetDiffJSON struct {
	snapshot.TargetState
	State string `json:"state"` // "saved": the snapshot can bring it back
}

func entryType(c snapshot.Change) string {
	if c.New != nil {
		return c.New.Type.String()
	}
	return c.Old.Type.String()
}

func displayPath(c snapshot.Change) string {
	p := quote(c.Path)
	if entryType(c) == "dir" {
		p += "/"
	}
	return p
}

// differ reads both sides of a change: the old one from the store (or,
// for a pending run, the tree), the new one from the tree (or the run's
// upper layer).
type differ struct {
	repo  *snapshot.Repo
	upper string // set for a pending run
}

// text returns a side's content when it is a text file small enough to
// diff; ok is false for binary or large files.
func (d *differ) text(e *snapshot.Entry, old bool, path string) (string, bool) {
	if e == nil {
		return "", true
	}
	if e.Type != snapshot.File || e.Size > textLimit {
		return "", false
	}
	var b []byte
	var err error
	switch {
	case d.upper != "" && old:
		b, err = d.repo.ReadTreeFile(path, textLimit+1)
	case d.upper != "":
		b, err = snapshot.ReadFileBeneath(d.upper, path, textLimit+1)
	case old:
		b, err = d.repo.ReadObjectPrefix(e.Object, textLimit+1)
	default:
		b, err = d.repo.ReadTreeFile(path, textLimit+1)
	}
	if err != nil || len(b) > textLimit || bytes.IndexByte(b, 0) >= 0 {
		return "", false
	}
	return string(b), true
}

func (d *differ) sides(c snapshot.Change) (a, b string, ok bool) {
	a, okA := d.text(c.Old, true, c.Path)
	b, okB := d.text(c.New, false, c.Path)
	return a, b, okA && okB
}

func (d *differ) lineCounts(c snapshot.Change) (added, removed int, ok bool) {
	a, b, ok := d.sides(c)
	if !ok {
		return 0, 0, false
	}
	sm := difflib.NewMatcher(splitLines(a), splitLines(b))
	for _, op := range sm.GetOpCodes() {
		switch op.Tag {
		case 'r':
			removed += op.I2 - op.I1
			added += op.J2 - op.J1
		case 'd':
			removed += op.I2 - op.I1
		case 'i':
			added += op.J2 - op.J1
		}
	}
	return added, removed, true
}

// splitLines splits text into lines that keep their newline; unlike
// difflib.SplitLines it adds no empty line after a final newline.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	return lines
}
