package snapshot

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/snapback/snapback/snapshot/record"
)

// Blocked manifests (record/blocks.go) are how a watched checkpoint
// records the tree's state: its begin rewrites only the blocks that hold
// a changed path, and its end finds the state before of the paths that
// changed by reading the blocks that hold them, so that neither costs
// what the tree holds. Everything else reads one as any manifest
// ([Store.LoadManifest] joins and checks it); no closed record names one
// (an end narrows the checkpoint to plain manifests of what changed).

// blockBytes is the size a block is cut at: packed (up to packMaxEntry),
// so that the blocks a begin writes go into one pack (one file, one
// sync), and room to grow before they are cut again. Larger blocks make
// the list shorter (a begin writes it whole: 170 KB at 1,000,000 files)
// and each block longer to read (an end reads a few).
var blockBytes = 24 << 10 // (a test sets it smaller)

// isBlocked reports whether the stored object b is a blocked manifest.
func isBlocked(b []byte) bool {
	return len(b) >= len(record.BlocksMagic) && string(b[:len(record.BlocksMagic)]) == record.BlocksMagic
}

// decodeManifest decodes a stored manifest, plain or blocked (whose
// blocks are read, checked and joined).
func (s *Store) decodeManifest(b []byte) (record.Manifest, error) {
	if !isBlocked(b) {
		return record.DecodeManifest(b)
	}
	bl, err := record.DecodeBlocks(b)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, k := range bl {
		n += k.Entries
	}
	m := make(record.Manifest, 0, n)
	for i := range bl {
		part, err := s.loadBlock(bl, i)
		if err != nil {
			return nil, err
		}
		m = append(m, part...)
	}
	return m, m.CheckLinks()
}

// loadBlock reads block i of bl and checks it against the list: its
// hash, its count, its first path, and that its paths come before the
// next block's.
func (s *Store) loadBlock(bl []record.Block, i int) (record.Manifest, error) {
	k := bl[i]
	var b []byte
	if k.Pack != "" && validPackName(k.Pack) && k.Len > 0 && k.Len <= packMaxEntry {
		s.packMu.Lock()
		b, _ = s.readAtLocked(k.Pack, k.Off, k.Len)
		s.packMu.Unlock()
	}
	if b == nil || sha256.Sum256(b) != k.ID { // the hint is wrong, or the pack gone (a gc repacked it)
		var err error
		if b, err = s.readObject(k.ID, maxManifestSize); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("load manifest block: %w", s.missing(k.ID.String()))
		} else if err != nil {
			return nil, fmt.Errorf("load manifest block %s: %w: %w", k.ID, record.ErrCorrupt, err)
		}
		if sha256.Sum256(b) != k.ID {
			return nil, fmt.Errorf("%w: manifest block %s does not match its hash", record.ErrCorrupt, k.ID)
		}
	}
	m, err := record.DecodeBlock(b)
	if err != nil {
		return nil, fmt.Errorf("manifest block %s: %w", k.ID, err)
	}
	files, bytes := counts(m)
	switch {
	case len(m) != k.Entries || files != k.Files || bytes != k.Bytes:
		err = fmt.Errorf("holds %d entries, %d files, %d bytes; its list says %d, %d, %d", len(m), files, bytes, k.Entries, k.Files, k.Bytes)
	case m[0].Path != k.First:
		err = fmt.Errorf("begins at %q; its list says %q", m[0].Path, k.First)
	case i+1 < len(bl) && m[len(m)-1].Path >= bl[i+1].First:
		err = fmt.Errorf("holds %q, not before the next block's %q", m[len(m)-1].Path, bl[i+1].First)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: manifest block %s: %w", record.ErrCorrupt, k.ID, err)
	}
	return m, nil
}

// blockIDs lists the blocks of the manifest id (none: plain), for gc.
func (s *Store) blockIDs(id record.ObjectID) []record.ObjectID {
	b, err := s.readObject(id, maxManifestSize)
	if err != nil || !isBlocked(b) || sha256.Sum256(b) != id {
		return nil
	}
	bl, err := record.DecodeBlocks(b)
	if err != nil {
		return nil
	}
	out := make([]record.ObjectID, len(bl))
	for i, k := range bl {
		out[i] = k.ID
	}
	return out
}

// cutBlocks cuts m (sorted) into blocks of about blockBytes encoded.
func cutBlocks(m record.Manifest) []record.Manifest {
	var out []record.Manifest
	start, size := 0, 0
	for i := range m {
		e := &m[i]
		n := len(e.Path) + len(e.Target) + len(e.Link) + 56
		for _, x := range e.Xattrs {
			n += len(x.Name) + len(x.Value) + 4
		}
		if size+n > blockBytes && i > start {
			out = append(out, m[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(m) {
		out = append(out, m[start:])
	}
	return out
}

// putBlocks stores parts as blocks: the small ones in packs (their place
// kept as each block's hint), with the small contents waiting for the
// store's next Flush, a larger one loose. All are durable when it
// returns.
func (r *Repo) putBlocks(parts []record.Manifest) ([]record.Block, error) {
	out := make([]record.Block, len(parts))
	var p packBuf
	var waiting []int // the blocks in p
	write := func() error {
		r.packMu.Lock()
		// The small contents waiting for the store's next Flush (those
		// of the files just read) go in the same pack: one file and
		// two syncs fewer than a pack of their own.
		for _, e := range r.pend.ents {
			if !p.has(e.id) {
				p.add(e.id, r.pend.data[e.off:e.off+e.len])
			}
		}
		r.pend = packBuf{}
		ents := append([]packEntry(nil), p.ents...)
		at := p.at
		name, err := r.writePackNamed(&p) // (empties p)
		r.packMu.Unlock()
		if err != nil {
			return err
		}
		for _, i := range waiting {
			e := ents[at[out[i].ID]]
			out[i].Pack, out[i].Off, out[i].Len = name, e.off, e.len
		}
		waiting = waiting[:0]
		return nil
	}
	for i, part := range parts {
		b := record.EncodeBlock(part)
		k := &out[i]
		k.First, k.ID, k.Entries = part[0].Path, sha256.Sum256(b), len(part)
		k.Files, k.Bytes = counts(part)
		if len(b) > packMaxEntry {
			if _, err := r.PutBytes(b); err != nil {
				return nil, err
			}
			continue
		}
		if !p.has(k.ID) {
			p.add(k.ID, b)
		}
		waiting = append(waiting, i)
		if p.full() {
			if err := write(); err != nil {
				return nil, err
			}
		}
	}
	if len(waiting) > 0 {
		if err := write(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// recordBlocked stores m as a blocked manifest and returns its id.
func (r *Repo) recordBlocked(m record.Manifest) (string, error) {
	bl, err := r.putBlocks(cutBlocks(m))
	if err != nil {
		return "", err
	}
	id, err := r.PutBytes(record.EncodeBlocks(bl))
	return id.String(), err
}

// blockedTree is a blocked manifest read a block at a time.
type blockedTree struct {
	s      *Store
	id     string
	blocks []record.Block
	got    map[int]record.Manifest
}

// openBlocked reads the list of the blocked manifest id; ok is false
// when id is a plain manifest.
func (s *Store) openBlocked(id string) (t *blockedTree, ok bool, err error) {
	oid, valid := record.ParseObjectID(id)
	if !valid {
		return nil, false, fmt.Errorf("%w: manifest id %q", record.ErrCorrupt, id)
	}
	b, err := s.readObject(oid, maxManifestSize)
	if err != nil {
		return nil, false, fmt.Errorf("load manifest %s: %w", oid, err)
	}
	if sha256.Sum256(b) != oid {
		return nil, false, fmt.Errorf("load manifest: %w: object %s does not match its hash", record.ErrCorrupt, oid)
	}
	if !isBlocked(b) {
		return nil, false, nil
	}
	bl, err := record.DecodeBlocks(b)
	if err != nil {
		return nil, false, fmt.Errorf("load manifest %s: %w", oid, err)
	}
	return &blockedTree{s: s, id: id, blocks: bl, got: map[int]record.Manifest{}}, true, nil
}

// counts returns the files and bytes of the whole state.
func (t *blockedTree) counts() (files int, bytes int64) {
	for _, k := range t.blocks {
		files += k.Files
		bytes += k.Bytes
	}
	return files, bytes
}

// at returns the index of the block whose range holds p (0 before the
// first), -1 when there is none.
func (t *blockedTree) at(p string) int {
	if len(t.blocks) == 0 {
		return -1
	}
	i := sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].First > p }) - 1
	return max(i, 0)
}

func (t *blockedTree) block(i int) (record.Manifest, error) {
	if m, ok := t.got[i]; ok {
		return m, nil
	}
	m, err := t.s.loadBlock(t.blocks, i)
	if err != nil {
		return nil, err
	}
	t.got[i] = m
	return m, nil
}

// find returns p's entry, or nil.
func (t *blockedTree) find(p string) (*record.Entry, error) {
	i := t.at(p)
	if i < 0 {
		return nil, nil
	}
	m, err := t.block(i)
	if err != nil {
		return nil, err
	}
	return m.Find(p), nil
}

// below returns the entries below the directory p, in order.
func (t *blockedTree) below(p string) (record.Manifest, error) {
	lo, hi := p+"/", p+"0" // '0' follows '/': the paths below p are those between
	var out record.Manifest
	for i := t.at(lo); i >= 0 && i < len(t.blocks) && (i == t.at(lo) || t.blocks[i].First < hi); i++ {
		m, err := t.block(i)
		if err != nil {
			return nil, err
		}
		j := sort.Search(len(m), func(j int) bool { return m[j].Path >= lo })
		for ; j < len(m) && m[j].Path < hi; j++ {
			out = append(out, m[j])
		}
	}
	return out, nil
}

// patch stores the state t patched: the entries at listed paths and
// below those deep says are dropped, and fresh's (sorted) put in. Only
// the blocks that held or now hold such a path are written again; it
// returns the new state's id (t's own when no block changed) and its
// counts.
func (t *blockedTree) patch(r *Repo, listed []string, deep map[string]bool, fresh record.Manifest) (string, int, int64, error) {
	defer r.packBlind()() // (its list is stored looked up only as a loose object)
	drop := map[string]bool{}
	hit := map[int]bool{}
	for _, p := range listed {
		drop[p] = true
		if i := t.at(p); i >= 0 {
			hit[i] = true
		}
		if deep[p] {
			lo, hi := p+"/", p+"0"
			for i := t.at(lo); i >= 0 && i < len(t.blocks) && (i == t.at(lo) || t.blocks[i].First < hi); i++ {
				hit[i] = true
			}
		}
	}
	under := func(p string) bool {
		if len(deep) == 0 {
			return false
		}
		for a := record.Parent(p); a != ""; a = record.Parent(a) {
			if deep[a] {
				return true
			}
		}
		return false
	}
	// fresh's entries, by the block whose range holds them.
	into := map[int]record.Manifest{}
	for _, e := range fresh {
		i := t.at(e.Path)
		into[i] = append(into[i], e)
		hit[i] = true
	}
	if len(t.blocks) == 0 { // an empty tree: fresh is the whole state
		id, err := r.recordBlocked(fresh)
		files, bytes := counts(fresh)
		return id, files, bytes, err
	}
	order := make([]int, 0, len(hit))
	for i := range hit {
		order = append(order, i)
	}
	sort.Ints(order)
	var parts []record.Manifest
	var at []int // the block each part replaces
	for _, i := range order {
		old, err := t.block(i)
		if err != nil {
			return "", 0, 0, err
		}
		add := into[i]
		m := make(record.Manifest, 0, len(old)+len(add))
		j := 0
		for _, e := range old {
			if drop[e.Path] || under(e.Path) {
				continue
			}
			for ; j < len(add) && add[j].Path < e.Path; j++ {
				m = append(m, add[j])
			}
			m = append(m, e)
		}
		m = append(m, add[j:]...)
		if same(old, m) {
			continue
		}
		for _, c := range cutBlocks(m) {
			parts = append(parts, c)
			at = append(at, i)
		}
		if len(m) == 0 {
			at = append(at, i) // the block goes, with no part
			parts = append(parts, nil)
		}
	}
	if len(parts) == 0 {
		files, bytes := t.counts()
		return t.id, files, bytes, nil
	}
	var store []record.Manifest
	for _, p := range parts {
		if p != nil {
			store = append(store, p)
		}
	}
	made, err := r.putBlocks(store)
	if err != nil {
		return "", 0, 0, err
	}
	// The new list: each block replaced by its parts, in order.
	repl := map[int][]record.Block{}
	k := 0
	for n, i := range at {
		if _, ok := repl[i]; !ok {
			repl[i] = []record.Block{}
		}
		if parts[n] != nil {
			repl[i] = append(repl[i], made[k])
			k++
		}
	}
	var bl []record.Block
	for i, b := range t.blocks {
		if r, ok := repl[i]; ok {
			bl = append(bl, r...)
			continue
		}
		bl = append(bl, b)
	}
	id, err := r.PutBytes(record.EncodeBlocks(bl))
	if err != nil {
		return "", 0, 0, err
	}
	nt := blockedTree{blocks: bl}
	files, bytes := nt.counts()
	return id.String(), files, bytes, nil
}

// same reports whether two runs of entries are the same as stored.
func same(x, y record.Manifest) bool {
	if len(x) != len(y) {
		return false
	}
	return string(record.EncodeBlock(x)) == string(record.EncodeBlock(y))
}
