package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// Packs. A content of at most packMaxObject bytes is not stored as a file
// of its own: a 100-byte object costs a whole block and an inode, so a
// store of a tree of small files took more room than the tree. Small
// contents wait in memory and are written together, at the store's next
// Flush (or when packTarget bytes wait, or with the blocks of a blocked
// manifest: blocked.go), as one pack file:
//
//	packs/<SHA-256 of the file, 64 hex>.pack
//
//	"snapback-pack/1\n"                     the header, 16 bytes
//	the contents, one after another
//	the index: per content its SHA-256 (32 bytes), offset and length
//	    (8 bytes each, big-endian)
//	count (8), the index's offset (8), "snapback-index/1" (16)
//
// A pack is written whole in tmp/, synced, renamed into packs/ and the
// directory synced before Flush returns, and before the stat cache is
// saved (it vouches for contents): so before any record names what it
// holds. A pack is complete under its name or absent, and never changed:
// gc writes the live contents of a pack that holds dead ones into a new
// pack and then removes the old one (a crash between leaves both). A
// content in two packs is read from the first by name, or from another
// when the first does not match its hash; gc keeps one copy of it, an
// intact one if any pack has one.
//
// A pack is input from outside. Its index is checked against the file
// (size bounded, every entry inside the contents, none larger than
// packMaxEntry) before any of it is used; a pack whose index fails is
// left alone (its contents count as missing, with a warning, and `check
// --repair` sets it aside). Each content is checked against its SHA-256
// as it is read, as a loose object's is: ReadObject and check here, the
// applier and the archive writer as they copy it.
//
// Stores written before packs existed hold only loose objects; they are
// read as before, and a content stored loose is never packed again.

const (
	packMaxObject = 16 << 10 // the largest content packed
	// packMaxEntry bounds an entry of a pack: a content, or a block of a
	// blocked manifest (blocked.go), which may be larger.
	packMaxEntry   = 64 << 10
	packTarget     = 32 << 20 // a pack is written once this many bytes wait
	packMaxEntries = 1 << 20  // ... or this many contents
	packHeaderLen  = 16
	packEntryLen   = 32 + 8 + 8
	packTrailerLen = 8 + 8 + 16
	// maxPackFile bounds a pack file: what the writer can make, rounded up.
	maxPackFile = 128 << 20
	packsDir    = "packs"
	packSuffix  = ".pack"
)

var (
	packMagic      = []byte("snapback-pack/1\n")
	packIndexMagic = []byte("snapback-index/1")
)

// packEntry is one content of a pack: where it is in the file.
type packEntry struct {
	id       record.ObjectID
	off, len int64
}

// packLoc says in which pack a content is.
type packLoc struct {
	pack string // the file name in packs/
	off  int64
	len  int64
}

// packBuf is a pack being made: the header and contents so far, and the
// index.
type packBuf struct {
	data []byte
	ents []packEntry
	at   map[record.ObjectID]int // index in ents
}

func (p *packBuf) has(id record.ObjectID) bool { _, ok := p.at[id]; return ok }

func (p *packBuf) add(id record.ObjectID, b []byte) {
	if p.data == nil {
		p.data = append(make([]byte, 0, 1<<20), packMagic...)
		p.at = map[record.ObjectID]int{}
	}
	p.at[id] = len(p.ents)
	p.ents = append(p.ents, packEntry{id: id, off: int64(len(p.data)), len: int64(len(b))})
	p.data = append(p.data, b...)
}

func (p *packBuf) content(id record.ObjectID) ([]byte, bool) {
	i, ok := p.at[id]
	if !ok {
		return nil, false
	}
	e := p.ents[i]
	return bytes.Clone(p.data[e.off : e.off+e.len]), true
}

func (p *packBuf) full() bool {
	return len(p.data) >= packTarget || len(p.ents) >= packMaxEntries
}

// validPackName reports whether name is a pack's file name.
func validPackName(name string) bool {
	h, ok := strings.CutSuffix(name, packSuffix)
	if !ok || len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ { // lower-case hex (the store is listed at every open)
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// loadPacksLocked reads the index of every pack, once. A pack whose
// index cannot be read is noted in badPacks, with a warning.
func (s *Store) loadPacksLocked() {
	if s.packed != nil {
		return
	}
	s.packed, s.copies, s.badPacks = map[record.ObjectID]packLoc{}, map[record.ObjectID][]packLoc{}, map[string]error{}
	names, err := s.packNames()
	if err != nil {
		s.badPacks[packsDir] = err
		s.warn(fmt.Sprintf("%s cannot be read (%v): the contents packed there count as missing; `snapback check` says more", s.path(packsDir), err))
		return
	}
	for _, name := range names {
		ents, err := s.readPackIndex(name)
		if err != nil {
			s.badPacks[name] = err
			s.warn(fmt.Sprintf("pack %s cannot be read (%v): its contents count as missing; `snapback check --repair` sets it aside", s.path(packsDir, name), err))
			continue
		}
		for _, e := range ents {
			loc := packLoc{pack: name, off: e.off, len: e.len}
			if _, dup := s.packed[e.id]; dup {
				s.copies[e.id] = append(s.copies[e.id], loc)
			} else {
				s.packed[e.id] = loc
			}
		}
	}
}

// missing is the error that content is missing from the store
// (ErrMissingObject): what is missing, and the first pack that could not
// be read, if any (its contents count as missing), with why and what sets
// it aside. The layout check at open does not look at each pack (there
// is one per turn), so this is where a damaged or planted one is named.
func (s *Store) missing(what string) error {
	return fmt.Errorf("%w: %s%s", ErrMissingObject, what, s.unreadPacks())
}

// unreadPacks is missing's account of the packs that could not be read;
// "" when none.
func (s *Store) unreadPacks() string {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	if len(s.badPacks) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.badPacks))
	for n := range s.badPacks {
		names = append(names, n)
	}
	sort.Strings(names)
	p := s.path(packsDir)
	if names[0] != packsDir {
		p = s.path(packsDir, names[0])
	}
	more := ""
	if len(names) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(names)-1)
	}
	return fmt.Sprintf("; %s cannot be read (%v)%s: `snapback check --repair` sets it aside", p, s.badPacks[names[0]], more)
}

// packNames lists the packs, sorted (nil when there is no packs/).
func (s *Store) packNames() ([]string, error) {
	d, err := s.openDir(packsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names, err := d.ReadDirNames()
	d.Close() // read-only
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if validPackName(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// maxOpenPacks bounds the packs a Store keeps open: a store of many
// packs must not run out of file descriptors.
const maxOpenPacks = 64

// packFileLocked returns the open pack name, kept open (a restore reads
// thousands of contents from one pack) until maxOpenPacks are. The caller
// holds packMu.
func (s *Store) packFileLocked(name string) (*os.File, error) {
	if f := s.packFiles[name]; f != nil {
		return f, nil
	}
	f, err := s.openPack(name)
	if err != nil {
		return nil, err
	}
	if len(s.packFiles) >= maxOpenPacks {
		for n, g := range s.packFiles {
			g.Close() // read-only
			delete(s.packFiles, n)
		}
	}
	if s.packFiles == nil {
		s.packFiles = map[string]*os.File{}
	}
	s.packFiles[name] = f
	return f, nil
}

// openPack opens the pack name: no symlink followed, no FIFO waited on,
// a regular file of the store's owner within the bound.
func (s *Store) openPack(name string) (*os.File, error) {
	d, err := s.openDir(packsDir)
	if err != nil {
		return nil, err
	}
	defer d.Close() // read-only
	f, err := d.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w (a symlink)", errNotRegular)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close() // read-only
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%w (%s)", errNotRegular, kindName(uint32(st.Mode)))
	case !s.trusted(st.Uid):
		err = fmt.Errorf("%w: owned by uid %d, not by the store's owner (uid %d)", ErrUntrusted, st.Uid, s.owner)
	case st.Size > maxPackFile:
		err = fmt.Errorf("%d bytes, more than a pack ever holds (%d)", st.Size, maxPackFile)
	}
	if err != nil {
		f.Close() // read-only
		return nil, err
	}
	return f, nil
}

// readPackIndex reads and checks the index of the pack name.
func (s *Store) readPackIndex(name string) ([]packEntry, error) {
	f, err := s.openPack(name)
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return parsePackIndex(f, st.Size())
}

// parsePackIndex reads the index of a pack of size bytes from r and
// checks every entry against the file.
func parsePackIndex(r io.ReaderAt, size int64) ([]packEntry, error) {
	bad := func(why string) error { return fmt.Errorf("%w: pack: %s", record.ErrCorrupt, why) }
	if size < packHeaderLen+packTrailerLen || size > maxPackFile {
		return nil, bad(fmt.Sprintf("%d bytes", size))
	}
	var hdr [packHeaderLen]byte
	var tr [packTrailerLen]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil, err
	}
	if _, err := r.ReadAt(tr[:], size-packTrailerLen); err != nil {
		return nil, err
	}
	if !bytes.Equal(hdr[:], packMagic) || !bytes.Equal(tr[16:], packIndexMagic) {
		return nil, bad("bad magic")
	}
	n, idxOff := binary.BigEndian.Uint64(tr[0:8]), binary.BigEndian.Uint64(tr[8:16])
	if n > packMaxEntries || idxOff < packHeaderLen || idxOff > uint64(size) ||
		idxOff+n*packEntryLen+packTrailerLen != uint64(size) {
		return nil, bad("the index does not fit the file")
	}
	buf := make([]byte, n*packEntryLen)
	if _, err := r.ReadAt(buf, int64(idxOff)); err != nil {
		return nil, err
	}
	out := make([]packEntry, n)
	for i := range out {
		b := buf[i*packEntryLen:]
		off, l := binary.BigEndian.Uint64(b[32:40]), binary.BigEndian.Uint64(b[40:48])
		if off < packHeaderLen || off > idxOff || l > packMaxEntry || l > idxOff-off {
			return nil, bad(fmt.Sprintf("entry %d lies outside the contents", i))
		}
		copy(out[i].id[:], b[:32])
		out[i].off, out[i].len = int64(off), int64(l)
	}
	return out, nil
}

// encodePack finishes p: the index and trailer after the contents.
func encodePack(p *packBuf) []byte {
	b := p.data
	idxOff := uint64(len(b))
	for _, e := range p.ents {
		b = append(b, e.id[:]...)
		b = binary.BigEndian.AppendUint64(b, uint64(e.off))
		b = binary.BigEndian.AppendUint64(b, uint64(e.len))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(p.ents)))
	b = binary.BigEndian.AppendUint64(b, idxOff)
	return append(b, packIndexMagic...)
}

// writePackLocked writes p as a pack, durably (see above), and adds its
// contents to the loaded index. The caller holds packMu.
func (s *Store) writePackLocked(p *packBuf) error {
	_, err := s.writePackNamed(p)
	return err
}

// writePackNamed is writePackLocked, saying the pack's name.
func (s *Store) writePackNamed(p *packBuf) (string, error) {
	if len(p.ents) == 0 {
		return "", nil
	}
	b := encodePack(p)
	sum := sha256.Sum256(b)
	name := hex.EncodeToString(sum[:]) + packSuffix
	dir := s.path(packsDir)
	fail := func(err error) (string, error) { return "", fmt.Errorf("write pack: %w", err) }
	fsutil.Mutating()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fail(err)
	}
	fsutil.Mutating()
	tmp, err := os.CreateTemp(s.path("tmp"), "pack-*")
	if err != nil {
		return fail(err)
	}
	fsutil.Mutating()
	_, err = tmp.Write(b)
	if err == nil {
		fsutil.Mutating()
		err = tmp.Chmod(0o400)
	}
	if err == nil {
		fsutil.Mutating()
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fsutil.Mutating()
		err = os.Rename(tmp.Name(), s.path(packsDir, name))
	}
	if err != nil {
		os.Remove(tmp.Name()) // best effort: recover empties tmp/
		return fail(err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fail(err)
	}
	if s.packed != nil { // else read with the others when first needed
		for _, e := range p.ents {
			s.packed[e.id] = packLoc{pack: name, off: e.off, len: e.len}
		}
	}
	*p = packBuf{}
	return name, nil
}

// putPacked stores the small content b: in the pack being made, unless
// the store holds it already.
func (s *Store) putPacked(b []byte) (record.ObjectID, error) {
	id := record.ObjectID(sha256.Sum256(b))
	s.packMu.Lock()
	defer s.packMu.Unlock()
	if !s.PackBlind {
		s.loadPacksLocked()
	}
	if _, ok := s.packed[id]; ok || s.pend.has(id) {
		return id, nil
	}
	if _, err := os.Lstat(s.objectPath(id)); err == nil {
		return id, nil
	}
	s.pend.add(id, b)
	if s.pend.full() {
		return id, s.writePackLocked(&s.pend)
	}
	return id, nil
}

// flushPack writes the pack being made, if any.
func (s *Store) flushPack() error {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	return s.writePackLocked(&s.pend)
}

// packedSize returns the length of a packed (or waiting) content.
func (s *Store) packedSize(id record.ObjectID) (int64, bool) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	s.loadPacksLocked()
	if i, ok := s.pend.at[id]; ok {
		return s.pend.ents[i].len, true
	}
	loc, ok := s.packed[id]
	return loc.len, ok
}

// readPacked reads a packed (or waiting) content as stored, unchecked;
// ok is false when no pack holds it. A verb that only reads holds no
// lock: a gc may have packed the content again and removed the pack this
// process read the index of, so a pack gone is looked for once more.
func (s *Store) readPacked(id record.ObjectID) ([]byte, bool, error) {
	b, ok, err := s.readPackedOnce(id)
	if errors.Is(err, fs.ErrNotExist) {
		s.forgetPacks()
		b, ok, err = s.readPackedOnce(id)
	}
	return b, ok, err
}

func (s *Store) readPackedOnce(id record.ObjectID) ([]byte, bool, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	s.loadPacksLocked()
	if b, ok := s.pend.content(id); ok {
		return b, true, nil
	}
	loc, ok := s.packed[id]
	if !ok {
		return nil, false, nil
	}
	b, err := s.readAtLocked(loc.pack, loc.off, loc.len)
	if copies := s.copies[id]; len(copies) > 0 && (err != nil || sha256.Sum256(b) != id) {
		// Packed more than once (a watched checkpoint packs blind, and a
		// crash in gc leaves both): another copy may be intact.
		for _, c := range copies {
			if cb, cerr := s.readAtLocked(c.pack, c.off, c.len); cerr == nil && sha256.Sum256(cb) == id {
				return cb, true, nil
			}
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w: object %s in pack %s: %w", record.ErrCorrupt, id, loc.pack, err)
	}
	return b, true, err
}

// readAtLocked reads n bytes at off of the pack name (under packMu: an
// open pack may be closed to open another).
func (s *Store) readAtLocked(name string, off, n int64) ([]byte, error) {
	f, err := s.packFileLocked(name)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// packedIDs adds the packed (and waiting) contents to set.
func (s *Store) packedIDs(set map[record.ObjectID]bool) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	s.loadPacksLocked()
	for id := range s.packed {
		set[id] = true
	}
	for id := range s.pend.at {
		set[id] = true
	}
}

// forgetPacks closes the open packs and drops the loaded index, so that
// the next use reads packs/ again (after gc or check --repair changed it).
func (s *Store) forgetPacks() {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	for _, f := range s.packFiles {
		f.Close() // read-only
	}
	s.packFiles, s.packed, s.copies, s.badPacks = nil, nil, nil, nil
}

// packIndex reads and checks the index of the pack name.
func (s *Store) packIndex(name string) ([]packEntry, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	return s.readPackIndex(name)
}

// readEntry reads one entry of the pack name, as stored.
func (s *Store) readEntry(name string, e packEntry) ([]byte, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	return s.readAtLocked(name, e.off, e.len)
}

// repack writes the entries of the packs named in from that keep says
// to keep into new packs, then removes those packs (set aside into
// damaged/ instead when aside is set: check --repair deletes nothing).
// The new packs are durable before an old one goes, so a crash between
// leaves contents twice, never missing. It returns where each old pack
// went ("" when removed) and what it dropped: entries and bytes.
func (s *Store) repack(from []string, keep func(id record.ObjectID, b []byte) bool, aside bool) (map[string]string, int, int64, error) {
	var p packBuf
	dropped, bytesDropped := 0, int64(0)
	made := map[string]bool{} // a new pack may be byte for byte an old one
	put := map[record.ObjectID]bool{}
	// A content packed twice is kept once, from an intact copy if one
	// of the packs has it: a damaged copy only when no other comes.
	damaged := map[record.ObjectID][]byte{}
	var damagedOrder []record.ObjectID
	add := func(id record.ObjectID, b []byte) error {
		put[id] = true
		p.add(id, b)
		if p.full() {
			return s.writePack(&p, made)
		}
		return nil
	}
	for _, name := range from {
		ents, err := s.packIndex(name)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("repack %s: %w", name, err)
		}
		for _, e := range ents {
			b, err := s.readEntry(name, e)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("repack %s: %w", name, err)
			}
			_, seen := damaged[e.id]
			switch {
			case put[e.id] || !keep(e.id, b):
			case sha256.Sum256(b) != e.id:
				if !seen {
					damaged[e.id] = b
					damagedOrder = append(damagedOrder, e.id)
					continue
				}
			default:
				if seen {
					dropped++ // the damaged copy seen before
					bytesDropped += int64(len(damaged[e.id]))
					delete(damaged, e.id)
				}
				if err := add(e.id, b); err != nil {
					return nil, 0, 0, err
				}
				continue
			}
			dropped++
			bytesDropped += e.len
		}
	}
	for _, id := range damagedOrder {
		if b, ok := damaged[id]; ok {
			if err := add(id, b); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if err := s.writePack(&p, made); err != nil {
		return nil, 0, 0, err
	}
	s.forgetPacks() // (closes the old packs)
	went := map[string]string{}
	for _, name := range from {
		if made[name] {
			continue
		}
		if aside {
			to, err := s.moveAside(s.path(packsDir, name), "pack-"+name)
			if err != nil {
				return nil, 0, 0, err
			}
			went[name] = to
			continue
		}
		fsutil.Mutating()
		if err := os.Remove(s.path(packsDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, 0, fmt.Errorf("repack: %w", err)
		}
		went[name] = ""
	}
	if err := fsutil.SyncDir(s.path(packsDir)); err != nil {
		return nil, 0, 0, err
	}
	return went, dropped, bytesDropped, nil
}

// writePack writes p as a pack now, noting its name in made.
func (s *Store) writePack(p *packBuf, made map[string]bool) error {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	name, err := s.writePackNamed(p)
	made[name] = true
	return err
}
