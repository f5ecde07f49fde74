package main

import (
	"fmt"
	"path/filepath"

	"github.com/snapback/snapback/catalog"
	"github.com/spf13/cobra"
)

func newArchiveRestoreCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var into string
	var o catalog.RestoreOptions
	c := &cobra.Command{
		Use:   "restore ARCHIVE|ID|FILE --into DIR [--merge] [--keep-privileges]",
		Short: "Write an archive's snapshot beneath DIR (empty, unless --merge); target payloads go to DIR/.snapback-targets",
		Long: `Write an archive's snapshot beneath DIR, verified in full first. A FILE path
(with a "/" in it) is restored from wherever it is, without a catalog.

By default a restore does not grant what an archive from elsewhere could
claim: setuid and setgid bits, security.* and trusted.* xattrs (file
capabilities) and owners other than you are dropped, as tar does without
--same-owner and --xattrs. --keep-privileges keeps them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if into == "" {
				return usageErr("archive restore: --into DIR is required")
			}
			var res *catalog.RestoreResult
			var err error
			name := filepath.Base(args[0])
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			if looseFile(args[0]) {
				p, done := g.progress("restore", fileSize(args[0]))
				res, err = catalog.RestoreFile(ctx, args[0], catalog.DefaultLimits, into, o, p)
				done()
			} else {
				var cat *catalog.Catalog
				if cat, err = openCat(false); err != nil {
					return err
				}
				if name, err = cat.Find(args[0]); err != nil {
					return err
				}
				p, done := g.progress("restore", fileSize(filepath.Join(cat.Dir, name)))
				res, err = cat.Restore(ctx, name, into, o, p)
				done()
			}
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(archiveRestoreJSON{Archive: mkArchiveJSON(res.Summary, name), Into: into, Files: res.Files, Targets: res.Targets})
			}
			fmt.Fprintf(g.stdout, "restored snapshot %s into %s (%d files", res.Summary.Snapshot, printable(into), res.Files)
			if res.Targets > 0 {
				fmt.Fprintf(g.stdout, "; %d target payloads in %s", res.Targets, printable(filepath.Join(into, catalog.TargetsDirName)))
			}
			fmt.Fprintln(g.stdout, ")")
			return nil
		},
	}
	c.Flags().StringVar(&into, "into", "", "the directory to write into")
	c.Flags().BoolVar(&o.Merge, "merge", false, "write into a non-empty directory, replacing files of the same names")
	c.Flags().BoolVar(&o.KeepPrivileges, "keep-privileges", false, "keep setuid/setgid bits, security.*/trusted.* xattrs and owners from the archive")
	return c
}
