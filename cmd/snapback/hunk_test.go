package main

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/gitdiff"
)

// randomText is n lines drawn from a few, so that diffs have runs of
// context of every length; the last may lack its newline.
func randomText(r *rand.Rand, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("l%d\n", r.Intn(6)))
	}
	if n > 0 && r.Intn(4) == 0 {
		out[n-1] = strings.TrimSuffix(out[n-1], "\n")
	}
	return out
}

// TestHunks: the hunks, written whole, are what diff -p prints
// (gitdiff.Unified, git's own); applying every change gives the new text and none
// the old; each hunk split into its changes, picked one by one, gives the
// same text as the hunks picked whole; a hunk is splittable exactly when
// it has more than one change.
func TestHunks(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 2000; round++ {
		a, b := randomText(r, r.Intn(40)), randomText(r, r.Intn(40))
		d := newTextDiff(a, b)
		var got strings.Builder
		for _, h := range d.hunks() {
			d.write(&got, h)
		}
		var want strings.Builder
		gitdiff.Unified(&want, a, b)
		if strings.Join(a, "") == strings.Join(b, "") {
			want.Reset()
		}
		if got.String() != want.String() {
			t.Fatalf("round %d: hunks differ from diff -p's\na=%q\nb=%q\ngot:\n%s\nwant:\n%s", round, a, b, got.String(), want.String())
		}
		all, odd, oddSplit := map[int]bool{}, map[int]bool{}, map[int]bool{}
		for i, h := range d.hunks() {
			for _, c := range h.changes {
				all[c] = true
			}
			for _, s := range h.split() {
				if len(s.changes) != 1 {
					t.Fatalf("a split hunk has %d changes", len(s.changes))
				}
				if i%2 == 1 {
					oddSplit[s.changes[0]] = true
				}
			}
			if i%2 == 1 {
				for _, c := range h.changes {
					odd[c] = true
				}
			}
		}
		if d.apply(all) != strings.Join(b, "") || d.apply(nil) != strings.Join(a, "") {
			t.Fatalf("round %d: applying all or none is not the new or the old text", round)
		}
		if d.apply(odd) != d.apply(oddSplit) {
			t.Fatalf("round %d: split hunks picked one by one differ from the hunks picked whole", round)
		}
	}
}
