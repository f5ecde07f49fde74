package main

import (
	"fmt"
	"os"

	"github.com/snapback/snapback/catalog"
	"github.com/spf13/cobra"
)

// resticRepo is --repo, else $RESTIC_REPOSITORY.
func resticRepo(verb, repo string) (*catalog.Restic, error) {
	if repo == "" {
		repo = os.Getenv("RESTIC_REPOSITORY")
	}
	if repo == "" {
		return nil, usageErr("archive %s: give --repo REPO (a path or rest:http://host:port/path) or set RESTIC_REPOSITORY", verb)
	}
	return &catalog.Restic{Repo: repo}, nil
}

func newArchivePushCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var repo string
	c := &cobra.Command{
		Use:   "push [ARCHIVE|ID ...] [--repo REPO]",
		Short: "Back up archives (default: every valid one in the catalog), each verified first, to a restic repository",
		Long: `Back up archives to a restic repository: a path, or rest:http://host:port/path
for a rest-server. --repo defaults to $RESTIC_REPOSITORY; restic reads the
password from RESTIC_PASSWORD, RESTIC_PASSWORD_FILE or RESTIC_PASSWORD_COMMAND.
Each archive is verified in full, then stored as one restic snapshot tagged
snapback and archive-<id>; one the repository already holds is skipped.`,
		RunE: func(c *cobra.Command, args []string) error {
			r, err := resticRepo("push", repo)
			if err != nil {
				return err
			}
			cat, err := openCat(false)
			if err != nil {
				return err
			}
			var names []string
			for _, a := range args {
				n, err := cat.Find(a)
				if err != nil {
					return err
				}
				names = append(names, n)
			}
			p, done := g.progress("verify", catalogBytes(cat.Dir))
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			res, err := r.Push(ctx, cat, names, p)
			done()
			if res == nil {
				return err
			}
			if g.json {
				if perr := g.printJSON(pushJSON{Pushed: nonNil(res.Pushed), Skipped: nonNil(res.Skipped), Invalid: nonNil(res.Invalid)}); perr != nil {
					return perr
				}
				return err
			}
			for _, n := range res.Pushed {
				fmt.Fprintf(g.stdout, "pushed %s\n", n)
			}
			for _, n := range res.Skipped {
				fmt.Fprintf(g.stdout, "already in the repository %s\n", n)
			}
			for _, rj := range res.Invalid {
				fmt.Fprintf(g.stdout, "not pushed (invalid) %s: %s\n", rj.File, rj.Error)
			}
			return err
		},
	}
	c.Flags().StringVar(&repo, "repo", "", "the restic repository (default: $RESTIC_REPOSITORY)")
	return c
}

func newArchivePullCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var repo string
	c := &cobra.Command{
		Use:   "pull [ID|all] [--repo REPO]",
		Short: "Restore archives (default: all) from a restic repository into the catalog, each verified before it is listed",
		Long: `Restore archives from a restic repository into the catalog. Each is written
into a private staging directory inside the catalog, verified in full, and
only then put under its name; one that fails verification never appears.
An archive the catalog already has is kept as it is. --repo defaults to
$RESTIC_REPOSITORY; restic reads the password from RESTIC_PASSWORD,
RESTIC_PASSWORD_FILE or RESTIC_PASSWORD_COMMAND.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			r, err := resticRepo("pull", repo)
			if err != nil {
				return err
			}
			cat, err := openCat(true)
			if err != nil {
				return err
			}
			ref := "all"
			if len(args) == 1 {
				ref = args[0]
			}
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			res, err := r.Pull(ctx, cat, ref, nil)
			if res == nil {
				return err
			}
			if g.json {
				if perr := g.printJSON(pullJSON{Pulled: nonNil(res.Pulled), Skipped: nonNil(res.Skipped), Differs: nonNil(res.Differs)}); perr != nil {
					return perr
				}
				return err
			}
			differs := map[string]bool{}
			for _, n := range res.Differs {
				differs[n] = true
			}
			for _, n := range res.Pulled {
				fmt.Fprintf(g.stdout, "pulled %s\n", n)
			}
			for _, n := range res.Skipped {
				if differs[n] {
					fmt.Fprintf(g.stdout, "already in the catalog %s (kept; the repository's copy differs)\n", n)
				} else {
					fmt.Fprintf(g.stdout, "already in the catalog %s\n", n)
				}
			}
			return err
		},
	}
	c.Flags().StringVar(&repo, "repo", "", "the restic repository (default: $RESTIC_REPOSITORY)")
	return c
}
