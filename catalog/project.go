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
	"github.com/snapback/snapback/snapshot"
)

// ProjectIDFile is where a project keeps its stable id, in its store: the
// project's archives carry it, and listing and retention act on one
// project's archives by it. A moved or renamed project keeps its id.
const ProjectIDFile = "project-id"

// ProjectID returns the project's stable id, 32 hex digits, making it on
// first use when create is set ("" and no error when there is none yet).
// Two processes making it at once agree: the file is linked in, never
// replaced.
func ProjectID(root string, create bool) (string, error) {
	store := filepath.Join(root, snapshot.StoreDir)
	p := filepath.Join(store, ProjectIDFile)
	for try := 0; try < 2; try++ {
		b, err := os.ReadFile(p)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if !projectIDRE.MatchString(id) {
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
