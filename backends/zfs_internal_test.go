package backends

import (
	"strings"
	"testing"
)

func TestZFSNames(t *testing.T) {
	a, b := zfsSnapName("tank/app", "/store/1"), zfsSnapName("tank/app", "/store/2")
	if !strings.HasPrefix(a, "tank/app@snapback-") || len(a) != len("tank/app@snapback-")+16 || a == b {
		t.Fatalf("snapshot names %q, %q", a, b)
	}
	if a != zfsSnapName("tank/app", "/store/1") {
		t.Fatal("a payload dir's snapshot name changes")
	}
	if got := zfsOldName("tank/app", "123"); got != "tank/app.snapback-old-123" {
		t.Fatalf("old name %q", got)
	}
	for ds, want := range map[string]bool{
		"tank": true, "tank/app": true, "tank/a-b_c.d:e f": true,
		"": false, "/tank": false, "tank/": false, "tank//a": false, "tank/a@s": false,
		"tank/a#b": false, "tank/../x": false, "tank/ä": false, strings.Repeat("x", 200): false,
	} {
		if got := zfsValidName(ds); got != want {
			t.Errorf("zfsValidName(%q) = %v", ds, got)
		}
	}
}
