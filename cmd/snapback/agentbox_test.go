//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestAgentbox runs the real agentbox (testdata/agentbox, its source at the
// commit SOURCE names) with --checkpoint against the built binary, as
// agentbox's own example does: agentbox takes the last word of `snapback
// snap`'s stdout as the checkpoint's id and records it in its trace. That
// id must be the snapshot's, and `snapback undo` of it must put the
// agent's edits back.
func TestAgentbox(t *testing.T) {
	py, err := exec.LookPath("python3")
	if !treetest.Require(t, "python3", err == nil, "python3 is not installed (agentbox is a Python program)") {
		t.Skip("SNAPBACK_REQUIRE does not name python3: no python3")
	}
	bin := snapbackBinary(t)
	src, err := filepath.Abs("testdata/agentbox")
	if err != nil {
		t.Fatal(err)
	}
	proj := t.TempDir()
	for _, f := range []string{"checkpoint_agent.py", "checkpoint.policy", "snapback.toml"} {
		b, err := os.ReadFile(filepath.Join(src, "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		treetest.Write(t, proj, f, string(b), 0o644)
	}
	treetest.Write(t, proj, "data/notes.txt", "original notes\n", 0o644)

	// snapback on PATH, as agentbox calls it by name.
	cmd := exec.Command(py, "-m", "agentbox", "run", "--checkpoint", "-p", "checkpoint.policy", "--", py, "checkpoint_agent.py")
	cmd.Dir = proj
	cmd.Env = append(os.Environ(), "PYTHONPATH="+src, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentbox run --checkpoint: %v\n%s", err, out)
	}
	if got := readFile(t, filepath.Join(proj, "data/notes.txt")); got != "ORIGINAL_NOTES\n" {
		t.Fatalf("the agent did not run: data/notes.txt holds %q\n%s", got, out)
	}

	// The id agentbox recorded is the snapshot snapback made.
	id := ""
	trace := readFile(t, filepath.Join(proj, "trace.jsonl"))
	for _, line := range strings.Split(strings.TrimSpace(trace), "\n") {
		var e struct {
			Op     string `json:"op"`
			Result struct {
				Snapshot string `json:"snapshot"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Op == "hook.checkpoint" {
			id = e.Result.Snapshot
		}
	}
	var ls struct {
		Snapshots []struct{ ID string } `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(sb(t, bin, proj, "--json", "list")), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls.Snapshots) != 1 || ls.Snapshots[0].ID != id {
		t.Fatalf("agentbox recorded checkpoint %q; snapback list: %+v\n%s", id, ls.Snapshots, out)
	}
	if !strings.Contains(string(out), "agentbox: checkpoint "+id+" taken") {
		t.Errorf("agentbox's report does not name %s:\n%s", id, out)
	}

	// And undo of that id reverts the agent's run.
	sb(t, bin, proj, "undo", id)
	if got := readFile(t, filepath.Join(proj, "data/notes.txt")); got != "original notes\n" {
		t.Fatalf("after undo %s, data/notes.txt holds %q", id, got)
	}
	if _, err := os.Lstat(filepath.Join(proj, "out/report.md")); err == nil {
		t.Fatalf("after undo %s, the agent's out/report.md is still there", id)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
