//go:build linux

package watch

import "testing"

// BenchmarkWriters: what reading /proc costs a watched begin or end.
func BenchmarkWriters(b *testing.B) {
	for b.Loop() {
		Writers("/work")
	}
}
