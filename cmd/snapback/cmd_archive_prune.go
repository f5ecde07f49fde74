package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/config"
	"github.com/spf13/cobra"
)

func newArchivePruneCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var o catalog.PruneOptions
	var apply string
	var all bool
	c := &cobra.Command{
		Use:   "prune [--keep N] [--max-delete N] [--all] | --apply TOKEN",
		Short: "Preview deleting all but this project's N newest archives (prints a token), or apply a previewed prune",
		Long: `Preview deleting all but the N newest archives of this project (--keep, 1 to
1000, default [archive] keep from snapback.toml), at most --max-delete (1 to
100) of them per apply, and print a one-time token; --apply TOKEN carries the
preview out. Other projects' archives and invalid files are never deleted;
--all prunes across every project's archives.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			keepSet := c.Flags().Changed("keep")
			if apply != "" && (keepSet || all || c.Flags().Changed("max-delete")) {
				return usageErr("archive prune: --apply TOKEN carries out a preview as it was; give it alone")
			}
			cat, err := openCat(false)
			if err != nil {
				return err
			}
			tokens, err := g.tokenDir()
			if err != nil {
				return err
			}
			p, done := g.progress("verify", catalogBytes(cat.Dir))
			defer done()
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			if apply != "" {
				res, err := cat.PruneApply(ctx, apply, tokens, p)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(pruneApplyJSON{Deleted: nonNil(res.Deleted)})
				}
				for _, f := range res.Deleted {
					fmt.Fprintf(g.stdout, "deleted %s\n", f)
				}
				fmt.Fprintf(g.stdout, "%d archive(s) deleted\n", len(res.Deleted))
				return nil
			}
			if !keepSet {
				if root, err := g.rootDir(); err == nil {
					if cfg, err := config.Load(root); err == nil {
						o.Keep = cfg.Archive.Keep
					}
				}
				if o.Keep == 0 {
					return usageErr("archive prune: give --keep N to preview (or set [archive] keep in snapback.toml), or --apply TOKEN to carry a preview out")
				}
			}
			if o.Keep < 1 || o.Keep > catalog.MaxKeep {
				return usageErr("archive prune: --keep must be 1 to %d, not %d", catalog.MaxKeep, o.Keep)
			}
			if o.MaxDelete < 1 || o.MaxDelete > catalog.MaxDeletions {
				return usageErr("archive prune: --max-delete must be 1 to %d, not %d", catalog.MaxDeletions, o.MaxDelete)
			}
			scope, inProject, err := g.archiveScope(all)
			if err != nil {
				return err
			}
			if !inProject {
				return usageErr("archive prune: not in a project; give --all to prune every project's archives")
			}
			o.Project = scope
			plan, err := cat.PrunePreview(ctx, o, tokens, p)
			if err != nil {
				return err
			}
			if g.json {
				out := prunePreviewJSON{Token: plan.Token, ExpiresAt: plan.Expires, Keep: plan.Keep, MaxDelete: o.MaxDelete,
					Delete: []archiveJSON{}, Kept: []archiveJSON{}, Later: len(plan.Later), Others: plan.Others,
					Rejected: nonNil(plan.Rejected)}
				for _, a := range plan.Delete {
					out.Delete = append(out.Delete, mkArchiveJSON(&a.Summary, a.File))
				}
				for _, a := range plan.Kept {
					out.Kept = append(out.Kept, mkArchiveJSON(&a.Summary, a.File))
				}
				return g.printJSON(out)
			}
			for _, a := range plan.Delete {
				fmt.Fprintf(g.stdout, "would delete %s (snapshot %s, taken %s)\n", a.File, a.Snapshot, a.SnapshotCreatedAt.Local().Format("2006-01-02 15:04:05"))
			}
			for _, r := range plan.Rejected {
				fmt.Fprintf(g.stdout, "left alone (invalid) %s: %s\n", printable(r.File), r.Error)
			}
			if len(plan.Later) > 0 {
				fmt.Fprintf(g.stdout, "%d more past --max-delete %d: prune again after this one\n", len(plan.Later), o.MaxDelete)
			}
			if plan.Others > 0 {
				fmt.Fprintf(g.stdout, "%d archive(s) of other projects left alone (--all prunes across projects)\n", plan.Others)
			}
			fmt.Fprintf(g.stdout, "%d to delete, %d kept. To delete them: snapback archive prune --apply %s (valid until %s)\n",
				len(plan.Delete), len(plan.Kept), plan.Token, plan.Expires.Local().Format(time.TimeOnly))
			return nil
		},
	}
	c.Flags().IntVar(&o.Keep, "keep", 0, "how many of the newest archives to keep (1 to 1000; default [archive] keep)")
	c.Flags().IntVar(&o.MaxDelete, "max-delete", catalog.MaxDeletions, "delete at most N archives in one apply (1 to 100)")
	c.Flags().BoolVar(&all, "all", false, "prune across every project's archives, not only this project's")
	c.Flags().StringVar(&apply, "apply", "", "the token a preview printed")
	return c
}

// tokenDir is where prune tokens live: the project's store when there is
// one, else the user's state directory.
func (g *globals) tokenDir() (string, error) {
	if root, err := g.rootDir(); err == nil {
		if loc, err := storeOf(root); err == nil {
			if st, err := os.Lstat(loc.Dir); err == nil && st.IsDir() {
				return filepath.Join(loc.Dir, "prune-tokens"), nil
			}
		}
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("archive prune: no project store and no home directory for tokens: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	d := filepath.Join(base, "snapback", "prune-tokens")
	if err := os.MkdirAll(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return d, nil
}
