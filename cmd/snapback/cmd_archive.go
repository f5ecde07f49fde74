package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
	"golang.org/x/term"
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
in snapback.toml. The directory is the truth: every listing reads and
verifies the archives themselves. Archives are NOT encrypted: anyone who
can read the catalog can read the project's files.`,
	}
	c.PersistentFlags().StringVar(&catalogDir, "catalog", "", "the catalog directory (default: [archive] destination from snapback.toml)")
	openCat := func(create bool) (*catalog.Catalog, error) {
		dir := catalogDir
		if dir == "" {
			root, err := g.rootDir()
			if err != nil {
				return nil, err
			}
			cfg, err := config.Load(root)
			if err != nil {
				return nil, err
			}
			dir = cfg.Archive.Destination
			if dir != "" && !filepath.IsAbs(dir) {
				dir = filepath.Join(root, dir)
			}
		}
		return catalog.Open(dir, create)
	}
	c.AddCommand(newArchiveCreateCmd(g, openCat), newArchiveListCmd(g, openCat), newArchiveVerifyCmd(g, openCat),
		newArchiveRestoreCmd(g, openCat), newArchivePruneCmd(g, openCat), newArchivePushCmd(g, openCat), newArchivePullCmd(g, openCat))
	return c
}

type catalogOpener func(create bool) (*catalog.Catalog, error)

// progress shows a bar on a terminal for work over a second, and nothing
// otherwise. done must be called when the work ends.
func (g *globals) progress(what string, total int64) (p catalog.Progress, done func()) {
	f, ok := g.stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || g.json {
		return nil, func() {}
	}
	var bar *progressbar.ProgressBar
	var seen int64
	start := time.Now()
	return func(n int64) {
			seen += n
			if bar == nil && time.Since(start) > time.Second {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
					progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
				bar.Add64(seen - n)
			}
			if bar != nil {
				bar.Add64(n)
			}
		}, func() {
			if bar != nil {
				bar.Finish()
			}
		}
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
			p, done := g.progress("archive "+m.ID, plan.Bytes)
			pid, err := catalog.ProjectID(repo.Root, true)
			if err != nil {
				return err
			}
			s, existed, err := cat.Create(repo, plan, catalog.Project{Root: repo.Root, ID: pid}, p)
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
	return &cobra.Command{
		Use:   "list",
		Short: "List the catalog's archives, each verified in full; invalid ones are reported and left in place",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cat, err := openCat(false)
			if err != nil {
				return err
			}
			p, done := g.progress("verify", catalogBytes(cat.Dir))
			l, err := cat.List(p)
			done()
			if err != nil {
				return err
			}
			if g.json {
				out := struct {
					Archives []archiveJSON      `json:"archives"`
					Rejected []catalog.Rejected `json:"rejected"`
				}{Archives: []archiveJSON{}, Rejected: []catalog.Rejected{}}
				for i := len(l.Archives) - 1; i >= 0; i-- {
					out.Archives = append(out.Archives, mkArchiveJSON(&l.Archives[i].Summary, l.Archives[i].File))
				}
				out.Rejected = append(out.Rejected, l.Rejected...)
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ARCHIVE\tSNAPSHOT\tCREATED\tFILES\tSIZE\tMESSAGE")
			for i := len(l.Archives) - 1; i >= 0; i-- {
				a := l.Archives[i]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", a.ID, a.Snapshot, a.CreatedAt.Local().Format("2006-01-02 15:04:05"), a.Files, humanBytes(a.Bytes), oneLine(a.Message))
			}
			tw.Flush()
			for _, r := range l.Rejected {
				fmt.Fprintf(g.stdout, "rejected %s: %s: %s\n", r.File, r.Error, oneLine(r.Msg))
			}
			return nil
		},
	}
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
	return &cobra.Command{
		Use:   "verify ARCHIVE|ID",
		Short: "Verify one archive in full: every entry against its SHA-256, the index, the summary, the name",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cat, err := openCat(false)
			if err != nil {
				return err
			}
			name, err := cat.Find(args[0])
			if err != nil {
				return err
			}
			p, done := g.progress("verify", fileSize(filepath.Join(cat.Dir, name)))
			s, err := cat.Verify(name, p)
			done()
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"archive": mkArchiveJSON(s, name), "ok": true})
			}
			fmt.Fprintf(g.stdout, "ok %s (snapshot %s, %d entries, %s)\n", name, s.Snapshot, s.Entries, humanBytes(s.Bytes))
			return nil
		},
	}
}

func fileSize(p string) int64 {
	if st, err := os.Stat(p); err == nil {
		return st.Size()
	}
	return 0
}

func newArchiveRestoreCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var into string
	var merge bool
	c := &cobra.Command{
		Use:   "restore ARCHIVE|ID --into DIR [--merge]",
		Short: "Write an archive's snapshot beneath DIR (empty, unless --merge); target payloads go to DIR/.snapback-targets",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if into == "" {
				return usageErr("archive restore: --into DIR is required")
			}
			cat, err := openCat(false)
			if err != nil {
				return err
			}
			name, err := cat.Find(args[0])
			if err != nil {
				return err
			}
			p, done := g.progress("restore", fileSize(filepath.Join(cat.Dir, name)))
			res, err := cat.Restore(name, into, catalog.RestoreOptions{Merge: merge}, p)
			done()
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"archive": mkArchiveJSON(res.Summary, name), "into": into, "files": res.Files, "targets": res.Targets})
			}
			fmt.Fprintf(g.stdout, "restored snapshot %s into %s (%d files", res.Summary.Snapshot, into, res.Files)
			if res.Targets > 0 {
				fmt.Fprintf(g.stdout, "; %d target payloads in %s", res.Targets, filepath.Join(into, catalog.TargetsDirName))
			}
			fmt.Fprintln(g.stdout, ")")
			return nil
		},
	}
	c.Flags().StringVar(&into, "into", "", "the directory to write into")
	c.Flags().BoolVar(&merge, "merge", false, "write into a non-empty directory, replacing files of the same names")
	return c
}

func newArchivePruneCmd(g *globals, openCat catalogOpener) *cobra.Command {
	var keep int
	var apply string
	c := &cobra.Command{
		Use:   "prune --keep N | --apply TOKEN",
		Short: "Preview deleting all but the N newest archives (prints a token), or apply a previewed prune",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			keepSet := c.Flags().Changed("keep")
			if keepSet == (apply != "") {
				return usageErr("archive prune: give --keep N to preview, or --apply TOKEN to carry a preview out")
			}
			if keepSet && keep < 0 {
				return usageErr("archive prune: --keep must be 0 or more")
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
			if apply != "" {
				res, err := cat.PruneApply(apply, tokens, p)
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
			plan, err := cat.PrunePreview(catalog.PruneOptions{Keep: keep}, tokens, p)
			if err != nil {
				return err
			}
			if g.json {
				out := map[string]any{"token": plan.Token, "expires_at": plan.Expires, "keep": plan.Keep,
					"delete": []archiveJSON{}, "kept": []archiveJSON{}, "rejected": append([]catalog.Rejected{}, plan.Rejected...)}
				for _, a := range plan.Delete {
					out["delete"] = append(out["delete"].([]archiveJSON), mkArchiveJSON(&a.Summary, a.File))
				}
				for _, a := range plan.Kept {
					out["kept"] = append(out["kept"].([]archiveJSON), mkArchiveJSON(&a.Summary, a.File))
				}
				return g.printJSON(out)
			}
			for _, a := range plan.Delete {
				fmt.Fprintf(g.stdout, "would delete %s (snapshot %s, created %s)\n", a.File, a.Snapshot, a.CreatedAt.Local().Format("2006-01-02 15:04:05"))
			}
			for _, r := range plan.Rejected {
				fmt.Fprintf(g.stdout, "left alone (invalid) %s: %s\n", r.File, r.Error)
			}
			fmt.Fprintf(g.stdout, "%d to delete, %d kept. To delete them: snapback archive prune --apply %s (valid until %s)\n",
				len(plan.Delete), len(plan.Kept), plan.Token, plan.Expires.Local().Format(time.TimeOnly))
			return nil
		},
	}
	c.Flags().IntVar(&keep, "keep", 0, "how many of the newest archives to keep")
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
