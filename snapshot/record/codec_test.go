package record_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/snapshot/record"
)

// codecManifest is a manifest with every kind of entry and the names and
// values a codec gets wrong: a newline and invalid UTF-8 in names, hard
// links, xattrs with empty and binary values, extreme numbers.
func codecManifest() record.Manifest {
	m := record.Manifest{
		{Path: "a\nb", Type: record.File, Mode: 0o644, UID: 1000, GID: 1000, Mtime: 1_700_000_000_123_456_789, Size: 5, Object: sha256.Sum256([]byte("hello"))},
		{Path: "dir", Type: record.Dir, Mode: 0o1777, Mtime: 1},
		{Path: "dir/fifo", Type: record.Fifo, Mode: 0o600, Mtime: -1},
		{Path: "dir/hard", Type: record.File, Mode: 0o644, UID: 1000, GID: 1000, Size: 5, Object: sha256.Sum256([]byte("hello")), Link: "a\nb"},
		{Path: "dir/link", Type: record.Symlink, Mode: 0o777, Target: "../a\nb"},
		{Path: "dir/\xff\xfe name", Type: record.File, Mode: 0o4755, UID: math.MaxUint32, GID: math.MaxUint32, Mtime: math.MinInt64, Size: math.MaxInt64, Object: sha256.Sum256(nil),
			Xattrs: []fsutil.Xattr{
				{Name: "security.capability", Value: []byte{0, 0, 0, 2, 0xff, 0}},
				{Name: "user.empty", Value: []byte{}},
				{Name: "user.\xff", Value: []byte("v\nw")},
			}},
		{Path: "empty", Type: record.File, Mode: 0o600},
		{Path: "gone", Type: record.Absent},
		{Path: "z", Type: record.Dir, Mode: 0o755, Mtime: math.MaxInt64, Xattrs: []fsutil.Xattr{{Name: "user.dir", Value: []byte("x")}}},
	}
	m.Sort()
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	for _, m := range []record.Manifest{codecManifest(), {}} {
		b := record.EncodeManifest(m)
		got, err := record.DecodeManifest(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(got) != len(m) || len(m) > 0 && !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip changed the manifest:\n got %+v\nwant %+v", got, m)
		}
		if b2 := record.EncodeManifest(got); !bytes.Equal(b2, b) {
			t.Fatalf("re-encoding differs:\n%q\n%q", b2, b)
		}
	}
}

// decodeFails requires DecodeManifest(b) to fail with ErrCorrupt and a
// message containing want.
func decodeFails(t *testing.T, b []byte, want string) {
	t.Helper()
	m, err := record.DecodeManifest(b)
	if err == nil {
		t.Fatalf("decoded %+v, want an error", m)
	}
	if !errors.Is(err, record.ErrCorrupt) {
		t.Errorf("error %v is not ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not mention %q", err, want)
	}
}

func TestDecodeManifestTruncated(t *testing.T) {
	b := record.EncodeManifest(codecManifest())
	for n := 0; n < len(b); n++ {
		if m, err := record.DecodeManifest(b[:n]); err == nil || !errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("prefix of %d/%d bytes: got %d entries, err %v; want ErrCorrupt", n, len(b), len(m), err)
		}
	}
	decodeFails(t, append(b, 0), "trailing")
}

func TestDecodeManifestRejects(t *testing.T) {
	with := func(edit func(m record.Manifest) record.Manifest) []byte {
		return record.EncodeManifest(edit(codecManifest()))
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty input", nil, "magic"},
		{"bad magic", append([]byte("snapback-manifest-2\n"), record.EncodeManifest(nil)[len(record.ManifestMagic):]...), "magic"},
		{"magic only", []byte(record.ManifestMagic), "count"},
		{"unsorted", with(func(m record.Manifest) record.Manifest {
			m[1], m[2] = m[2], m[1]
			return m
		}), "not sorted"},
		{"duplicate path", with(func(m record.Manifest) record.Manifest {
			return append(m[:2:2], m[1:]...)
		}), "not sorted"},
		{"link to a later file", with(func(m record.Manifest) record.Manifest {
			m.Find("dir/hard").Link = "empty"
			return m
		}), "not an earlier file"},
		{"link to itself", with(func(m record.Manifest) record.Manifest {
			m.Find("dir/hard").Link = "dir/hard"
			return m
		}), "not an earlier file"},
		{"link to a directory", with(func(m record.Manifest) record.Manifest {
			m.Find("dir/hard").Link = "dir"
			return m
		}), "not an earlier file"},
		{"link to a link", with(func(m record.Manifest) record.Manifest {
			e := *m.Find("dir/hard")
			e.Path, e.Link = "dir/hard2", "dir/hard"
			m = append(m, e)
			m.Sort()
			return m
		}), "not an earlier file"},
		{"link on a symlink", with(func(m record.Manifest) record.Manifest {
			m.Find("dir/link").Link = "a\nb"
			return m
		}), "not an earlier file"},
		{"target on a file", with(func(m record.Manifest) record.Manifest {
			m.Find("empty").Target = "x"
			return m
		}), "target"},
		{"absolute path", with(func(m record.Manifest) record.Manifest {
			return append(record.Manifest{{Path: "/etc", Type: record.Dir}}, m...)
		}), "invalid path"},
		{"dot-dot path", with(func(m record.Manifest) record.Manifest {
			return append(record.Manifest{{Path: "../x", Type: record.Dir}}, m...)
		}), "invalid path"},
		{"NUL in path", with(func(m record.Manifest) record.Manifest {
			return append(record.Manifest{{Path: "a\x00", Type: record.Dir}}, m...)
		}), "invalid path"},
		{"unknown type", with(func(m record.Manifest) record.Manifest {
			m.Find("gone").Type = 99
			return m
		}), "type"},
		{"mode out of range", with(func(m record.Manifest) record.Manifest {
			m.Find("dir").Mode = 0o10000
			return m
		}), "mode"},
		{"negative size", with(func(m record.Manifest) record.Manifest {
			m.Find("empty").Size = -1
			return m
		}), "size"},
		{"unsorted xattrs", with(func(m record.Manifest) record.Manifest {
			x := m.Find("dir/\xff\xfe name").Xattrs
			x[0], x[1] = x[1], x[0]
			return m
		}), "xattr order"},
		{"huge count", binary.AppendUvarint([]byte(record.ManifestMagic), math.MaxUint64), "too large"},
		{"count beyond the entries", func() []byte {
			b := record.EncodeManifest(codecManifest())
			// Claim 40 entries: within the size bound, but only 9 are there.
			return append(append([]byte(record.ManifestMagic), 40), b[len(record.ManifestMagic)+1:]...)
		}(), "bad"},
	} {
		t.Run(tc.name, func(t *testing.T) { decodeFails(t, tc.b, tc.want) })
	}
}

// A hostile count must be refused before anything is allocated for it.
func TestDecodeManifestHugeCountAllocatesLittle(t *testing.T) {
	b := binary.AppendUvarint([]byte(record.ManifestMagic), 1<<40)
	b = append(b, make([]byte, 1000)...)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := record.DecodeManifest(b); err == nil {
			t.Fatal("decoded a manifest claiming 2^40 entries in 1000 bytes")
		}
	})
	if allocs > 10 {
		t.Errorf("%v allocations to reject a huge count", allocs)
	}
}

// A manifest read from the store is input from outside: no entry of it may
// name the store itself (a restore would write there).
func TestDecodeManifestRefusesStorePaths(t *testing.T) {
	for _, p := range []string{layout.StoreDir, layout.StoreDir + "/journal.json", layout.StoreDir + "/snapshots/x.json"} {
		b := record.EncodeManifest(record.Manifest{{Path: p, Type: record.Dir, Mode: 0o755}})
		if _, err := record.DecodeManifest(b); !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("%s: decoded without error (%v)", p, err)
		}
	}
	if _, err := record.DecodeManifest(record.EncodeManifest(record.Manifest{{Path: layout.StoreDir + "x", Type: record.Dir, Mode: 0o755}})); err != nil {
		t.Errorf("a sibling named like the store is an ordinary path: %v", err)
	}
}
