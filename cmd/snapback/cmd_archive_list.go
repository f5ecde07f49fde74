package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/snapback/snapback/catalog"
	"github.com/spf13/cobra"
)

func newArchiveListCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var all bool
	var limit int
	c := &cobra.Command{
		Use:   "list [--limit N] [--all]",
		Short: "List this project's archives, newest first, each verified in full; invalid candidates are reported and left in place",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if limit < 1 || limit > maxListLimit {
				return usageErr("archive list: --limit must be 1 to %d, not %d", maxListLimit, limit)
			}
			scope, _, err := g.archiveScope(all)
			if err != nil {
				return err
			}
			out := listJSON{Status: "ready", Limit: limit, Archives: []archiveJSON{}, Rejected: []catalog.Rejected{}}
			cat, err := openCat(false)
			if catalog.CodeOf(err) == catalog.CodeNotFound {
				// Not made yet (the first create makes it): nothing to list.
				out.Status = "destination_missing"
				out.Destination, _ = g.catalogPath(c.Flag("catalog").Value.String())
				return g.printList(out)
			}
			if err != nil {
				return err
			}
			out.Destination = cat.Dir
			p, done := g.progress("verify", catalogBytes(cat.Dir))
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			l, err := cat.List(ctx, p)
			done()
			if err != nil {
				return err
			}
			archives := l.Archives
			if scope != "" {
				archives = l.Of(scope)
				out.Others = len(l.Archives) - len(archives)
			}
			out.Count = len(archives)
			out.LastVerifiedAt = l.VerifiedAt
			for i := len(archives) - 1; i >= 0 && len(out.Archives) < limit; i-- {
				out.Archives = append(out.Archives, mkArchiveJSON(&archives[i].Summary, archives[i].File))
			}
			out.Rejected = append(out.Rejected, l.Rejected...)
			return g.printList(out)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "every project's archives, not only this project's")
	c.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("show at most N archives, the newest (at most %d)", maxListLimit))
	return c
}

func (g *globals) printList(out listJSON) error {
	if g.json {
		return g.printJSON(out)
	}
	if out.Status == "destination_missing" {
		fmt.Fprintf(g.stdout, "no catalog at %s yet (archive create makes it)\n", printable(out.Destination))
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ARCHIVE\tSNAPSHOT\tTAKEN\tFILES\tSIZE\tMESSAGE")
	for _, a := range out.Archives {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", a.ID, a.Snapshot, a.SnapshotCreatedAt.Local().Format("2006-01-02 15:04:05"), a.Files, humanBytes(a.Bytes), printable(a.Message))
	}
	tw.Flush()
	if len(out.Archives) < out.Count {
		fmt.Fprintf(g.stdout, "(%d of %d shown; --limit N shows more)\n", len(out.Archives), out.Count)
	}
	if out.Others > 0 {
		fmt.Fprintf(g.stdout, "(%d archive(s) of other projects not shown; --all shows them)\n", out.Others)
	}
	for _, r := range out.Rejected {
		fmt.Fprintf(g.stdout, "rejected %s: %s: %s\n", printable(r.File), r.Error, printable(r.Msg))
	}
	return nil
}

// catalogBytes is the size of the catalog's archives, for a progress bar.
func catalogBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := catalog.IDOf(e.Name()); ok {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
	}
	return n
}
