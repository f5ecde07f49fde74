package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

// archiveJSON is one archive in --json output.
type archiveJSON struct {
	ID                string    `json:"id"`
	File              string    `json:"file"`
	Snapshot          string    `json:"snapshot"`
	Kind              string    `json:"kind"`
	Message           string    `json:"message,omitempty"`
	Project           string    `json:"project"`
	ProjectID         string    `json:"project_id"`
	CreatedAt         time.Time `json:"created_at"`
	SnapshotCreatedAt time.Time `json:"snapshot_created_at"`
	Files             int       `json:"files"`
	Targets           int       `json:"targets"`
	Bytes             int64     `json:"bytes"`
	ArchiveSHA256     string    `json:"archive_sha256"`
}

func mkArchiveJSON(s *catalog.Summary, file string) archiveJSON {
	return archiveJSON{ID: s.ID, File: file, Snapshot: s.Snapshot, Kind: s.Kind, Message: s.Message, Project: s.Project, ProjectID: s.ProjectID,
		CreatedAt: s.CreatedAt, SnapshotCreatedAt: s.SnapshotCreatedAt, Files: s.Files, Targets: s.Targets, Bytes: s.Bytes,
		ArchiveSHA256: s.ArchiveSHA256}
}

func newArchiveCmd(g *globals) *cobra.Command {
	var catalogDir string
	c := &cobra.Command{
		Use:   "archive",
		Short: "Export snapshots to verified archives in a catalog directory, list, verify, restore and prune them",
		Long: `Export snapshots to verified archives in a catalog directory.

Every verb works on one catalog: --catalog DIR, else [archive] destination
in snapback.toml, outside the project (a catalog inside it is refused:
the tree's snapshots and restores would carry or remove it). The
directory is the truth: every listing reads and verifies the archives
themselves. list, verify and prune act on this project's archives unless
--all is given. Archives are NOT encrypted: anyone who can read the catalog
can read the project's files.`,
	}
	c.PersistentFlags().StringVar(&catalogDir, "catalog", "", "the catalog directory (default: [archive] destination from snapback.toml)")
	openCat := func(create bool) (*catalog.Catalog, error) {
		dir, err := g.catalogPath(catalogDir)
		if err != nil {
			return nil, err
		}
		return catalog.Open(dir, create)
	}
	c.AddCommand(newArchiveCreateCmd(g, openCat), newArchiveListCmd(g, openCat), newArchiveVerifyCmd(g, openCat),
		newArchiveRestoreCmd(g, openCat), newArchivePruneCmd(g, openCat), newArchivePushCmd(g, openCat), newArchivePullCmd(g, openCat))
	return c
}

// catalogPath is the catalog's absolute path: --catalog, else the
// configured destination. A relative one is relative to the project
// root (refused outside a project); one with ".." is refused as written,
// before anything cleans it away; one inside the project is refused (a
// relative one always is): the tree's snapshots, restores and commands
// would carry, remove or rewrite the archives meant to outlive them.
func (g *globals) catalogPath(flag string) (string, error) {
	dir, what := flag, "--catalog"
	root, rootErr := g.rootDir()
	if dir == "" {
		if rootErr != nil {
			return "", rootErr
		}
		cfg, err := config.Load(root)
		if err != nil {
			return "", err
		}
		dir, what = cfg.Archive.Destination, "[archive] destination"
	}
	if dir == "" {
		return "", &catalog.Error{Code: catalog.CodeNoCatalog, Msg: "no catalog configured: give --catalog DIR or set [archive] destination in snapback.toml"}
	}
	for _, c := range strings.Split(filepath.ToSlash(dir), "/") {
		if c == ".." {
			return "", &catalog.Error{Code: catalog.CodeBadPath, Msg: fmt.Sprintf("%s %s: a path with \"..\" is refused (write it without)", what, dir)}
		}
	}
	inProject := rootErr == nil && g.inProject(root)
	if !filepath.IsAbs(dir) {
		if !inProject {
			return "", &catalog.Error{Code: catalog.CodeBadPath, Msg: fmt.Sprintf("%s %s: a relative path is relative to the project root, and there is no project here; give an absolute path", what, dir)}
		}
		dir = filepath.Join(root, dir)
	}
	dir = filepath.Clean(dir)
	if inProject {
		if err := catalog.OutsideProject(dir, root); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// inProject reports whether root is a project's (it has a store or a
// snapback.toml).
func (g *globals) inProject(root string) bool {
	for _, n := range []string{config.FileName, snapshot.StoreDir} {
		if _, err := os.Lstat(filepath.Join(root, n)); err == nil {
			return true
		}
	}
	return false
}

// archiveScope is the project id list, verify and prune act on: this
// project's ("none" when it never made an archive), or "" for every
// project's (--all, or outside a project).
func (g *globals) archiveScope(all bool) (id string, inProject bool, err error) {
	if all {
		return "", true, nil
	}
	root, err := g.rootDir()
	if err != nil || !g.inProject(root) {
		return "", false, nil
	}
	id, err = catalog.ProjectID(root, false)
	if err != nil {
		return "", true, err
	}
	if id == "" {
		id = "none"
	}
	return id, true, nil
}

// printable escapes control characters (and invalid UTF-8) in text from
// an archive or a record before it reaches a terminal: an escape
// sequence or a carriage return in a message could rewrite the screen.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+w])
		}
		i += w
	}
	return b.String()
}

type catalogOpener func(create bool) (*catalog.Catalog, error)

// progress shows how far work on total bytes has got, on a terminal, for
// work over a second (progress.go); done must be called when it ends.
func (g *globals) progress(what string, total int64) (p catalog.Progress, done func()) {
	return g.progressLine().bytes(what, total)
}

func newArchiveCreateCmd(g *globals, openCat catalogOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "create [SNAPSHOT]",
		Short: "Write an archive of a snapshot (default: the newest) into the catalog",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cat, err := openCat(true)
			if err != nil {
				return err
			}
			repo, _, err := g.open(false, "archive create")
			if err != nil {
				return err
			}
			defer repo.Close()
			var m *snapshot.Meta
			if len(args) == 1 {
				if m, err = repo.Resolve(args[0]); err != nil {
					return err
				}
			} else {
				all, err := repo.List()
				if err != nil {
					return err
				}
				for i := len(all) - 1; i >= 0 && m == nil; i-- {
					if all[i].Kind.Undoable() && all[i].State != "running" {
						m = all[i]
					}
				}
				if m == nil {
					return &exitError{code: 2, kind: catalog.CodeNotFound, err: errors.New("archive create: no snapshot yet (snapback snap makes one)")}
				}
			}
			plan, err := catalog.PlanArchive(repo, m)
			if err != nil {
				return err
			}
			pid, err := catalog.ProjectID(repo.Root, true)
			if err != nil {
				return err
			}
			// Ctrl-C (c's context: interrupt.go) stops the write, and the
			// partial file goes with it.
			ctx := c.Context()
			p, done := g.progress("archive "+m.ID, plan.Bytes)
			s, existed, err := cat.Create(ctx, repo, plan, catalog.Project{Root: repo.Root, ID: pid}, p)
			done()
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"archive": mkArchiveJSON(s, catalog.FileName(s.ID)), "existed": existed})
			}
			verb := "wrote"
			if existed {
				verb = "already had"
			}
			fmt.Fprintf(g.stdout, "%s %s (snapshot %s, %d files, %s)\n", verb, cat.Path(s.ID), s.Snapshot, s.Files, humanBytes(s.Bytes))
			return nil
		},
	}
}

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

const maxListLimit = 100

// listJSON is archive list's --json output.
type listJSON struct {
	Status         string             `json:"status"` // ready, or destination_missing
	Destination    string             `json:"destination"`
	Count          int                `json:"count"` // archives in scope, before the limit
	Limit          int                `json:"limit"`
	Others         int                `json:"others"` // other projects' archives, not shown (see --all)
	LastVerifiedAt time.Time          `json:"last_verified_at"`
	Archives       []archiveJSON      `json:"archives"`
	Rejected       []catalog.Rejected `json:"rejected"`
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
				return g.printJSON(map[string]any{"archive": mkArchiveJSON(s, name), "ok": true})
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
				return g.printJSON(map[string]any{"archive": mkArchiveJSON(res.Summary, name), "into": into, "files": res.Files, "targets": res.Targets})
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
					return g.printJSON(map[string]any{"deleted": append([]string{}, res.Deleted...)})
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
				out := map[string]any{"token": plan.Token, "expires_at": plan.Expires, "keep": plan.Keep, "max_delete": o.MaxDelete,
					"delete": []archiveJSON{}, "kept": []archiveJSON{}, "later": len(plan.Later), "others": plan.Others,
					"rejected": append([]catalog.Rejected{}, plan.Rejected...)}
				for _, a := range plan.Delete {
					out["delete"] = append(out["delete"].([]archiveJSON), mkArchiveJSON(&a.Summary, a.File))
				}
				for _, a := range plan.Kept {
					out["kept"] = append(out["kept"].([]archiveJSON), mkArchiveJSON(&a.Summary, a.File))
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
		if st, err := os.Lstat(filepath.Join(root, snapshot.StoreDir)); err == nil && st.IsDir() {
			return filepath.Join(root, snapshot.StoreDir, "prune-tokens"), nil
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
