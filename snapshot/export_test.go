package snapshot

import "github.com/snapback/snapback/snapshot/record"

// SetBeforeHash lets the external tests remove a file between the scan's
// listing and its read (see beforeHash).
func SetBeforeHash(f func(path string)) { beforeHash = f }

// PackedObjects lists the contents the store holds in packs.
func PackedObjects(s *Store) []record.ObjectID {
	set := map[record.ObjectID]bool{}
	s.packedIDs(set)
	var out []record.ObjectID
	for id := range set {
		out = append(out, id)
	}
	return out
}

// PackedAt says which pack file holds the content id, and where in it.
func PackedAt(s *Store, id record.ObjectID) (path string, off int64, ok bool) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	s.loadPacksLocked()
	loc, ok := s.packed[id]
	return s.path(packsDir, loc.pack), loc.off, ok
}
