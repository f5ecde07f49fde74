//go:build linux

package snapshot_test

import (
	"bytes"
	"errors"
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

// A watched checkpoint's state is recorded blocked: read whole it is the
// tree as a scan reads it; gc keeps its blocks while the checkpoint is
// open, and check finds nothing wrong; a turn's end then reads it a block
// at a time and records exactly the paths changed; and a list of blocks
// that does not match its blocks is refused, naming what is wrong.
func TestBlockedManifest(t *testing.T) {
	snapshot.SmallBlocks(t, 300)
	root := t.TempDir()
	for d := 0; d < 12; d++ {
		for f := 0; f < 25; f++ {
			p := filepath.Join(root, fmt.Sprintf("d%02d", d), fmt.Sprintf("f%02d", f))
			treetest.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			treetest.Must(t, os.WriteFile(p, []byte(p), 0o644))
		}
	}
	treetest.Must(t, os.Link(filepath.Join(root, "d03", "f01"), filepath.Join(root, "d09", "hard")))
	r := watched(t, root)
	turn := func(edit func()) *record.Meta {
		t.Helper()
		m, _, err := r.BeginCheckpoint("", "turn")
		treetest.Must(t, err)
		edit()
		m, _, err = r.EndCheckpoint("")
		treetest.Must(t, err)
		return m
	}
	turn(func() {})
	waitWatcher(t, r)
	// Turns until a begin is watched, then one more, open.
	for i := 0; ; i++ {
		turn(func() {
			treetest.Must(t, os.WriteFile(filepath.Join(root, "d00", "f00"), []byte(fmt.Sprint(i)), 0o644))
		})
		m, _, err := r.BeginCheckpoint("", "open")
		treetest.Must(t, err)
		if r.LastWatched {
			b, err := snapshot.ReadStored(r, m.Manifest)
			treetest.Must(t, err)
			if !bytes.HasPrefix(b, []byte(record.BlocksMagic)) {
				t.Fatalf("a watched begin recorded a plain manifest")
			}
			bl, err := record.DecodeBlocks(b)
			treetest.Must(t, err)
			if len(bl) < 10 {
				t.Fatalf("%d blocks: the test tests little", len(bl))
			}
			got, err := r.LoadManifest(m.Manifest)
			treetest.Must(t, err)
			scanned, err := r.ScanTree(true)
			treetest.Must(t, err)
			if !bytes.Equal(record.EncodeManifest(got), record.EncodeManifest(scanned)) {
				t.Fatalf("the blocked state read whole is not the tree:\n%s\n%s", paths(got), paths(scanned))
			}
			// gc keeps what the open checkpoint names; check finds it whole.
			_, err = r.GC(1, nil)
			treetest.Must(t, err)
			rep, err := r.Check(snapshot.CheckOptions{ReadData: true})
			treetest.Must(t, err)
			if len(rep.Damaged) > 0 {
				t.Fatalf("check after gc: %+v", rep.Damaged)
			}
			corrupt(t, r, b, bl)
			break
		}
		if _, _, err := r.EndCheckpoint(""); err != nil {
			t.Fatal(err)
		}
		if i > 200 {
			t.Fatal("no begin was watched")
		}
	}
	// The end: an edit, a removal, a new file, a renamed directory, an
	// edit through the hard link (which is both names' content).
	treetest.Must(t, os.WriteFile(filepath.Join(root, "d05", "f07"), []byte("edited"), 0o644))
	treetest.Must(t, os.Remove(filepath.Join(root, "d11", "f24")))
	treetest.Must(t, os.WriteFile(filepath.Join(root, "d06", "new"), []byte("new"), 0o644))
	treetest.Must(t, os.Rename(filepath.Join(root, "d08"), filepath.Join(root, "d08-moved")))
	treetest.Must(t, os.WriteFile(filepath.Join(root, "d09", "hard"), []byte("through the link"), 0o644))
	m, _, err := r.EndCheckpoint("")
	treetest.Must(t, err)
	if !r.LastWatched {
		t.Fatal("the end was not watched")
	}
	after, err := r.LoadManifest(m.After)
	treetest.Must(t, err)
	var got []string
	for _, e := range after {
		if !strings.HasPrefix(e.Path, "d08-moved/") && !strings.HasPrefix(e.Path, "d08/") {
			got = append(got, e.Path+":"+e.Type.String())
		}
	}
	want := "d03/f01:file d05/f07:file d06:dir d06/new:file d08:absent d08-moved:dir d09/hard:file d11:dir d11/f24:absent"
	if strings.Join(got, " ") != want {
		t.Fatalf("the end recorded\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
}

// corrupt checks that a list of blocks that lies about its blocks is
// refused.
func corrupt(t *testing.T, r *snapshot.Repo, good []byte, bl []record.Block) {
	t.Helper()
	if _, err := snapshot.DecodeStored(r, good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		edit       func(bl []record.Block)
	}{
		{"first path", "begins at", func(bl []record.Block) { bl[3].First = bl[3].First + "x" }},
		{"count", "holds", func(bl []record.Block) { bl[2].Entries++ }},
		{"order", "not before the next block", func(bl []record.Block) { bl[4].First, bl[5].First = bl[5].First, bl[5].First+"\x01" }},
		{"missing block", "missing", func(bl []record.Block) { bl[1].ID[0] ^= 1; bl[1].Pack = "" }},
	} {
		x := append([]record.Block(nil), bl...)
		c.edit(x)
		_, err := snapshot.DecodeStored(r, record.EncodeBlocks(x))
		if err == nil || !errors.Is(err, record.ErrCorrupt) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A hint that points elsewhere is only a hint: the block is found
	// by its id.
	x := append([]record.Block(nil), bl...)
	x[0].Off++
	if _, err := snapshot.DecodeStored(r, record.EncodeBlocks(x)); err != nil {
		t.Fatalf("a wrong hint: %v", err)
	}
}

// Two sessions side by side, as TestSessionsEditTools, with the tree's
// state blocked (blocks of a few entries): the marks' trees are patched
// and read a block at a time, and each step holds the same as with
// whole states.
func TestSessionsEditToolsWatched(t *testing.T) {
	snapshot.SmallBlocks(t, 200)
	sessionsEditTools(t, func(t *testing.T, root string) *snapshot.Repo {
		for i := 0; i < 40; i++ { // more files: more blocks
			treetest.Write(t, root, fmt.Sprintf("z/%02d", i), "z\n", 0o644)
		}
		r := watched(t, root)
		for i := 0; ; i++ {
			_, _, err := r.BeginCheckpoint("warm", "")
			treetest.Must(t, err)
			treetest.Write(t, root, "z/warm", fmt.Sprint(i), 0o644)
			_, _, err = r.EndCheckpoint("warm")
			treetest.Must(t, err)
			if r.LastWatched {
				return r
			}
			if i > 200 {
				t.Fatal("no watched end")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}, true)
}
