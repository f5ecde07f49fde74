package overlay_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The view helper is what runs inside the command's mount namespace: its
// build must not carry the store's target backends (database drivers,
// the docker client), nor the store. It reaches the store's names through
// internal/layout, a leaf.
func TestViewBuildHasNoBackends(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/snapback/snapback/overlay/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/snapback/snapback/snapshot",
			"github.com/snapback/snapback/backends",
			"github.com/docker/",
			"github.com/jackc/",
			"github.com/go-sql-driver/",
			"modernc.org/sqlite",
			"database/sql",
		} {
			if pkg == banned || strings.HasPrefix(pkg, strings.TrimSuffix(banned, "/")+"/") {
				t.Errorf("overlay's build depends on %s", pkg)
			}
		}
	}
}
