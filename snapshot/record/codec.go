package record

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
)

// The manifest encoding: a magic line, then a uvarint count and the
// entries, each a sequence of length-prefixed byte strings and varints.
// Paths are bytes, so every name the OS allows round-trips exactly. The
// store addresses a manifest by its SHA-256, which guards its integrity;
// the Decoder still checks every length against the input so that a
// damaged or hostile file yields an error, never a panic or a huge
// allocation.
const ManifestMagic = "snapback-manifest-1\n"

// ErrCorrupt is returned for a manifest, meta or index that does not decode.
var ErrCorrupt = errors.New("corrupt data")

// ErrStorePath: a manifest names a path inside the store (.snapback/),
// which no snapshot holds and no restore may write.
var ErrStorePath = errors.New("a path inside the store")

// EncodeManifest serializes m (which must be sorted).
func EncodeManifest(m Manifest) []byte {
	b := make([]byte, 0, 64+len(m)*96)
	b = append(b, ManifestMagic...)
	b = binary.AppendUvarint(b, uint64(len(m)))
	return appendEntries(b, m)
}

// appendEntries appends m's entries as a manifest holds them.
func appendEntries(b []byte, m Manifest) []byte {
	for i := range m {
		e := &m[i]
		b = AppendString(b, e.Path)
		b = append(b, byte(e.Type))
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendUvarint(b, uint64(e.UID))
		b = binary.AppendUvarint(b, uint64(e.GID))
		b = binary.AppendVarint(b, e.Mtime)
		b = binary.AppendVarint(b, e.Size)
		if e.Type == File {
			b = append(b, e.Object[:]...)
		}
		b = AppendString(b, e.Target)
		b = AppendString(b, e.Link)
		b = binary.AppendUvarint(b, uint64(len(e.Xattrs)))
		for _, x := range e.Xattrs {
			b = AppendString(b, x.Name)
			b = AppendString(b, string(x.Value))
		}
	}
	return b
}

func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decoder reads the varint-framed fields of the store's binary formats
// (manifests here, the stat cache in package snapshot): each read names
// what it reads, and the first bad one is the Decoder's error, after
// which every read returns zero.
type Decoder struct {
	b    []byte
	err  error
	what string // what is decoded, for errors ("" for a manifest)
}

// NewDecoder reads b, a format called what in errors.
func NewDecoder(b []byte, what string) *Decoder { return &Decoder{b: b, what: what} }

// Rest is what is left to read.
func (d *Decoder) Rest() []byte { return d.b }

// Err is the first bad read's error, or nil.
func (d *Decoder) Err() error { return d.err }

func (d *Decoder) fail(what string) {
	if d.err == nil {
		of := d.what
		if of == "" {
			of = "manifest"
		}
		d.err = fmt.Errorf("%w: %s: bad %s", ErrCorrupt, of, what)
	}
}

func (d *Decoder) Uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 { // overflow, or not the minimal encoding
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) Varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 { // every value has one encoding
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) U32(what string) uint32 {
	v := d.Uvarint(what)
	if v > 1<<32-1 {
		d.fail(what)
	}
	return uint32(v)
}

func (d *Decoder) Bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *Decoder) Str(what string) string {
	return string(d.Bytes(d.Uvarint(what), what))
}

// isFile reports whether e is a file that is no link: what a link names.
func isFile(e *Entry) bool { return e != nil && e.Type == File && e.Link == "" }

// DecodeManifest parses what EncodeManifest wrote and checks it: paths are
// valid relative paths, sorted and unique; every link names an earlier
// file; field values are in range.
func DecodeManifest(b []byte) (Manifest, error) {
	return decodeEntries(b, ManifestMagic, "manifest", true)
}

// decodeEntries parses a count and that many entries after magic, as
// DecodeManifest does; with outside, a link may name an earlier path that
// is not among them (a block's, checked once its manifest is whole).
func decodeEntries(b []byte, magic, what string, strict bool) (Manifest, error) {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: %s: bad magic", ErrCorrupt, what)
	}
	d := &Decoder{b: b[len(magic):], what: what}
	if what == "manifest" {
		d.what = "" // said as "manifest"
	}
	n := d.Uvarint("count")
	// Every entry takes at least 10 bytes: a bound that keeps a hostile
	// count from allocating more than the input justifies.
	if n > uint64(len(d.b))/10+1 {
		return nil, fmt.Errorf("%w: %s: count %d too large for %d bytes", ErrCorrupt, what, n, len(b))
	}
	m := make(Manifest, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var e Entry
		e.Path = d.Str("path")
		if d.err == nil && !ValidPath(e.Path) {
			return nil, fmt.Errorf("%w: %s: invalid path %q", ErrCorrupt, what, e.Path)
		}
		if d.err == nil && Under(e.Path, layout.StoreDir) {
			return nil, fmt.Errorf("%w: %s: path %q: %w", ErrCorrupt, what, e.Path, ErrStorePath)
		}
		if len(m) > 0 && d.err == nil && m[len(m)-1].Path >= e.Path {
			return nil, fmt.Errorf("%w: %s: paths not sorted at %q", ErrCorrupt, what, e.Path)
		}
		t := d.Bytes(1, "type")
		if d.err == nil {
			e.Type = Type(t[0])
			if e.Type >= numTypes {
				d.fail("type")
			}
		}
		e.Mode = d.U32("mode")
		if e.Mode > 07777 {
			d.fail("mode")
		}
		e.UID = d.U32("uid")
		e.GID = d.U32("gid")
		e.Mtime = d.Varint("mtime")
		e.Size = d.Varint("size")
		if e.Size < 0 {
			d.fail("size")
		}
		if e.Type == File {
			copy(e.Object[:], d.Bytes(32, "object"))
		}
		e.Target = d.Str("target")
		e.Link = d.Str("link")
		// A link names an earlier file that is no link itself. (m is
		// sorted: searched, rather than a map of every file filled,
		// which took half of the decoding of 100,000 entries.)
		if d.err == nil && e.Link != "" {
			ok := e.Type == File && e.Link < e.Path && ValidPath(e.Link)
			if in := m.Find(e.Link); in != nil || strict {
				ok = ok && isFile(in)
			}
			if !ok {
				return nil, fmt.Errorf("%w: %s: %q links to %q, not an earlier file", ErrCorrupt, what, e.Path, e.Link)
			}
		}
		if d.err == nil && e.Target != "" && e.Type != Symlink {
			d.fail("target")
		}
		nx := d.Uvarint("xattr count")
		if nx > uint64(len(d.b))/2 {
			d.fail("xattr count")
		}
		for j := uint64(0); j < nx && d.err == nil; j++ {
			x := fsutil.Xattr{Name: d.Str("xattr name")}
			x.Value = []byte(d.Str("xattr value"))
			e.Xattrs = append(e.Xattrs, x)
		}
		for k := range e.Xattrs {
			if e.Xattrs[k].Name == "" || k > 0 && e.Xattrs[k-1].Name >= e.Xattrs[k].Name {
				d.fail("xattr order (names must be non-empty, sorted, unique)")
			}
		}
		m = append(m, e)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrCorrupt, what, len(d.b))
	}
	return m, nil
}

// ValidPath reports whether p is a clean relative path: no empty, "." or
// ".." component, no leading or trailing slash, no NUL.
func ValidPath(p string) bool {
	if p == "" {
		return false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			c := p[start:i]
			if c == "" || c == "." || c == ".." {
				return false
			}
			start = i + 1
		} else if p[i] == 0 {
			return false
		}
	}
	return true
}
