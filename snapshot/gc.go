package snapshot

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// GCStats says what gc removed.
type GCStats struct {
	Snapshots int
	Objects   int
	Bytes     int64
}

// GC keeps the keep newest snapshots, plus the records undo and redo still
// need, and deletes every object no kept manifest references.
func (r *Repo) GC(keep int, protect []string) (GCStats, error) {
	if r.HasJournal() {
		return GCStats{}, fmt.Errorf("gc: an interrupted operation awaits `snapback recover`")
	}
	h, err := r.History()
	if err != nil {
		return GCStats{}, err
	}
	return r.collect(h, keptRecords(h, keep, protect))
}

// Retention bounds the snapshots `list` shows ([snapshot] keep and
// keep_days): at most Keep of them (0: any number), none older than
// MaxAge (0: any age). Whatever the bounds, what undo and redo need next
// stays: the newest snapshot not undone, the redo chain, runs in
// progress; pending runs are no records and are never touched.
type Retention struct {
	Keep   int
	MaxAge time.Duration
}

// Retain applies ret after a snap or run: a gc when some record falls
// outside it, nothing (not even a walk of the objects) otherwise.
func (r *Repo) Retain(ret Retention) (GCStats, error) {
	if ret.Keep == 0 && ret.MaxAge == 0 || r.HasJournal() {
		return GCStats{}, nil // (recover finishes the journal first)
	}
	h, err := r.History()
	if err != nil {
		return GCStats{}, err
	}
	kept := retainedRecords(h, ret, time.Now())
	if len(kept) == len(h.All) {
		return GCStats{}, nil
	}
	st, err := r.collect(h, kept)
	if err != nil {
		return st, fmt.Errorf("retention: %w", err)
	}
	return st, nil
}

// retainedRecords chooses the records Retain keeps.
func retainedRecords(h *History, ret Retention, now time.Time) map[string]bool {
	kept := map[string]bool{}
	next := true // the newest not undone: what a plain undo takes
	for i, n := len(h.All)-1, 0; i >= 0; i-- {
		m := h.All[i]
		if !m.Kind.Undoable() || m.InProgress() {
			continue // (one in progress is kept by keepNeeded)
		}
		inCount := ret.Keep == 0 || n < ret.Keep
		young := ret.MaxAge == 0 || now.Sub(m.CreatedAt) <= ret.MaxAge
		if inCount && young || next && !h.Undone[m.ID] {
			kept[m.ID] = true
		}
		if !h.Undone[m.ID] {
			next = false
		}
		n++
	}
	keepNeeded(h, kept)
	return kept
}

// collect deletes the records not kept, then every object and payload no
// kept record references.
func (r *Repo) collect(h *History, kept map[string]bool) (GCStats, error) {
	var st GCStats
	live, err := r.liveObjects(h, kept)
	if err != nil {
		return st, err
	}
	var keptMetas []*record.Meta
	for _, m := range h.All {
		if kept[m.ID] {
			keptMetas = append(keptMetas, m)
			continue
		}
		if err := r.deleteMeta(m.ID); err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		st.Snapshots++
	}
	// Target payloads of the collected records go too (a snapshot
	// database on a server is dropped by its backend).
	livePayloads, err := r.livePayloads(keptMetas)
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	if err := r.sweepPayloads(livePayloads); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	// Nor may the last checkpoint's state, which the next begin patches.
	if err := r.dropWatchBase(); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	if err := r.sweepObjects(live, &st); err != nil {
		return st, err
	}
	// The stat cache must not vouch for objects that are gone.
	c := r.loadCache()
	for p, e := range c.entries() {
		if !live[e.Object] {
			c.drop(p)
		}
	}
	if err := r.saveCache(c); err != nil {
		return st, err
	}
	return st, nil
}

// keptRecords chooses the records gc keeps: the keep newest that `list`
// shows, those named in protect, what undo takes next, what redo and
// runs in progress need, and
// the bookkeeping records the kept ones depend on.
func keptRecords(h *History, keep int, protect []string) map[string]bool {
	kept := map[string]bool{}
	for _, id := range protect {
		kept[id] = true
	}
	// keep counts what `list` shows (snaps, runs, pre-restores), not the
	// bookkeeping records; those are kept below as far as undo needs them.
	for i, n := len(h.All)-1, 0; i >= 0 && n < keep; i-- {
		if h.All[i].Kind.Undoable() && !h.All[i].InProgress() {
			kept[h.All[i].ID] = true
			n++
		}
	}
	// And what a plain undo takes next, however many newer ones are
	// undone (the redo chain): without it that undo would find nothing.
	for i := len(h.All) - 1; i >= 0; i-- {
		if m := h.All[i]; m.Kind.Undoable() && !h.Undone[m.ID] && !m.InProgress() {
			kept[m.ID] = true
			break
		}
	}
	keepNeeded(h, kept)
	return kept
}

// keepNeeded adds to kept what redo and runs in progress need, and the
// bookkeeping records the kept ones depend on.
func keepNeeded(h *History, kept map[string]bool) {
	// The redo chain: each pre-undo redo puts back, and what it undid,
	// which undo takes again once redone.
	for _, p := range h.Redo {
		kept[p.ID] = true
		for _, id := range append([]string{p.Undoes}, p.UndoesMore...) {
			if id != "" {
				kept[id] = true
			}
		}
	}
	for _, m := range h.All {
		if m.InProgress() {
			kept[m.ID] = true // a run in progress (or one that died: recover it), an open checkpoint
		}
	}
	// A kept undone snapshot needs the record that undid it, or it would
	// look not undone; a kept pre-undo needs the pre-redo that reverted it.
	for changed := true; changed; {
		changed = false
		for _, m := range h.All {
			if kept[m.ID] {
				continue
			}
			if m.Kind == record.KindPreUndo && undoesKept(m, kept, h) || m.Kind == record.KindPreRedo && kept[m.Redoes] {
				kept[m.ID] = true
				changed = true
			}
		}
	}
}

// undoesKept: a pre-undo reverted a kept snapshot still undone.
func undoesKept(m *record.Meta, kept map[string]bool, h *History) bool {
	for _, id := range append([]string{m.Undoes}, m.UndoesMore...) {
		if kept[id] && h.Undone[id] {
			return true
		}
	}
	return false
}

// liveObjects lists the objects the kept records reference (their
// manifests and every content in them), and those damaged records may.
func (r *Repo) liveObjects(h *History, kept map[string]bool) (map[record.ObjectID]bool, error) {
	live := map[record.ObjectID]bool{}
	for _, m := range h.All {
		if !kept[m.ID] {
			continue
		}
		ids := []string{m.Manifest, m.After}
		for _, k := range m.Marks { // an open checkpoint's (sessions.go)
			ids = append(ids, k.Tree)
		}
		for _, id := range ids {
			if id == "" {
				continue
			}
			oid, _ := record.ParseObjectID(id)
			live[oid] = true
			for _, b := range r.blockIDs(oid) {
				live[b] = true
			}
			mf, err := r.LoadManifest(id)
			if err != nil {
				return nil, fmt.Errorf("gc: snapshot %s: %w", m.ID, err)
			}
			mf.Objects(func(o record.ObjectID) { live[o] = true })
		}
	}
	// What damaged records may name stays until the user deletes them
	// from damaged/: only they can judge what those records were worth.
	salvaged, _, err := r.salvage()
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	for id := range salvaged {
		if !r.HasObject(id) {
			continue
		}
		live[id] = true
		if r.isManifest(id) {
			for _, b := range r.blockIDs(id) {
				live[b] = true
			}
			if mf, err := r.LoadManifest(id.String()); err == nil {
				mf.Objects(func(o record.ObjectID) { live[o] = true })
			}
		}
	}
	return live, nil
}

// sweepObjects deletes every object not live, counting them in st.
func (r *Repo) sweepObjects(live map[record.ObjectID]bool, st *GCStats) error {
	objDir := r.path("objects")
	subs, err := os.ReadDir(objDir)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	for _, sub := range subs {
		if len(sub.Name()) != 2 || !sub.IsDir() {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(objDir, sub.Name()))
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		for _, e := range ents {
			oid, ok := record.ParseObjectID(sub.Name() + e.Name())
			if !ok || live[oid] {
				continue
			}
			if info, err := e.Info(); err == nil {
				st.Bytes += info.Size()
			}
			fsutil.Mutating()
			if err := os.Remove(filepath.Join(objDir, sub.Name(), e.Name())); err != nil {
				return fmt.Errorf("gc: %w", err)
			}
			st.Objects++
		}
	}
	return r.sweepPacks(live, st)
}

// sweepPacks drops the packed contents not live: each pack holding one
// is written again without them (pack.go's repack), and small packs are
// merged on the way, so that many small snapshots do not leave many
// small packs. A pack whose index cannot be read is left for check.
func (r *Repo) sweepPacks(live map[record.ObjectID]bool, st *GCStats) error {
	names, err := r.packNames()
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	var dead, small []string
	for _, name := range names {
		ents, err := r.packIndex(name)
		if err != nil {
			continue
		}
		all, size := true, int64(0)
		for _, e := range ents {
			all = all && live[e.id]
			size += e.len
		}
		switch {
		case !all:
			dead = append(dead, name)
		case size < packTarget/2:
			small = append(small, name)
		}
	}
	if len(dead) == 0 && len(small) < 2 {
		return nil
	}
	dead = append(dead, small...) // written together with the others
	_, n, b, err := r.repack(dead, func(id record.ObjectID, _ []byte) bool { return live[id] }, false)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	st.Objects += n
	st.Bytes += b
	return nil
}
