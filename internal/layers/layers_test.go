package layers

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/snapback/snapback/"

// Every package of the module has a rank, and its code imports only
// packages ranked below it. (Tests may reach up: fuse's test reads its
// upper layer through the store, as commit does.)
func TestImportsRunDownward(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", module+"...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		if name == "internal/layers" {
			continue
		}
		seen++
		rank, ok := Rank[name]
		if !ok {
			t.Errorf("%s has no rank: add it to layers.Rank", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || dep == name {
				continue
			}
			if r, ok := Rank[dep]; ok && r >= rank {
				t.Errorf("%s (rank %d) imports %s (rank %d): imports run downward only", name, rank, dep, r)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if seen < len(Rank) {
		t.Errorf("go list named %d packages, the ranking %d: a ranked package is gone", seen, len(Rank))
	}
}
