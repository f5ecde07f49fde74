package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/internal/gitdiff"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

type diffOptions struct {
	stat, patch bool
	gitRaw      bool // list paths under .git/ one by one, not summed up
}

func newDiffCmd(g *globals) *cobra.Command {
	var o diffOptions
	c := &cobra.Command{
		Use:   "diff [ID] [PATH...]",
		Short: "Show what a pending run changes, or what changed in the tree since a snapshot",
		Long: `Show what a pending run changes, or what changed in the tree since a
snapshot. ID names either (see Ids in the README). Without ID: the newest
pending run; when none is pending, the snapshot undo would revert, else
the newest snapshot.

PATHs (relative to the current directory, which may be below the
project's root) limit the diff to each path and everything under it. The
first argument is an ID when it names a snapshot or run and no file of
that name is here; after --, every argument is a path.`,
		RunE: func(c *cobra.Command, args []string) error {
			ids, paths := args, []string(nil)
			if dash := c.ArgsLenAtDash(); dash >= 0 {
				ids, paths = args[:dash], args[dash:]
				if len(ids) > 1 {
					return usageErr("diff: one ID before --, got %d (%q)", len(ids), ids)
				}
			}
			return runDiff(g, ids, paths, o)
		},
	}
	c.Flags().BoolVar(&o.stat, "stat", false, "a summary of lines added and removed per file, as git diff --stat writes it")
	c.Flags().BoolVarP(&o.patch, "patch", "p", false, "a patch in git's format (git apply takes it)")
	c.Flags().BoolVar(&o.gitRaw, "git-raw", false, "list the paths under .git/ one by one instead of what git did (commits made, refs moved)")
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
	Patch   string `json:"patch,omitempty"`
}

func runDiff(g *globals, ids, paths []string, o diffOptions) error {
	repo, err := g.openReader(snapshot.Options{Verb: "diff", Access: snapshot.ForRead, SkipDamaged: true})
	if err != nil {
		return err
	}
	defer repo.Close()
	ref, paths, idErr, err := diffIDAndPaths(repo, ids, paths)
	if err != nil {
		return err
	}
	limits, err := relPaths(repo.Root, paths)
	if err != nil {
		return err
	}
	compared, err := repo.Compare(ref) // snapshot chooses what diff compares
	if err != nil {
		return err
	}
	changes, base, targets := compared.Changes, compared.Base, compared.Targets
	// Paths written that no diff shows are named apart, and sockets and
	// devices a run left are said (on stderr) rather than left out unseen.
	through, excluded, skipped := compared.WroteThrough, compared.Excluded, compared.Skipped
	d := &differ{repo: repo}
	if compared.Run != nil {
		d.upper = repo.UpperDir(compared.Run.ID)
	}
	if len(limits) > 0 {
		var bad int
		if changes, through, excluded, bad = limitDiff(repo.Root, limits, changes, through, excluded); bad >= 0 {
			if bad == 0 && idErr != nil {
				return idErr // neither a path nor an id: most likely a mistyped id
			}
			return &exitError{code: 2, kind: "not_found", err: fmt.Errorf("diff: %s: no such path in the tree or the diff", quote(paths[bad]))}
		}
		var kept []record.Skipped
		for _, sk := range skipped {
			if underAny(sk.Path, limits) {
				kept = append(kept, sk)
			}
		}
		skipped = kept
	}
	changes, gits := splitGitChanges(d, changes, o)
	// A target's own paths (a SQLite database in the tree) write through
	// like ignored ones, but its backend restores them: named with it.
	writes, through := repo.TargetWrites(targets, through)
	if len(limits) > 0 {
		// Only the targets whose paths the PATHs name.
		var named []snapshot.TargetWrite
		for _, w := range writes {
			if len(w.Paths) > 0 {
				named = append(named, w)
			}
		}
		writes = named
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
			// Skipped: sockets and devices the run left, not carried.
			Skipped []record.Skipped `json:"skipped"`
			// Git: what git did in each git directory of the tree (its
			// paths are then not in Changes; with --git-raw they are,
			// and Git is empty).
			Git []gitSummaryJSON `json:"git"`
		}{Snapshot: base, Changes: []diffChangeJSON{}, Targets: []targetDiffJSON{},
			WroteThrough: append([]string{}, through...), Excluded: append([]string{}, excluded...),
			Skipped: nonNil(skipped)}
		for _, w := range writes {
			out.Targets = append(out.Targets, targetDiffJSON{TargetState: w.TargetState, State: "saved", Paths: append([]string{}, w.Paths...)})
		}
		out.Changes, out.Git = d.changesJSON(changes, gits, o)
		return g.printJSON(out)
	}
	d.writeChanges(g, changes, gits, o)
	for _, w := range writes {
		written := ""
		if len(w.Paths) > 0 {
			written = "; written directly: " + quoteList(w.Paths) + ", restored with it by discard and undo"
		}
		fmt.Fprintf(g.stdout, "T\t%s (%s: saved in %s, contents not compared%s)\n", quote(w.Name), w.Backend, base, written)
	}
	for _, p := range through {
		fmt.Fprintf(g.stdout, "I\t%s (ignored: written through, kept by discard and undo)\n", quote(p))
	}
	for _, p := range excluded {
		fmt.Fprintf(g.stdout, "X\t%s (excluded: not compared; commit moves it, discard drops it, undo keeps it)\n", quote(p))
	}
	g.noteSkipped(skipped)
	return nil
}

// limitDiff keeps the changes (and the paths written through or
// excluded) at or below limits, the project-relative forms of args ("" for
// the root). A path that is not in the tree and that no change names is
// a mistake (a mistyped path or id): bad is its index, and the result
// nothing, rather than an empty diff.
func limitDiff(root string, limits []string, changes []record.Change, through, excluded []string) (kept []record.Change, keptThrough, keptExcluded []string, bad int) {
	for i, l := range limits {
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(l))); err == nil {
			continue
		}
		named := false
		for _, c := range changes {
			if underAny(c.Path, []string{l}) {
				named = true
				break
			}
		}
		if !named {
			return nil, nil, nil, i
		}
	}
	for _, c := range changes {
		if underAny(c.Path, limits) {
			kept = append(kept, c)
		}
	}
	keep := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if underAny(p, limits) {
				out = append(out, p)
			}
		}
		return out
	}
	return kept, keep(through), keep(excluded), -1
}

// targetDiffJSON is a target in diff --json: its saved state.
type targetDiffJSON struct {
	record.TargetState
	State string `json:"state"` // "saved": the snapshot can bring it back
	// Paths are the target's own paths in the tree the run wrote (a
	// SQLite database and its journal files): in the tree at once, and
	// restored with the target by discard and undo.
	Paths []string `json:"paths"`
}

func entryType(c record.Change) string {
	if c.New != nil {
		return c.New.Type.String()
	}
	return c.Old.Type.String()
}

func displayPath(c record.Change) string {
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
	repo  *snapshot.Reader
	upper string // set for a pending run
	// recorded: both sides are a recorded step's (show), read from the
	// store.
	recorded bool
}

// text returns a side's content when it is a text file small enough to
// diff; ok is false for binary or large files.
func (d *differ) text(e *record.Entry, old bool, path string) (string, bool) {
	if e == nil {
		return "", true
	}
	if e.Type != record.File || e.Size > textLimit {
		return "", false
	}
	b, err := d.read(e, old, path, textLimit+1)
	// Binary as git judges it: a NUL in the first 8000 bytes.
	if err != nil || len(b) > textLimit || bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
		return "", false
	}
	return string(b), true
}

// read reads up to limit bytes of a file side.
func (d *differ) read(e *record.Entry, old bool, path string, limit int64) ([]byte, error) {
	switch {
	case d.recorded:
		return d.readStored(e, path, limit)
	case d.upper != "" && old:
		return d.repo.ReadTreeFile(path, limit)
	case d.upper != "":
		return snapshot.ReadFileBeneath(d.upper, path, limit)
	case old:
		return d.repo.ReadObjectPrefix(e.Object, limit)
	}
	return d.repo.ReadTreeFile(path, limit)
}

func (d *differ) sides(c record.Change) (a, b string, ok bool) {
	a, okA := d.text(c.Old, true, c.Path)
	b, okB := d.text(c.New, false, c.Path)
	return a, b, okA && okB
}

func (d *differ) lineCounts(c record.Change) (added, removed int, ok bool) {
	a, b, ok := d.sides(c)
	if !ok {
		return 0, 0, false
	}
	added, removed = gitdiff.Count(gitdiff.Lines(a), gitdiff.Lines(b))
	return added, removed, true
}

// splitGitChanges takes the paths under git directories out of changes
// and sums them up, unless --git-raw asks for them.
func splitGitChanges(d *differ, changes []record.Change, o diffOptions) ([]record.Change, []gitSummaryJSON) {
	if o.gitRaw {
		return changes, []gitSummaryJSON{}
	}
	rest, byDir := splitGit(changes)
	return rest, d.gitSummaries(byDir)
}

// changesJSON is changes as diff and show --json give them.
func (d *differ) changesJSON(changes []record.Change, gits []gitSummaryJSON, o diffOptions) ([]diffChangeJSON, []gitSummaryJSON) {
	out := []diffChangeJSON{}
	for _, c := range changes {
		j := diffChangeJSON{jsonPath: mkJSONPath(c.Path), Op: c.Op, Type: entryType(c)}
		if o.stat {
			if a, r, ok := d.lineCounts(c); ok {
				j.Added, j.Removed = &a, &r
			}
		}
		if o.patch {
			j.Patch = d.gitPatch(c)
		}
		out = append(out, j)
	}
	return out, gits
}

// writeChanges writes changes as diff and show do: a patch (-p), git's
// --stat, or a line per path; what git did in a git directory is a
// line of its own ("G\tgit: …"), on stderr beside a patch or a --stat
// (which git's own output would not have).
func (d *differ) writeChanges(g *globals, changes []record.Change, gits []gitSummaryJSON, o diffOptions) {
	switch {
	case o.patch:
		// git's format, which `git apply` takes; what a patch cannot say
		// (a fifo) is named on stderr rather than dropped unseen.
		for _, c := range changes {
			fmt.Fprint(g.stdout, d.gitPatch(c))
			for _, e := range []*record.Entry{c.Old, c.New} {
				if e != nil && e.Type == record.Fifo {
					g.warn(fmt.Sprintf("diff -p: %s is a fifo: a patch cannot hold it", quote(c.Path)))
					break
				}
			}
		}
	case o.stat:
		var lines []gitdiff.StatLine
		for _, c := range changes {
			if l, ok := d.gitStat(c); ok {
				lines = append(lines, l)
			}
		}
		gitdiff.WriteStat(g.stdout, lines, g.columns())
	default:
		for _, c := range changes {
			fmt.Fprintf(g.stdout, "%s\t%s\n", c.Op, displayPath(c))
		}
	}
	w := g.stdout
	if o.patch || o.stat {
		w = g.stderr
	}
	for _, s := range gits {
		for _, l := range gitSummaryLines(s) {
			fmt.Fprintf(w, "G\t%s\n", l)
		}
	}
}
