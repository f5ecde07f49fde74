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
	"github.com/snapback/snapback/overlay/fuse"
	"golang.org/x/sys/unix"
)

// TestRunInContainer runs snapback on a project inside an overlayfs
// mount, as a dev container's or CI job's root is: the kernel has
// overlayfs, but refuses a run's layer on it. doctor must say so, having
// tried it there, and the default run must fall through to a mode that
// works instead of failing with "invalid argument".
func TestRunInContainer(t *testing.T) {
	if !treetest.Require(t, "root", os.Geteuid() == 0, "mounting an overlayfs needs root") {
		t.Skip("SNAPBACK_REQUIRE does not name root: not root")
	}
	bin := snapbackBinary(t)
	base := t.TempDir()
	merged := filepath.Join(base, "merged")
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		treetest.Must(t, os.Mkdir(filepath.Join(base, d), 0o755))
	}
	opts := "lowerdir=" + filepath.Join(base, "lower") + ",upperdir=" + filepath.Join(base, "upper") + ",workdir=" + filepath.Join(base, "work")
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount the container's root: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	proj := filepath.Join(merged, "proj")
	treetest.Write(t, proj, "a", "a\n", 0o644)
	treetest.Write(t, proj, "gone", "gone\n", 0o644)

	type mode struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
	}
	doctor := func() map[string]mode {
		t.Helper()
		var out struct{ Modes []mode }
		treetest.Must(t, json.Unmarshal([]byte(sb(t, bin, proj, "--json", "doctor")), &out))
		ms := map[string]mode{}
		for _, m := range out.Modes {
			ms[m.Name] = m
		}
		return ms
	}
	check := func(ms map[string]mode) {
		t.Helper()
		o := ms["overlayfs"]
		if o.Available || !strings.Contains(o.Reason, "trial view of "+proj+" (overlay)") || !strings.Contains(o.Reason, "failed") {
			t.Errorf("doctor says of overlayfs: %+v; want unavailable, having tried %s on its overlay filesystem", o, proj)
		}
		if f := ms["fuse"]; f.Available && !strings.Contains(f.Reason, "trial view of "+proj) {
			t.Errorf("doctor says of fuse: %+v; want what it tried", f)
		}
		if !ms["copy"].Available {
			t.Errorf("doctor says copy does not work: %+v", ms["copy"])
		}
	}
	// Before the store exists (the trial's layer is then in the root,
	// and gone after), and with it.
	before := treetest.Capture(t, proj)
	check(doctor())
	if d := treetest.Diff(before, treetest.Capture(t, proj)); len(d) > 0 {
		t.Errorf("doctor changed the project:\n%s", strings.Join(d, "\n"))
	}
	sb(t, bin, proj, "snap", "-m", "base")
	ms := doctor()
	check(ms)

	want := "copy"
	if ok, _ := fuse.Available(); ok {
		if !ms["fuse"].Available {
			t.Errorf("doctor says fuse does not work in the container: %s", ms["fuse"].Reason)
		}
		want = "fuse"
	}
	cmd := exec.Command(bin, "run", "--", "sh", "-c", "echo b > a; rm gone; echo n > new")
	cmd.Dir = proj
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run in the container: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(proj, "a"))
	treetest.Must(t, err)
	if _, err := os.Lstat(filepath.Join(proj, "gone")); string(got) != "b\n" || err == nil {
		t.Errorf("after the run: a = %q, gone: %v", got, err)
	}
	if mode := runMode(t, proj); mode != want {
		t.Errorf("the run used %q, want %s", mode, want)
	}
	sb(t, bin, proj, "undo")
	if _, err := os.Lstat(filepath.Join(proj, "new")); err == nil {
		t.Errorf("undo left new behind")
	}
	got, _ = os.ReadFile(filepath.Join(proj, "gone"))
	if string(got) != "gone\n" {
		t.Errorf("undo: gone = %q", got)
	}

	// Naming overlayfs says why it cannot work here (run's own failures
	// are 125, as README's exit statuses say).
	cmd = exec.Command(bin, "-C", proj, "run", "--mode", "overlayfs", "--", "true")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "(overlay)") {
		t.Errorf("run --mode overlayfs in the container: %v\n%s", err, out)
	}
}

// runMode is the isolation mode of the project's one run, from its record.
func runMode(t *testing.T, proj string) string {
	t.Helper()
	recs, err := filepath.Glob(filepath.Join(proj, ".snapback", "snapshots", "*"))
	treetest.Must(t, err)
	for _, r := range recs {
		b, err := os.ReadFile(r)
		treetest.Must(t, err)
		var m struct {
			Kind, Mode string
		}
		if json.Unmarshal(b, &m) == nil && m.Kind == "run" {
			return m.Mode
		}
	}
	t.Fatalf("no run record in %s", proj)
	return ""
}
