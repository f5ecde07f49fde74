package gitdiff

import (
	"math/rand"
	"testing"
)

// BenchmarkLarge: a 40,000-line file after 300 rounds of random edits.
func BenchmarkLarge(b *testing.B) {
	r := rand.New(rand.NewSource(4))
	a := randomText(r, 40000)
	x := a
	for k := 0; k < 300; k++ {
		x = edit(r, x)
	}
	la, lb := Lines(join(a, r)), Lines(join(x, r))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Diff(la, lb)
	}
}
