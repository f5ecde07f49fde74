package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/catalog"
	"github.com/spf13/cobra"
)

func newArchiveVerifyCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "verify ARCHIVE|ID|FILE",
		Short: "Verify one archive in full: every byte of the file, every entry against its SHA-256, the index, the summary, the name",
		Long: `Verify one archive in full. ARCHIVE|ID names one in the catalog (this
project's unless --all); a FILE path (with a "/" in it) is checked in place
wherever it is, a copy on a USB stick say, without a catalog.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var s *catalog.Summary
			name := filepath.Base(args[0])
			ctx := c.Context() // cancelled by Ctrl-C or SIGTERM (interrupt.go)
			if looseFile(args[0]) {
				p, done := g.progress("verify", fileSize(args[0]))
				var err error
				s, err = catalog.VerifyFile(ctx, args[0], catalog.DefaultLimits, p)
				done()
				if err != nil {
					return err
				}
			} else {
				scope, _, err := g.archiveScope(all)
				if err != nil {
					return err
				}
				cat, err := openCat(false)
				if err != nil {
					return err
				}
				if name, err = cat.Find(args[0]); err != nil {
					return err
				}
				p, done := g.progress("verify", fileSize(filepath.Join(cat.Dir, name)))
				s, err = cat.Verify(ctx, name, p)
				done()
				if err != nil {
					return err
				}
				if scope != "" && s.ProjectID != scope {
					return &catalog.Error{Code: catalog.CodeOther, Msg: fmt.Sprintf("archive %s is another project's (%s, id %s); give --all to verify it", name, printable(s.Project), s.ProjectID)}
				}
			}
			if g.json {
				return g.printJSON(archiveVerifyJSON{Archive: mkArchiveJSON(s, name), OK: true})
			}
			fmt.Fprintf(g.stdout, "ok %s (snapshot %s, %d entries, %s)\n", printable(name), s.Snapshot, s.Entries, humanBytes(s.Bytes))
			return nil
		},
	}
	c.Flags().BoolVar(&all, "all", false, "verify an archive of another project too")
	return c
}

// looseFile reports whether an argument names an archive file by its
// path rather than one in the catalog by name or id.
func looseFile(arg string) bool {
	return strings.ContainsRune(arg, '/')
}

func fileSize(p string) int64 {
	if st, err := os.Stat(p); err == nil {
		return st.Size()
	}
	return 0
}
