package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// The stat cache (the store's "index", as git calls its own): for each file
// seen, the stat fields that change when its content can have changed, and
// the object that holds that content. A file whose stat still matches is
// not read again. As in git, an entry is trusted only if the file's
// ctime was safely older than the moment it was hashed; otherwise a write
// in the same clock tick as the hash could go unnoticed.
//
// The file ends with the SHA-256 of everything before it. A cache that is
// damaged (a flipped bit, a truncation, an entry pointing at another
// object) is never believed: it is discarded with a warning and the tree
// is read again. The checksum guards against damage, not against someone
// who can write the store: they can change the objects themselves.
//
// Entries are written grouped by directory, in the order of (directory,
// name): a scan looks up a directory's files one after the other, and
// finds them side by side.
const indexMagic = "snapback-index-4\n"

type statKey struct {
	Size, Mtime, Ctime int64
	Ino, Dev           uint64
	Mode               uint32
}

type cacheEntry struct {
	statKey
	Object   record.ObjectID
	HashedAt int64
	// NoXattrs: the file had no xattrs. Setting one changes the ctime, so
	// while the key matches the scan need not list them (most files have
	// none, and listing is the costliest step of an unchanged scan).
	NoXattrs bool
}

// statCache is read from disk at its first use: a scan that needs none
// (of an upper layer, of no paths) must not pay for parsing an index of
// the whole tree, which makes `run -- true` flat in the tree's size.
//
// Lookups see the cache as it was loaded, without a lock (every walker of
// a scan looks up, 100,000 times for as many files); what is put or
// dropped since is kept apart, for entries and the next save. A scan
// looks each path up once, before it hashes (and puts) it.
type statCache struct {
	once sync.Once
	load func() *cacheTable
	base *cacheTable // as loaded, never written after

	mu      sync.Mutex
	over    map[string]*cacheEntry // put since the load, or nil: dropped
	changed bool
}

// ensure loads the cache, once.
func (c *statCache) ensure() {
	c.once.Do(func() { c.base = c.load() })
}

// racyMargin is how much older than the hash a ctime must be to trust the
// entry: generous on filesystems whose timestamps have whole seconds.
func racyMargin(k statKey) int64 {
	if k.Mtime%1e9 == 0 && k.Ctime%1e9 == 0 {
		return 2e9
	}
	return 50e6
}

func (c *statCache) lookup(path string, k statKey) (cacheEntry, bool) {
	c.ensure()
	e, ok := c.base.get(path)
	if !ok || e.statKey != k || k.Ctime >= e.HashedAt-racyMargin(k) || k.Mtime >= e.HashedAt-racyMargin(k) {
		return cacheEntry{}, false
	}
	return e, true
}

func (c *statCache) put(path string, k statKey, obj record.ObjectID, hashedAt int64, noXattrs bool) {
	c.ensure()
	c.mu.Lock()
	if c.over == nil {
		c.over = map[string]*cacheEntry{}
	}
	c.over[path] = &cacheEntry{statKey: k, Object: obj, HashedAt: hashedAt, NoXattrs: noXattrs}
	c.changed = true
	c.mu.Unlock()
}

func (c *statCache) drop(path string) {
	c.ensure()
	c.mu.Lock()
	e, over := c.over[path]
	_, inBase := c.base.get(path)
	if e != nil || !over && inBase {
		if c.over == nil {
			c.over = map[string]*cacheEntry{}
		}
		c.over[path] = nil
		c.changed = true
	}
	c.mu.Unlock()
}

func (s *Store) loadCache() *statCache {
	return &statCache{load: s.readCache}
}

// entries returns a copy of the cache's entries, what was put and dropped
// since the load included; c.mu must not be held.
func (c *statCache) entries() map[string]cacheEntry {
	c.ensure()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.merged()
}

// merged is entries with c.mu held.
func (c *statCache) merged() map[string]cacheEntry {
	out := make(map[string]cacheEntry, len(c.base.paths)+len(c.over))
	for i, p := range c.base.paths {
		if _, over := c.over[p]; !over {
			out[p] = c.base.vals[i]
		}
	}
	for p, e := range c.over {
		if e != nil {
			out[p] = *e
		}
	}
	return out
}

// cacheTable is the stat cache as read: the entries in one slice, in the
// file's order (by directory, then name), and for each directory the
// range of its files, which a lookup searches by name. (A map from every
// path, even to an index, missed the CPU's caches at each lookup: on a
// tree of 100,000 files, building and probing it took a third of a
// checkpoint's CPU time; a map of a few thousand directories stays in
// them.)
type cacheTable struct {
	paths []string
	vals  []cacheEntry
	dirs  map[string]span
}

// span is the range of a directory's entries in a cacheTable.
type span struct{ lo, hi int32 }

// splitPath cuts a path into its directory and the offset of its name.
func splitPath(p string) (dir string, off int) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], i + 1
	}
	return "", 0
}

func (t *cacheTable) get(path string) (cacheEntry, bool) {
	dir, off := splitPath(path)
	g, ok := t.dirs[dir]
	if !ok {
		return cacheEntry{}, false
	}
	name := path[off:]
	ps := t.paths[g.lo:g.hi]
	i := sort.Search(len(ps), func(i int) bool { return ps[i][off:] >= name })
	if i == len(ps) || ps[i][off:] != name {
		return cacheEntry{}, false
	}
	return t.vals[int(g.lo)+i], true
}

func emptyTable() *cacheTable { return &cacheTable{dirs: map[string]span{}} }

func (s *Store) readCache() *cacheTable {
	m, err := s.decodeCache()
	if err != nil {
		// Only an optimization: drop it, so that the next save writes a
		// good one and no other load believes it meanwhile.
		if rerr := os.Remove(s.path("index")); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("%w (and removing it: %v)", err, rerr)
		}
		if s.Warn != nil { // not once only: each load that finds it damaged has removed it
			s.Warn(fmt.Sprintf("stat cache %s is damaged (%v): discarded, every file is read again", s.path("index"), err))
		}
		return emptyTable()
	}
	return m
}

// decodeCache reads and checks the stat cache. No file, or one an older
// version wrote, is an empty cache; anything else that does not check out
// is an error.
func (s *Store) decodeCache() (*cacheTable, error) {
	m := emptyTable()
	b, err := s.readFile(s.path("index"), maxIndexSize)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(b, []byte("snapback-index-1\n")) || bytes.HasPrefix(b, []byte("snapback-index-2\n")) || bytes.HasPrefix(b, []byte("snapback-index-3\n")) {
		// An older format (1 and 2 had no checksum, 3 another order):
		// no sign of damage, an empty cache; the next save replaces it.
		return m, nil
	}
	if len(b) < len(indexMagic)+sha256.Size || string(b[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("%w: bad header or truncated", record.ErrCorrupt)
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if sha256.Sum256(body) != [sha256.Size]byte(sum) {
		return nil, fmt.Errorf("%w: checksum mismatch", record.ErrCorrupt)
	}
	// Entries take about 70 bytes: sized once, the slices are not grown
	// (and copied) a dozen times while 100,000 entries go in.
	m = &cacheTable{paths: make([]string, 0, len(body)/64), vals: make([]cacheEntry, 0, len(body)/64), dirs: map[string]span{}}
	var dir, name string // of the entry before
	lo := int32(-1)      // where dir's entries begin; -1: no entry yet
	d := record.NewDecoder(body[len(indexMagic):], "stat cache")
	// The paths are cut from one string of the whole body: one
	// allocation instead of one per entry.
	whole := string(d.Rest())
	for len(d.Rest()) > 0 && d.Err() == nil {
		n := d.Uvarint("path")
		at := len(whole) - len(d.Rest())
		d.Bytes(n, "path")
		if d.Err() != nil {
			break
		}
		p := whole[at : at+int(n)]
		var e cacheEntry
		e.Size = d.Varint("size")
		e.Mtime = d.Varint("mtime")
		e.Ctime = d.Varint("ctime")
		e.Ino = d.Uvarint("ino")
		e.Dev = d.Uvarint("dev")
		e.Mode = d.U32("mode")
		copy(e.Object[:], d.Bytes(32, "object"))
		e.HashedAt = d.Varint("hashed")
		x := d.Bytes(1, "flags")
		if d.Err() != nil {
			break
		}
		if !record.ValidPath(p) {
			return nil, fmt.Errorf("%w: invalid path %q", record.ErrCorrupt, p)
		}
		e.NoXattrs = x[0]&1 != 0
		if len(m.vals) == 1<<31-1 {
			return nil, fmt.Errorf("%w: too many entries", record.ErrCorrupt)
		}
		// In order, each path once: a directory's entries form one
		// span, which get can search.
		pd, off := splitPath(p)
		n32 := int32(len(m.vals))
		switch {
		case lo >= 0 && pd == dir:
			if p[off:] <= name {
				return nil, fmt.Errorf("%w: %q out of order", record.ErrCorrupt, p)
			}
		case lo >= 0 && pd < dir:
			return nil, fmt.Errorf("%w: %q out of order", record.ErrCorrupt, p)
		default:
			if lo >= 0 {
				m.dirs[dir] = span{lo, n32}
			}
			dir, lo = pd, n32
		}
		name = p[off:]
		m.paths = append(m.paths, p)
		m.vals = append(m.vals, e)
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	if lo >= 0 {
		m.dirs[dir] = span{lo, int32(len(m.vals))}
	}
	return m, nil
}

// lazySaveMin: a cache of fewer entries is rewritten at every change
// (it takes less than half a megabyte).
const lazySaveMin = 4096

// deferSave says whether the changes since the load are better left
// unsaved, with c.mu held. Rewriting the cache costs in proportion to its
// size (10 MB, 100 ms of CPU time and an fsync at 100,000 files), reading a
// file it lacks costs one open and one hash: an agent's turn that changed
// ten files of a large tree would pay the first twice (at its begin and
// its end) to spare the second. So a few changed entries wait: each scan
// reads their files again (and puts them again: they are counted again),
// until there are as many as the square root of the cache's size (316 at
// 100,000 entries, which balances the two costs over a run of turns) or
// their contents outweigh the cache (64 bytes an entry). A drop is always saved: the
// cache must not vouch for an object gc has deleted. Leaving entries out is
// safe: a file the cache does not vouch for is read.
func (c *statCache) deferSave() bool {
	n := len(c.base.paths)
	if n < lazySaveMin || len(c.over)*len(c.over) >= n {
		return false
	}
	var bytes int64
	for _, e := range c.over {
		if e == nil {
			return false
		}
		bytes += e.Size
	}
	return bytes < int64(n)*64
}

func (s *Store) saveCache(c *statCache) error {
	// The cache vouches that the store holds what it names: the contents
	// waiting for a pack must be on disk first.
	if err := s.flushPack(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.changed || c.deferSave() {
		return nil
	}
	m := c.merged()
	paths := make([]string, 0, len(m))
	for p := range m {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		di, oi := splitPath(paths[i])
		dj, oj := splitPath(paths[j])
		if di != dj {
			return di < dj
		}
		return paths[i][oi:] < paths[j][oj:]
	})
	b := make([]byte, 0, len(indexMagic)+len(m)*100)
	b = append(b, indexMagic...)
	for _, p := range paths {
		e := m[p]
		b = record.AppendString(b, p)
		b = binary.AppendVarint(b, e.Size)
		b = binary.AppendVarint(b, e.Mtime)
		b = binary.AppendVarint(b, e.Ctime)
		b = binary.AppendUvarint(b, e.Ino)
		b = binary.AppendUvarint(b, e.Dev)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = append(b, e.Object[:]...)
		b = binary.AppendVarint(b, e.HashedAt)
		var flags byte
		if e.NoXattrs {
			flags |= 1
		}
		b = append(b, flags)
	}
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)
	c.changed = false
	return fsutil.WriteFileAtomic(s.path("index"), b, 0o600)
}
