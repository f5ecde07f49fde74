//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"golang.org/x/sys/unix"
)

// requireViews skips (or fails, per SNAPBACK_REQUIRE) where the tests
// cannot make both kinds of view as root.
func requireViews(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		treetest.Require(t, "overlayfs", false, "not root: this test mounts and makes its views as root")
		t.Skip("SNAPBACK_REQUIRE does not name overlayfs: not root")
	}
	for _, m := range []struct {
		name  string
		avail func() (bool, string)
	}{{"overlayfs", overlay.Available}, {"fuse", fuse.Available}} {
		if ok, why := m.avail(); !treetest.Require(t, m.name, ok, why) {
			t.Skip("SNAPBACK_REQUIRE does not name " + m.name + ": " + why)
		}
	}
}

// doctorModes is doctor --json's modes by name.
func doctorModes(t *testing.T, out []byte) map[string]modeJSON {
	t.Helper()
	var d struct{ Modes []modeJSON }
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	ms := map[string]modeJSON{}
	for _, m := range d.Modes {
		ms[m.Name] = m
	}
	return ms
}

// TestRunAtSlash: a project at / (the root of a chroot here, a mount
// point with /proc and /dev mounted below it, as on a real machine) has no view that can isolate
// it: overlayfs, fuse and auto refuse in one line before anything is
// made (no store), doctor says so for both view modes and for auto, and
// the modes that run on the tree itself are as before (btrfs says why
// not, copy works).
func TestRunAtSlash(t *testing.T) {
	requireViews(t)
	bin := snapbackBinary(t)
	root := t.TempDir()
	for _, d := range []string{"proc", "dev"} {
		treetest.Must(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	treetest.Write(t, root, "file", "x\n", 0o644)
	copyFile(t, bin, filepath.Join(root, "snapback"))
	// In a mount namespace of its own, chrooted into root: snapback sees
	// the project at /.
	chrooted := func(args ...string) (string, int) {
		t.Helper()
		script := `mount --make-rprivate / && mount --bind "$R" "$R" && mount --rbind /proc "$R/proc" && mount --rbind /dev "$R/dev" && exec chroot "$R" /snapback "$@"`
		cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", script, "sh"}, args...)...)
		cmd.Env = append(os.Environ(), "R="+root)
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, st := chrooted("doctor", "--json")
	if st != 0 {
		t.Fatalf("doctor: exit %d\n%s", st, out)
	}
	ms := doctorModes(t, []byte(out))
	for _, m := range []string{"overlayfs", "fuse"} {
		if ms[m].Available || !strings.Contains(ms[m].Reason, "project root is /") {
			t.Errorf("doctor at / says %s: %+v", m, ms[m])
		}
	}
	if !ms["copy"].Available {
		t.Errorf("doctor at / says copy: %+v", ms["copy"])
	}
	if out, _ := chrooted("doctor"); !strings.Contains(out, "--mode auto refuses here: the project root is /") {
		t.Errorf("doctor at / does not say that auto refuses:\n%s", out)
	}
	for _, mode := range []string{"overlayfs", "fuse", "auto"} {
		for _, then := range []string{"review", "commit"} {
			out, st := chrooted("run", "--mode", mode, "--then", then, "--", "/snapback", "version")
			if st == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "the project root is /") {
				t.Errorf("run --mode %s --then %s at /: exit %d\n%s", mode, then, st, out)
			}
			if _, err := os.Lstat(filepath.Join(root, ".snapback")); err == nil {
				t.Fatalf("run --mode %s --then %s at / made a store", mode, then)
			}
		}
	}
	// Without -C, a root at / found only because nothing nearer marks a
	// project is refused (wide_root); -C / says the machine is meant.
	if out, st := chrooted("run", "--mode", "copy", "--", "/snapback", "version"); st != 125 || !strings.Contains(out, "the whole machine") {
		t.Errorf("run --mode copy at / without -C: exit %d\n%s", st, out)
	}
	if _, err := os.Lstat(filepath.Join(root, ".snapback")); err == nil {
		t.Fatalf("a refused run at / made a store")
	}
	if out, st := chrooted("-C", "/", "run", "--mode", "btrfs", "--", "/snapback", "version"); st == 0 || !strings.Contains(out, "not on btrfs") {
		t.Errorf("run --mode btrfs at /: exit %d\n%s", st, out)
	}
	// The copy mode's snapshot would read /proc: it runs where nothing is
	// mounted below /.
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --make-rprivate / && mount --bind "$R" "$R" && exec chroot "$R" /snapback -C / run --mode copy -- /snapback version`)
	cmd.Env = append(os.Environ(), "R="+root)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "snapback ") {
		t.Errorf("run --mode copy at /: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	treetest.Must(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	treetest.Must(t, err)
	_, err = io.Copy(dst, src)
	treetest.Must(t, err)
	treetest.Must(t, dst.Close())
}

// TestRunOverSubmount: with a filesystem mounted below the root, an
// overlayfs view would show an empty directory there (and a commit would
// then write into the mount): doctor says so and names it, --mode
// overlayfs refuses, and auto takes the fuse view, which sees through the
// mount; its commit lands in the mounted filesystem and undo takes it out.
func TestRunOverSubmount(t *testing.T) {
	requireViews(t)
	bin := snapbackBinary(t)
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	treetest.Write(t, root, "a", "a\n", 0o644)
	treetest.Must(t, os.Mkdir(sub, 0o755))
	treetest.Must(t, unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) }) // the test's own mount
	treetest.Write(t, sub, "f", "in the mount\n", 0o644)
	sb(t, bin, root, "snap", "-m", "base")
	before := treetest.Capture(t, root, ".snapback")

	ms := doctorModes(t, []byte(sb(t, bin, root, "doctor", "--json")))
	if ms["overlayfs"].Available || !strings.Contains(ms["overlayfs"].Reason, sub+" is a mount point below the root") {
		t.Errorf("doctor says overlayfs: %+v", ms["overlayfs"])
	}
	if !ms["fuse"].Available {
		t.Errorf("doctor says fuse: %+v", ms["fuse"])
	}
	cmd := exec.Command(bin, "-C", root, "run", "--mode", "overlayfs", "--", "sh", "-c", "cat sub/f > seen")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), sub+" is a mount point") {
		t.Errorf("run --mode overlayfs over a mount: %v\n%s", err, out)
	}
	res := filepath.Join(t.TempDir(), "result.json")
	sb(t, bin, root, "run", "--result", res, "--", "sh", "-c", "cat sub/f > seen && echo new > sub/g")
	b, err := os.ReadFile(res)
	treetest.Must(t, err)
	var r struct{ Mode, State string }
	treetest.Must(t, json.Unmarshal(b, &r))
	if r.Mode != "fuse" || r.State != "committed" {
		t.Fatalf("auto over a mount: %s", b)
	}
	for p, want := range map[string]string{"seen": "in the mount\n", "sub/g": "new\n", "sub/f": "in the mount\n"} {
		if got, _ := os.ReadFile(filepath.Join(root, p)); string(got) != want {
			t.Errorf("after the run %s = %q, want %q", p, got, want)
		}
	}
	sb(t, bin, root, "undo")
	treetest.Equal(t, "undo of the run over a mount", before, treetest.Capture(t, root, ".snapback"))
}

// TestDoctorForeignGroup: as an ordinary user, a root whose group is not
// the user's own cannot be written in a fuse view (its user namespace maps
// only the user's ids): doctor says why, not only "permission denied".
func TestDoctorForeignGroup(t *testing.T) {
	cred, bin := ordinaryUser(t)
	if ok, why := fuse.Available(); !treetest.Require(t, "fuse", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name fuse: " + why)
	}
	uid, gid := int(cred.Uid), int(cred.Gid)
	root := userTempDir(t, "snapback-foreign-")
	treetest.Must(t, os.Chown(root, uid, 0)) // the user's, of root's group
	cmd := exec.Command(bin, "--json", "doctor")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	treetest.Must(t, err)
	m := doctorModes(t, out)["fuse"]
	want := fmt.Sprintf("the root's owner:group is %d:0: an ordinary user's view maps only its own uid %d and gid %d", uid, uid, gid)
	if m.Available || !strings.Contains(m.Reason, want) {
		t.Errorf("doctor as %s over a root of group 0 says fuse: %+v", testUser, m)
	}
}
