package snapshot

import (
	"bytes"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/snapback/snapback/snapshot/record"
)

// Git rewrites its index for reasons that change nothing a user sees:
// `git status` refreshes the stat data the index caches for each file.
// Judged by its bytes, the index would then conflict with every undo of
// a run that used git, and users would learn to type --force. So an
// index is judged by its entries (path, mode, object id, stage), as git
// itself judges what is staged.

// gitIndexPath is where a project's own git index is; a commit of a
// pending run compares it with the copy taken when the run started.
const gitIndexPath = ".git/index"

// maxGitIndex bounds what is read of an index to compare it (a large
// monorepo's is tens of MB); a larger one is judged by its bytes.
const maxGitIndex = 512 << 20

// isGitIndex reports whether p is a git index: the project's, a nested
// repository's, or that of a worktree or submodule kept in a .git dir.
func isGitIndex(p string) bool {
	if record.Base(p) != "index" {
		return false
	}
	q := "/" + p
	return strings.HasSuffix(q, "/.git/index") || strings.Contains(q, "/.git/worktrees/") || strings.Contains(q, "/.git/modules/")
}

// sameGitIndex reports whether two index files stage the same entries.
// One that does not decode is never the same as anything.
func sameGitIndex(x, y []byte) bool {
	a, b := decodeGitIndex(x), decodeGitIndex(y)
	if a == nil || b == nil || len(a.Entries) != len(b.Entries) {
		return false
	}
	for i, e := range a.Entries {
		f := b.Entries[i]
		if e.Name != f.Name || e.Mode != f.Mode || e.Hash != f.Hash || e.Stage != f.Stage {
			return false
		}
	}
	return true
}

func decodeGitIndex(b []byte) (idx *index.Index) {
	defer func() {
		if recover() != nil { // the decoder trusts the lengths it reads
			idx = nil
		}
	}()
	idx = &index.Index{}
	if err := index.NewDecoder(bytes.NewReader(b)).Decode(idx); err != nil {
		return nil
	}
	return idx
}

// sameIndexContent reports whether the tree's present file at a git
// index path stages what the stored object want does.
func (r *Repo) sameIndexContent(p string, want record.ObjectID) bool {
	if sz, err := r.objectSize(want); err != nil || sz > maxGitIndex {
		return false
	}
	x, err := r.ReadObject(want)
	if err != nil {
		return false
	}
	y, err := r.ReadTreeFile(p, maxGitIndex)
	return err == nil && sameGitIndex(x, y)
}
