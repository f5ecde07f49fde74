package snapshot

import (
	"errors"

	"github.com/snapback/snapback/fsutil"
)

// Bounds on what is read from the store into memory: a damaged or hostile
// file (1 GiB of junk, a symlink to /dev/zero, a FIFO that never ends)
// must yield an error, never a hang or an allocation without limit. Every
// store file is read through [Store.readFile] (fsutil's bounded,
// no-follow reader).
const (
	maxRecordSize   = 16 << 20  // a snapshot record: its command line is the big part
	maxRunSize      = 256 << 20 // a pending run's record: it lists committed paths
	maxPayloadSize  = 1 << 20   // a target payload's settings (target.json)
	maxManifestSize = 1 << 30   // a manifest: about ten million entries
	maxIndexSize    = 1 << 30   // the stat cache: one entry per file, as a manifest
	maxReadObject   = 1 << 30   // an object read whole (a manifest, a git index)
)

// errNotRegular: a store file is a symlink, a FIFO, a device or a directory.
var errNotRegular = errors.New("not a regular file")

// readLimited reads a store file by its path: the last component is not
// followed, the layout above it was checked by Open. Prefer
// [Store.readFile], which follows nothing below the root.
func readLimited(path string, max int64) ([]byte, error) {
	return fsutil.ReadFileLimit(path, max)
}
