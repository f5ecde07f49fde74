package runner

import (
	"testing"

	"github.com/snapback/snapback/internal/isolation"
)

// TestCheckNotBuilt: a mode of the list without a shape (apfs and zfs on
// Linux) says so, and copy works anywhere.
func TestCheckNotBuilt(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{isolation.Apfs, isolation.Zfs} {
		if v := Check(isolation.Find(name), root); v.OK || v.Why != "not built yet" {
			t.Errorf("%s: %+v, want not built yet", name, v)
		}
	}
	if v := Check(isolation.Find(isolation.Copy), root); !v.OK {
		t.Errorf("copy: %+v, want it to work", v)
	}
}
