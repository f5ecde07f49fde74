package record_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/snapshot/record"
)

// FuzzDecodeManifest checks that no input makes DecodeManifest panic, and
// that what it accepts is exactly what EncodeManifest writes: one manifest
// has one encoding, so its hash is its identity.
func FuzzDecodeManifest(f *testing.F) {
	m := codecManifest()
	f.Add(record.EncodeManifest(m))
	f.Add(record.EncodeManifest(nil))
	for i := range m {
		f.Add(record.EncodeManifest(m[i : i+1 : i+1]))
	}
	f.Add([]byte(record.ManifestMagic))
	f.Add([]byte("snapback-manifest-1"))
	// Directory "d" with its mode 0 written in two bytes (0x80 0x00): the
	// same manifest as the one-byte form, under a second hash.
	f.Add([]byte(record.ManifestMagic + "\x01\x01d\x02\x80\x00" + "\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := record.DecodeManifest(b)
		if err != nil {
			return
		}
		if b2 := record.EncodeManifest(m); !bytes.Equal(b2, b) {
			t.Fatalf("decoded %+v, which encodes differently:\n got %q\nwant %q", m, b2, b)
		}
		for i := 1; i < len(m); i++ {
			if m[i-1].Path >= m[i].Path {
				t.Fatalf("accepted unsorted paths %q, %q", m[i-1].Path, m[i].Path)
			}
		}
	})
}

// FuzzDecodeBlocks checks that no input makes DecodeBlocks or DecodeBlock
// panic, and that what they accept is exactly what EncodeBlocks and
// EncodeBlock write.
func FuzzDecodeBlocks(f *testing.F) {
	m := codecManifest()
	var id record.ObjectID
	id[3] = 7
	bl := []record.Block{
		{First: "a", ID: id, Entries: 3, Files: 1, Bytes: 10, Pack: strings.Repeat("ab", 32) + ".pack", Off: 16, Len: 300},
		{First: "b/c", ID: id, Entries: 1},
		{First: "d", ID: id, Entries: 2, Files: 2, Pack: strings.Repeat("ab", 32) + ".pack", Off: 316, Len: 20},
	}
	f.Add(record.EncodeBlocks(bl))
	f.Add(record.EncodeBlocks(nil))
	f.Add(record.EncodeBlock(m))
	f.Add(record.EncodeBlock(m[1:]))
	f.Fuzz(func(t *testing.T, b []byte) {
		if bl, err := record.DecodeBlocks(b); err == nil {
			if b2 := record.EncodeBlocks(bl); !bytes.Equal(b2, b) {
				t.Fatalf("decoded %+v, which encodes differently:\n got %q\nwant %q", bl, b2, b)
			}
		}
		if m, err := record.DecodeBlock(b); err == nil {
			if b2 := record.EncodeBlock(m); !bytes.Equal(b2, b) {
				t.Fatalf("decoded %+v, which encodes differently:\n got %q\nwant %q", m, b2, b)
			}
		}
	})
}

// FuzzDecodeMeta checks that no input makes DecodeMeta panic, and that a
// record it accepts survives encoding and decoding unchanged.
func FuzzDecodeMeta(f *testing.F) {
	status := 130
	created := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for _, m := range []*record.Meta{
		{ID: "20240506-070809-abcdef", Kind: record.KindSnap, Message: "before \"migrate\"\n\xff", CreatedAt: created, Scope: record.ScopeTree,
			Manifest: sha(1), Files: 3, Bytes: 1 << 40},
		{ID: "20240506-070810-000001", Kind: record.KindRun, Command: []string{"sh", "-c", "echo \u2028 <&>"}, ExitStatus: &status,
			Mode: "overlayfs", State: "done", CreatedAt: created.In(time.FixedZone("", -7*3600)), Scope: record.ScopePaths,
			Manifest: sha(2), After: sha(3)},
		{ID: "20240506-070811-000002", Kind: record.KindPreUndo, CreatedAt: created, Scope: record.ScopePaths,
			Manifest: sha(4), Undoes: "20240506-070810-000001"},
		{ID: "20240506-070812-000003", Kind: record.KindPreRedo, CreatedAt: created, Scope: record.ScopePaths,
			Manifest: sha(5), Redoes: "20240506-070811-000002"},
	} {
		b, err := record.EncodeMeta(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"20240506-070809-abcdef","kind":"snap","created_at":"2024-05-06T07:08:09+14:00","scope":"tree","manifest":"` + sha(6) + `","command":[],"files":0,"bytes":0}`))
	f.Add([]byte(`{"id":"20240506-070809-abcdef"} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m1, err := record.DecodeMeta(b)
		if err != nil {
			return
		}
		b1, err := record.EncodeMeta(m1)
		if err != nil {
			t.Fatalf("accepted %q, which does not encode: %v", b, err)
		}
		m2, err := record.DecodeMeta(b1)
		if err != nil {
			t.Fatalf("accepted %q, but not its encoding %q: %v", b, b1, err)
		}
		if !sameMeta(m1, m2) {
			t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", m2, m1)
		}
	})
}

// sha returns a valid object id.
func sha(n byte) string {
	return record.ObjectID{31: n}.String()
}

// sameMeta compares records as their readers do: the same instant written
// with the same offset, an empty command the same as none.
func sameMeta(a, b *record.Meta) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) || a.CreatedAt.Format(time.RFC3339Nano) != b.CreatedAt.Format(time.RFC3339Nano) {
		return false
	}
	if !slices.Equal(a.Command, b.Command) {
		return false
	}
	x, y := *a, *b
	x.CreatedAt, y.CreatedAt = time.Time{}, time.Time{}
	x.Command, y.Command = nil, nil
	return reflect.DeepEqual(x, y)
}
