package runner

import (
	"testing"

	"github.com/snapback/snapback/internal/isolation"
)

// TestCheckNotBuilt: a mode of the list without a shape (apfs and zfs on
// Linux, so far) says so, and copy works anywhere.
func TestCheckNotBuilt(t *testing.T) {
	root := t.TempDir()
	for _, m := range isolation.All {
		if m.Built() {
			continue // a view's trial runs snapback's own binary: the CLI's tests try them
		}
		if v := Check(m, root); v.OK || v.Why != "not built yet" {
			t.Errorf("%s: %+v, want not built yet", m.Name, v)
		}
	}
	if v := Check(isolation.Find(isolation.Copy), root); !v.OK {
		t.Errorf("copy: %+v, want it to work", v)
	}
}
