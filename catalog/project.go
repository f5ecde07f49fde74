package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/fsutil"
)

// ProjectIDFile is where a project keeps its stable id, in its store: the
// project's archives carry it, and listing and retention act on one
// project's archives by it. A moved or renamed project keeps its id.
const ProjectIDFile = "project-id"

// ProjectID returns the project's stable id, 32 hex digits, kept in its
// store (the directory store), making it on first use when create is set
// ("" and no error when there is none yet). Two processes making it at
// once agree: the file is linked in, never replaced.
func ProjectID(store string, create bool) (string, error) {
	p := filepath.Join(store, ProjectIDFile)
	for try := 0; try < 2; try++ {
		// Bounded, never through a link, never waiting on a FIFO: the
		// store is input from outside.
		b, err := fsutil.ReadFileLimit(p, 4096)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if !projectIDRE().MatchString(id) {
				return "", errf(CodeIO, "project id %s: not 32 hex digits", p)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", wrap(CodeIO, err, "project id")
		}
		if !create {
			return "", nil
		}
		var b16 [16]byte
		rand.Read(b16[:])
		tmp := p + ".tmp-" + hex.EncodeToString(b16[:4])
		if err := fsutil.WriteFileAtomic(tmp, []byte(hex.EncodeToString(b16[:])+"\n"), 0o644); err != nil {
			return "", wrap(CodeIO, err, "project id")
		}
		err = os.Link(tmp, p)
		os.Remove(tmp) // linked or lost the race: either way not needed
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return "", wrap(CodeIO, err, "project id")
		}
		if err := fsutil.SyncDir(store); err != nil {
			return "", wrap(CodeIO, err, "project id")
		}
	}
	return "", errf(CodeIO, "project id %s: made but not readable", p)
}

// OutsideProject refuses a catalog at or beneath the project root: its
// archives would go into every later snapshot, a restore of an earlier
// one would remove them, and a command under `run` could delete them
// with the tree. Both paths are compared as written and by identity
// (the catalog's existing ancestors against the root), so a symlink to
// the project or a second path to it is seen through.
func OutsideProject(dir, root string) error {
	dir, root = filepath.Clean(dir), filepath.Clean(root)
	refuse := func() error {
		alt := filepath.Join(filepath.Dir(root), filepath.Base(root)+"-archives")
		return errf(CodeInProject, "catalog %s is inside the project %s: its archives would go into every snapshot and a restore would remove them; use a directory outside it (e.g. %s) and move any archives there", dir, root, alt)
	}
	if dir == root || strings.HasPrefix(dir, root+"/") {
		return refuse()
	}
	rst, err := os.Stat(root)
	if err != nil {
		return nil // no project directory: nothing to be inside
	}
	for p := dir; ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && os.SameFile(st, rst) {
			return refuse()
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}
