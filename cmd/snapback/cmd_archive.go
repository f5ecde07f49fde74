package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	_, err := os.Lstat(filepath.Join(root, config.FileName))
	return err == nil || snapshot.Marked(root)
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
	loc, err := storeOf(root)
	if err != nil {
		return "", true, err
	}
	id, err = catalog.ProjectID(loc.Dir, false)
	if err != nil {
		return "", true, err
	}
	if id == "" {
		id = "none"
	}
	return id, true, nil
}

type catalogOpener func(create bool) (*catalog.Catalog, error)

// progress shows how far work on total bytes has got, on a terminal, for
// work over a second (progress.go); done must be called when it ends.
func (g *globals) progress(what string, total int64) (p catalog.Progress, done func()) {
	return g.progressLine().bytes(what, total)
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
