package catalog

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// smallArchive makes a real archive of a tiny project and returns its
// bytes and file name.
func smallArchive(t *testing.T) ([]byte, string) {
	t.Helper()
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "alpha\n", 0o644)
	treetest.Write(t, root, "d/b.txt", "bravo\n", 0o600)
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	m, err := repo.Snap(record.KindSnap, "small")
	treetest.Must(t, err)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	b, err := os.ReadFile(c.Path(s.ID))
	treetest.Must(t, err)
	return b, FileName(s.ID)
}

// verifyBytes verifies an archive held in memory under a file name.
func verifyBytes(b []byte, name string, lim Limits) error {
	r, err := newReader(bytes.NewReader(b), int64(len(b)), name, lim)
	if err != nil {
		return err
	}
	return r.check(context.Background(), name, nil)
}

// Every byte of an archive is verified: flipping any one bit anywhere in
// the file makes verification fail with a code.
func TestEveryByteVerified(t *testing.T) {
	b, name := smallArchive(t)
	if err := verifyBytes(b, name, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		for _, bit := range []byte{0x01, 0x80} {
			c := bytes.Clone(b)
			c[i] ^= bit
			err := verifyBytes(c, name, DefaultLimits)
			if err == nil {
				t.Fatalf("a flip of bit %#x at offset %d of %d still verifies", bit, i, len(b))
			}
			if CodeOf(err) == "" || strings.Contains(err.Error(), "\n") {
				t.Fatalf("offset %d: error %q without a code or on many lines", i, err)
			}
		}
	}
}

// What was added around a valid archive, or hidden in its structure, is
// refused: data before it, after it, in the zip comment, a second name in
// a local header.
func TestBytesOutsideEntriesRefused(t *testing.T) {
	b, name := smallArchive(t)
	withComment := bytes.Clone(b)
	binary.LittleEndian.PutUint16(withComment[len(b)-2:], 17)
	withComment = append(withComment, "hidden payload 17"...)
	nameFlip := bytes.Clone(b)
	nameFlip[30] ^= 0x01 // the first local header's name starts at 30
	for what, c := range map[string][]byte{
		"4 KiB prepended":        append(bytes.Repeat([]byte{'x'}, 4096), b...),
		"17 bytes appended":      append(bytes.Clone(b), "seventeen bytes!!"...),
		"a zip comment":          withComment,
		"a local header's name":  nameFlip,
		"an end record repeated": append(bytes.Clone(b), b[len(b)-22:]...),
	} {
		err := verifyBytes(c, name, DefaultLimits)
		if CodeOf(err) != CodeBadZip {
			t.Errorf("%s: error %v, want %s", what, err, CodeBadZip)
		}
	}
}

// Go's own writer past 65,535 entries writes zip64 end records: the
// layout check reads them as create would write them.
func TestLayoutZip64EndRecords(t *testing.T) {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	when := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 70000; i++ {
		w, err := z.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("targets/0/%06d", i), Method: zip.Store, Modified: when})
		treetest.Must(t, err)
		fmt.Fprint(w, i)
	}
	treetest.Must(t, z.Close())
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	treetest.Must(t, err)
	lay, err := checkLayout(bytes.NewReader(buf.Bytes()), int64(buf.Len()), zr.File)
	treetest.Must(t, err)
	if !lay.matches(when) {
		t.Error("the entries' time does not read back")
	}
	// A byte after the zip64 records is refused as well.
	c := append(bytes.Clone(buf.Bytes()), 0)
	zr, err = zip.NewReader(bytes.NewReader(c), int64(len(c)))
	if err == nil {
		_, err = checkLayout(bytes.NewReader(c), int64(len(c)), zr.File)
	}
	if err == nil {
		t.Error("a trailing byte after zip64 records passed")
	}
}

// sharedEntries makes a zip whose n central records all point at one
// local entry of size bytes (deflated), each under its own name.
func sharedEntries(t *testing.T, n, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	w, err := z.CreateHeader(&zip.FileHeader{Name: "targets/0/a", Method: zip.Deflate, Modified: time.Now()})
	treetest.Must(t, err)
	w.Write(make([]byte, size))
	treetest.Must(t, z.Close())
	b := buf.Bytes()
	cdOff := int(binary.LittleEndian.Uint32(b[len(b)-6:]))
	cdSize := int(binary.LittleEndian.Uint32(b[len(b)-10:]))
	rec := b[cdOff : cdOff+cdSize]
	out := bytes.Clone(b[:cdOff])
	nameLen := int(binary.LittleEndian.Uint16(rec[28:]))
	for i := 0; i < n; i++ {
		r := bytes.Clone(rec[:46])
		name := fmt.Sprintf("targets/0/%04d", i)
		binary.LittleEndian.PutUint16(r[28:], uint16(len(name)))
		r = append(r, name...)
		r = append(r, rec[46+nameLen:]...)
		out = append(out, r...)
	}
	end := bytes.Clone(b[len(b)-22:])
	binary.LittleEndian.PutUint16(end[8:], uint16(n))
	binary.LittleEndian.PutUint16(end[10:], uint16(n))
	binary.LittleEndian.PutUint32(end[12:], uint32(len(out)-cdOff))
	return append(out, end...)
}

// Decompression bombs: an entry of exactly 1 MiB that expands past the
// ratio, and many directory records sharing one local entry, are refused
// before anything is written.
func TestBombsRefused(t *testing.T) {
	lim := DefaultLimits
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	w, _ := z.CreateHeader(&zip.FileHeader{Name: "targets/0/mib", Method: zip.Deflate, Modified: time.Now()})
	w.Write(make([]byte, 1<<20))
	z.Close()
	if err := verifyBytes(buf.Bytes(), "bomb", lim); CodeOf(err) != CodeTooLarge {
		t.Errorf("a 1 MiB entry expanding %d times: %v, want %s", (1<<20)/buf.Len(), err, CodeTooLarge)
	}
	shared := sharedEntries(t, 500, 4096)
	err := verifyBytes(shared, "shared", Limits{MaxEntries: 1000, MaxEntrySize: 1 << 30, MaxTotal: 1 << 40, MaxRatio: 1e9, MaxMeta: 1 << 20})
	if c := CodeOf(err); c != CodeBadZip && c != CodeTooLarge {
		t.Errorf("500 records sharing one entry: %v", err)
	}
	// Through a catalog, restore writes nothing.
	c := newCatalog(t)
	treetest.Must(t, os.WriteFile(c.Path("0000000000000000000000000000b0b0"), shared, 0o600))
	into := filepath.Join(t.TempDir(), "into")
	if _, err := c.Restore(context.Background(), FileName("0000000000000000000000000000b0b0"), into, RestoreOptions{}, nil); err == nil {
		t.Fatal("restored a bomb")
	}
	if ents, _ := os.ReadDir(into); len(ents) > 0 {
		t.Errorf("a refused restore wrote %d entries", len(ents))
	}
}
