package main

import (
	"fmt"
	"os"
	"path/filepath"

	"text/tabwriter"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// uncoveredJSON is what a verb's --json result says its protection does
// not hold; the field is left out when all is covered.
type uncoveredJSON = []gitdirs.Uncovered

// uncovered lists the directories the project at root depends on that
// its snapshots do not hold: a linked worktree's or a submodule's git
// dir, a common dir, a work tree elsewhere. A .git that cannot be read
// is itself one: what it names is unknown.
func uncovered(root string, saved gitdirs.Saved) uncoveredJSON {
	r, err := gitdirs.Find(root, os.Getenv)
	if err != nil {
		return uncoveredJSON{{Path: filepath.Join(root, ".git"), Reason: "cannot tell where the git dir is: " + err.Error()}}
	}
	if r == nil {
		return nil
	}
	return r.Uncovered(root, saved)
}

// savedBy says what step s saved of the git state outside the root.
func savedBy(s *record.Meta) gitdirs.Saved {
	if snapshot.SavesGit(s) {
		return gitdirs.SavedHead
	}
	return gitdirs.SavedNone
}

// noteUncovered says, one line each on stderr, what the verb's protection
// does not hold, unless --json carries it in the result. It returns the
// list for that result.
func (g *globals) noteUncovered(root string, saved gitdirs.Saved) uncoveredJSON {
	u := uncovered(root, saved)
	if !g.json {
		g.bar.end("")
		for _, d := range u {
			fmt.Fprintf(g.stderr, "snapback: not covered: %s: %s\n", oneLine(d.Path), oneLine(d.Reason))
		}
	}
	return u
}

// coveredJSON is one thing the project's protection holds.
type coveredJSON struct {
	Path string `json:"path"`
	What string `json:"what"`
}

// protectionJSON is what doctor says the project's protection covers.
type protectionJSON struct {
	Covered   []coveredJSON `json:"covered"`
	Uncovered uncoveredJSON `json:"uncovered"`
}

// protection lists what snapshots of the project at root hold (the root,
// the git dirs inside it, the declared targets) and what they do not.
func protection(root string) protectionJSON {
	out := protectionJSON{Covered: []coveredJSON{{Path: root, What: "the project root (snapshots, runs, checkpoints, undo)"}}}
	if r, err := gitdirs.Find(root, os.Getenv); err == nil && r != nil {
		for _, d := range r.Dirs(root) {
			if d.Inside {
				out.Covered = append(out.Covered, coveredJSON{Path: d.Path, What: d.What + ": inside the root"})
			}
		}
	}
	out.Uncovered = append(uncoveredJSON{}, uncovered(root, gitdirs.SavedByMode)...) // an array, empty when all is covered
	cfg, err := config.Load(root)
	if err != nil {
		out.Uncovered = append(out.Uncovered, gitdirs.Uncovered{Path: filepath.Join(root, config.FileName), Reason: "targets unknown: " + err.Error()})
		return out
	}
	for _, t := range cfg.Targets {
		out.Covered = append(out.Covered, coveredJSON{Path: snapshot.TargetName(t), What: "target (" + t.Backend + ")"})
	}
	return out
}

func printProtection(g *globals, pr protectionJSON) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPROTECTED\tPATH\tWHAT")
	for _, c := range pr.Covered {
		fmt.Fprintf(tw, "yes\t%s\t%s\n", oneLine(c.Path), oneLine(c.What))
	}
	for _, u := range pr.Uncovered {
		fmt.Fprintf(tw, "no\t%s\t%s\n", oneLine(u.Path), oneLine(u.Reason))
	}
	return tw.Flush()
}
