package record

import (
	"bytes"
	"encoding/hex"
	"sort"
	"strings"

	"github.com/snapback/snapback/fsutil"
)

// Type is the kind of a manifest entry.
type Type uint8

// Entry types. Absent records that a path did not exist.
const (
	Absent Type = iota
	File
	Dir
	Symlink
	Fifo
	numTypes
)

func (t Type) String() string {
	switch t {
	case Absent:
		return "absent"
	case File:
		return "file"
	case Dir:
		return "dir"
	case Symlink:
		return "symlink"
	case Fifo:
		return "fifo"
	}
	return "unknown"
}

// ObjectID is the SHA-256 of a file's content.
type ObjectID [32]byte

func (o ObjectID) String() string { return hex.EncodeToString(o[:]) }

// IsZero reports whether o is unset.
func (o ObjectID) IsZero() bool { return o == ObjectID{} }

// ParseObjectID parses 64 lowercase hex digits.
func ParseObjectID(s string) (ObjectID, bool) {
	var o ObjectID
	if len(s) != 64 || strings.ToLower(s) != s {
		return o, false
	}
	if _, err := hex.Decode(o[:], []byte(s)); err != nil {
		return o, false
	}
	return o, true
}

// Entry is one path of a manifest. Path is relative to the root,
// slash-separated, and may hold any bytes a name can (newlines, invalid
// UTF-8). For a hard-linked file, Link names the first path of the manifest
// that shares its inode; restore recreates the link.
type Entry struct {
	Path   string
	Type   Type
	Mode   uint32 // permission bits, including setuid, setgid and sticky
	UID    uint32
	GID    uint32
	Mtime  int64 // nanoseconds since the Unix epoch
	Size   int64
	Object ObjectID // File only
	Target string   // Symlink only
	Link   string   // File only: an earlier path with the same inode
	Xattrs []fsutil.Xattr

	// Ctime is the inode change time seen by the scan that made the entry;
	// commits use it to spot paths changed during a run. Inode and Nlink
	// (device and inode number, link count) let a scan of some paths find
	// the other names of their hard links. None of them is stored.
	Ctime int64
	Inode [2]uint64
	Nlink uint64
}

// SameContent reports whether e and o hold the same thing at their path:
// same type, bytes, link target and hard-link grouping. Ownership, mode
// and times are metadata (see SameMeta).
func (e *Entry) SameContent(o *Entry) bool {
	if e.Type != o.Type {
		return false
	}
	switch e.Type {
	case File:
		return e.Object == o.Object && e.Size == o.Size && e.Link == o.Link
	case Symlink:
		return e.Target == o.Target
	}
	return true
}

// SameMeta reports whether mode, owner, mtime and xattrs agree. Symlink
// modes are not compared (they cannot be set on Linux).
func (e *Entry) SameMeta(o *Entry) bool {
	if e.Type != Symlink && e.Mode != o.Mode {
		return false
	}
	if e.UID != o.UID || e.GID != o.GID || e.Mtime != o.Mtime || len(e.Xattrs) != len(o.Xattrs) {
		return false
	}
	for i := range e.Xattrs {
		if e.Xattrs[i].Name != o.Xattrs[i].Name || !bytes.Equal(e.Xattrs[i].Value, o.Xattrs[i].Value) {
			return false
		}
	}
	return true
}

// Changed reports whether going from e to o is a change a user sees: a
// different type, content, mode or xattrs. Times and directory metadata
// churn (a directory's mtime moves whenever a child does) are not.
func (e *Entry) Changed(o *Entry) bool {
	if !e.SameContent(o) {
		return true
	}
	if e.Type == Absent || e.Type == Symlink {
		return false
	}
	if e.Mode != o.Mode || len(e.Xattrs) != len(o.Xattrs) {
		return true
	}
	for i := range e.Xattrs {
		if e.Xattrs[i].Name != o.Xattrs[i].Name || !bytes.Equal(e.Xattrs[i].Value, o.Xattrs[i].Value) {
			return true
		}
	}
	return false
}

// Manifest is a set of entries sorted by path (so a directory comes before
// everything in it).
type Manifest []Entry

// Sort orders the entries by path.
func (m Manifest) Sort() { sort.Slice(m, func(i, j int) bool { return m[i].Path < m[j].Path }) }

// Find returns the entry for path, or nil.
func (m Manifest) Find(path string) *Entry {
	i := sort.Search(len(m), func(i int) bool { return m[i].Path >= path })
	if i < len(m) && m[i].Path == path {
		return &m[i]
	}
	return nil
}

// Paths lists the manifest's paths in order.
func (m Manifest) Paths() []string {
	out := make([]string, len(m))
	for i := range m {
		out[i] = m[i].Path
	}
	return out
}

// Objects calls fn for every object the manifest references.
func (m Manifest) Objects(fn func(ObjectID)) {
	for i := range m {
		if m[i].Type == File && !m[i].Object.IsZero() {
			fn(m[i].Object)
		}
	}
}

// Parent returns the directory part of a relative path ("" at the top).
func Parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// Base returns the last component of a relative path.
func Base(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// Under reports whether p is dir or lies below it ("" contains everything).
func Under(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}
