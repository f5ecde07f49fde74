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

// NarrowBoth narrows the open checkpoint m (left as it is) twice: as its
// end does (from the watcher's changes when it vouches) and from a scan
// of the whole tree; each returns its record's before and after
// manifests, and watched says whether the first read only what the
// watcher named.
func NarrowBoth(r *Repo, m *record.Meta) (asEnd, full [2]string, watched bool, err error) {
	a, f := *m, *m
	if err := r.narrowCheckpoint(&a); err != nil {
		return asEnd, full, false, err
	}
	watched = r.LastWatched
	if err := r.narrowRun(&f); err != nil {
		return asEnd, full, false, err
	}
	return [2]string{a.Manifest, a.After}, [2]string{f.Manifest, f.After}, watched, nil
}

// SmallBlocks makes blocked manifests cut blocks of about n bytes until
// the test ends.
func SmallBlocks(t interface{ Cleanup(func()) }, n int) {
	was := blockBytes
	blockBytes = n
	t.Cleanup(func() { blockBytes = was })
}

// DecodeStored decodes a stored manifest's bytes as LoadManifest does.
func DecodeStored(r *Repo, b []byte) (record.Manifest, error) { return r.decodeManifest(b) }

// ReadStored reads a stored object's bytes.
func ReadStored(r *Repo, id string) ([]byte, error) {
	oid, _ := record.ParseObjectID(id)
	return r.readObject(oid, maxManifestSize)
}
