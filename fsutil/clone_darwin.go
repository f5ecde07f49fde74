package fsutil

import (
	"errors"
	"os"
)

// cloneFile: macOS clones by path (clonefile(2)), which needs a destination
// that does not exist yet; the fd-based copy is used instead.
func cloneFile(dst, src *os.File) error {
	return errors.ErrUnsupported
}
