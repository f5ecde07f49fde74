package record

import (
	"encoding/binary"
	"fmt"
)

// A blocked manifest holds a whole tree's entries in blocks of consecutive
// paths, each a stored object of its own, so that a state that differs
// from another in a few paths is stored by writing the few blocks that
// differ and a list of blocks: what a checkpoint of a watched tree records
// at every begin, at a cost that follows what changed, not what exists.
// It is read whole as any manifest is (the store joins its blocks, then
// checks the whole as a manifest is checked), and a path is found in it by
// reading one block.
//
//	"snapback-manifest-blocks-1\n"
//	the names of the packs the hints name: a count, then each name
//	the blocks: a count, then per block its first path, its object id
//	    (32 bytes), its entries, files and bytes (uvarints), and where
//	    a pack holds it (1 + the pack's place among the names, 0 for
//	    none; offset and length): a hint, read only when it gives the
//	    block's own hash
//
// A block is
//
//	"snapback-manifest-block-1\n" count, entries as a manifest's
//
// whose links may name a file of an earlier block.

// BlocksMagic begins a blocked manifest; BlockMagic, one of its blocks.
const (
	BlocksMagic = "snapback-manifest-blocks-1\n"
	BlockMagic  = "snapback-manifest-block-1\n"
)

// Block is one block of a blocked manifest.
type Block struct {
	First   string // its first path
	ID      ObjectID
	Entries int
	Files   int
	Bytes   int64
	// Where a pack holds it, if known (a hint, checked by the block's hash).
	Pack     string
	Off, Len int64
}

// EncodeBlock serializes a block's entries (sorted).
func EncodeBlock(m Manifest) []byte {
	b := make([]byte, 0, 32+len(m)*96)
	b = append(b, BlockMagic...)
	b = binary.AppendUvarint(b, uint64(len(m)))
	return appendEntries(b, m)
}

// DecodeBlock parses a block: entries as a manifest's, except that a link
// may name a path before the block's (the whole manifest checks it).
func DecodeBlock(b []byte) (Manifest, error) {
	return decodeEntries(b, BlockMagic, "manifest block", false)
}

// EncodeBlocks serializes a blocked manifest's list of blocks.
func EncodeBlocks(bl []Block) []byte {
	b := make([]byte, 0, 64+len(bl)*90)
	b = append(b, BlocksMagic...)
	packs := map[string]int{}
	var names []string
	for i := range bl {
		if p := bl[i].Pack; p != "" && packs[p] == 0 {
			names = append(names, p)
			packs[p] = len(names)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = AppendString(b, n)
	}
	b = binary.AppendUvarint(b, uint64(len(bl)))
	for i := range bl {
		k := &bl[i]
		b = AppendString(b, k.First)
		b = append(b, k.ID[:]...)
		b = binary.AppendUvarint(b, uint64(k.Entries))
		b = binary.AppendUvarint(b, uint64(k.Files))
		b = binary.AppendUvarint(b, uint64(k.Bytes))
		b = binary.AppendUvarint(b, uint64(packs[k.Pack]))
		b = binary.AppendUvarint(b, uint64(k.Off))
		b = binary.AppendUvarint(b, uint64(k.Len))
	}
	return b
}

// maxBlockEntries bounds a block: more is no block snapback writes.
const maxBlockEntries = 1 << 16

// DecodeBlocks parses a blocked manifest's list and checks it: first
// paths valid, sorted and unique, counts in range, no block empty.
func DecodeBlocks(b []byte) ([]Block, error) {
	if len(b) < len(BlocksMagic) || string(b[:len(BlocksMagic)]) != BlocksMagic {
		return nil, fmt.Errorf("%w: blocked manifest: bad magic", ErrCorrupt)
	}
	d := &Decoder{b: b[len(BlocksMagic):], what: "blocked manifest"}
	np := d.Uvarint("pack count")
	if np > uint64(len(d.b))/2 {
		d.fail("pack count")
	}
	var names []string
	for i := uint64(0); i < np && d.err == nil; i++ {
		names = append(names, d.Str("pack name"))
	}
	n := d.Uvarint("count")
	if n > uint64(len(d.b))/40+1 { // a block takes at least 40 bytes
		return nil, fmt.Errorf("%w: blocked manifest: count %d too large for %d bytes", ErrCorrupt, n, len(b))
	}
	out := make([]Block, 0, n)
	used := uint64(0)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var k Block
		k.First = d.Str("first path")
		if d.err == nil && (!ValidPath(k.First) || len(out) > 0 && out[len(out)-1].First >= k.First) {
			return nil, fmt.Errorf("%w: blocked manifest: block %d: first path %q invalid or not sorted", ErrCorrupt, i, k.First)
		}
		copy(k.ID[:], d.Bytes(32, "block id"))
		entries, files, bytes := d.Uvarint("entries"), d.Uvarint("files"), d.Uvarint("bytes")
		if entries == 0 || entries > maxBlockEntries || files > entries || bytes > 1<<62 {
			d.fail("block counts")
		}
		k.Entries, k.Files, k.Bytes = int(entries), int(files), int64(bytes)
		// Each name is first used in its order (one list, one encoding).
		if p := d.Uvarint("pack"); p > uint64(len(names)) || p > used+1 {
			d.fail("pack")
		} else if p > 0 {
			k.Pack, used = names[p-1], max(used, p)
		}
		off, ln := d.Uvarint("offset"), d.Uvarint("length")
		if off > 1<<62 || ln > 1<<62 {
			d.fail("pack offset")
		}
		k.Off, k.Len = int64(off), int64(ln)
		out = append(out, k)
	}
	if d.err != nil {
		return nil, d.err
	}
	if used != uint64(len(names)) {
		d.fail("pack names (one not used)")
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: blocked manifest: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return out, nil
}

// CheckLinks checks what a manifest joined from parts must hold: every
// link names an earlier file that is no link itself.
func (m Manifest) CheckLinks() error {
	for i := range m {
		if l := m[i].Link; l != "" && !isFile(m[:i].Find(l)) {
			return fmt.Errorf("%w: manifest: %q links to %q, not an earlier file", ErrCorrupt, m[i].Path, l)
		}
	}
	return nil
}
