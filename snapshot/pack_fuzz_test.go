package snapshot

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/snapback/snapback/snapshot/record"
)

// FuzzPackIndex: a pack's index is input from outside. Whatever the bytes,
// parsing returns entries that lie inside the contents and are no larger
// than a packed content may be, or an error; never a panic or a huge
// allocation. A pack the writer made parses back to what was put in it.
func FuzzPackIndex(f *testing.F) {
	var p packBuf
	for _, s := range []string{"alpha\n", "", "beta\n"} {
		b := []byte(s)
		p.add(record.ObjectID(sha256.Sum256(b)), b)
	}
	good := encodePack(&p)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append([]byte{}, packMagic...))
	f.Add(append(append([]byte{}, packMagic...), make([]byte, 32)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, err := parsePackIndex(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.off < packHeaderLen || e.len > packMaxEntry || e.off+e.len > int64(len(b))-packTrailerLen {
				t.Fatalf("entry %+v outside a pack of %d bytes", e, len(b))
			}
		}
		if bytes.Equal(b, good) {
			for i, e := range ents {
				if e.id != p.ents[i].id || !bytes.Equal(b[e.off:e.off+e.len], p.data[p.ents[i].off:p.ents[i].off+p.ents[i].len]) {
					t.Fatalf("entry %d read back wrong", i)
				}
			}
		}
	})
}
