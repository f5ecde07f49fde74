package runner

import (
	"testing"

	"github.com/snapback/snapback/internal/isolation"
)

// TestModesBuilt: with this package linked, every mode of the list but
// apfs and zfs has its availability check.
func TestModesBuilt(t *testing.T) {
	for i := range isolation.All {
		m := &isolation.All[i]
		want := m.Name != isolation.Apfs && m.Name != isolation.Zfs
		if m.Built() != want {
			t.Errorf("%s: built %v, want %v", m.Name, m.Built(), want)
		}
	}
}
