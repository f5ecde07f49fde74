//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// Tests damage the store's contents on purpose. A content is a loose
// object (objects/ab/cdef…) or an entry of a pack (packs/<hash>.pack:
// the format is in snapshot/pack.go, read here on its own so that a test
// does not trust the code it tests).

// storedObject is where the store at dir keeps the content id (64 hex).
type storedObject struct {
	path     string // the loose object's file, or the pack's
	packed   bool
	off, len int64 // the content's place in the pack
	idxEntry int64 // the offset of its index entry in the pack
}

// findObject finds the content id in the store at dir (the copy the
// store reads first); ok is false when neither a loose object nor a pack
// holds it.
func findObject(dir, id string) (storedObject, bool, error) {
	all, err := copiesOf(dir, id)
	if err != nil || len(all) == 0 {
		return storedObject{}, false, err
	}
	return all[0], true, nil
}

// copiesOf lists every copy of the content id in the store at dir: the
// loose object, then each pack's entry, the packs by name (a content may
// be packed twice).
func copiesOf(dir, id string) ([]storedObject, error) {
	var out []storedObject
	loose := filepath.Join(dir, "objects", id[:2], id[2:])
	if st, err := os.Lstat(loose); err == nil {
		out = append(out, storedObject{path: loose, len: st.Size()})
	}
	want, err := hex.DecodeString(id)
	if err != nil || len(want) != 32 {
		return nil, fmt.Errorf("bad object id %q", id)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	sort.Strings(names)
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if len(b) < 48 || !bytes.HasSuffix(b, []byte("snapback-index/1")) {
			continue // damaged by the test: not readable
		}
		tr := b[len(b)-32:]
		n, idx := binary.BigEndian.Uint64(tr[0:8]), binary.BigEndian.Uint64(tr[8:16])
		for i := uint64(0); i < n; i++ {
			at := idx + i*48
			if at+48 > uint64(len(b)) {
				break
			}
			e := b[at : at+48]
			if bytes.Equal(e[:32], want) {
				out = append(out, storedObject{path: p, packed: true, idxEntry: int64(at),
					off: int64(binary.BigEndian.Uint64(e[32:40])), len: int64(binary.BigEndian.Uint64(e[40:48]))})
			}
		}
	}
	return out, nil
}

// intactCopy reports whether some copy of the content id in the store at
// dir still matches its hash: snapback reads that one.
func intactCopy(dir, id string) bool {
	all, _ := copiesOf(dir, id)
	for _, o := range all {
		b, err := os.ReadFile(o.path)
		if err != nil || o.off+o.len > int64(len(b)) {
			continue
		}
		if sum := sha256.Sum256(b[o.off : o.off+o.len]); hex.EncodeToString(sum[:]) == id {
			return true
		}
	}
	return false
}

// damageStored acts on the stored content id: "flip" writes an X over its
// first byte, "truncate" makes it 3 bytes long, "remove" takes it out of
// the store (a pack's index entry is made to name no content).
func damageStored(dir, id, op string) error {
	if op == "remove" { // every copy: a loose object, and in packs
		for n := 0; ; n++ {
			if _, ok, err := findObject(dir, id); err != nil || !ok && n > 0 {
				return err
			}
			if err := damageOne(dir, id, op); err != nil {
				return err
			}
		}
	}
	return damageOne(dir, id, op)
}

func damageOne(dir, id, op string) error {
	o, ok, err := findObject(dir, id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the store holds no object %s", id)
	}
	if err := os.Chmod(o.path, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(o.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	switch {
	case op == "flip":
		_, err = f.WriteAt([]byte("X"), o.off)
	case op == "truncate" && !o.packed:
		err = f.Truncate(3)
	case op == "truncate":
		_, err = f.WriteAt(binary.BigEndian.AppendUint64(nil, 3), o.idxEntry+40)
	case op == "remove" && !o.packed:
		err = os.Remove(o.path)
	case op == "remove":
		_, err = f.WriteAt(make([]byte, 32), o.idxEntry)
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	if err == nil {
		err = f.Close()
	}
	return err
}

// cmdObject is the scripts' `object OP ID` on the store .snapback of the
// working directory: `[!] object exists ID`, `object flip|truncate|remove ID`.
func cmdObject(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || len(args[1]) != 64 {
		ts.Fatalf("usage: object exists|flip|truncate|remove ID")
	}
	dir := ts.MkAbs(".snapback")
	id := strings.ToLower(args[1])
	if args[0] == "exists" {
		_, ok, err := findObject(dir, id)
		ts.Check(err)
		if ok == neg {
			ts.Fatalf("object %s: stored %v, want %v", id, ok, !neg)
		}
		return
	}
	if neg {
		ts.Fatalf("unsupported: ! object %s", args[0])
	}
	ts.Check(damageStored(dir, id, args[0]))
}

// setStoredByte writes b over the first byte of the stored content o and
// returns the byte it replaced; the file keeps its mode.
func setStoredByte(o storedObject, b byte) (byte, error) {
	fi, err := os.Lstat(o.path)
	if err != nil {
		return 0, err
	}
	if err := os.Chmod(o.path, fi.Mode().Perm()|0o600); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(o.path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	old := []byte{0}
	if _, err := f.ReadAt(old, o.off); err != nil {
		return 0, err
	}
	if _, err := f.WriteAt([]byte{b}, o.off); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return old[0], os.Chmod(o.path, fi.Mode().Perm())
}
