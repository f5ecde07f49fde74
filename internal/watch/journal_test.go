package watch

import (
	"sort"
	"testing"
)

// A change is named after a token only if it came after it, deep only
// if a deep change of it came after it.
func TestJournalSince(t *testing.T) {
	j := newJournal()
	j.next()
	j.note("a", true) // 1: a appeared
	j.next()
	j.note("a", false) // 2: a's listing changed
	j.next()
	j.note("b/c", false) // 3
	for _, c := range []struct {
		seq  uint64
		want string
	}{
		{0, "a deep, b/c"},
		{1, "a, b/c"},
		{2, "b/c"},
		{3, ""},
	} {
		var got []string
		for _, ch := range j.since(c.seq) {
			s := ch.Path
			if ch.Deep {
				s += " deep"
			}
			got = append(got, s)
		}
		sort.Strings(got)
		s := ""
		for i, g := range got {
			if i > 0 {
				s += ", "
			}
			s += g
		}
		if s != c.want {
			t.Errorf("since %d: %q, want %q", c.seq, s, c.want)
		}
	}
}

func TestToken(t *testing.T) {
	tok := Token{Gen: 0xdeadbeef, Seq: 42}
	got, err := ParseToken(tok.String())
	if err != nil || got != tok {
		t.Fatalf("ParseToken(%q) = %v, %v", tok.String(), got, err)
	}
	for _, bad := range []string{"", "42", "00000000deadbeef", "00000000deadbeef.", "deadbeef.42", "00000000deadbeef.-1", "0000000zdeadbeef.1"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q): no error", bad)
		}
	}
}
