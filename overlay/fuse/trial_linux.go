//go:build linux

package fuse

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/layer"
	"golang.org/x/sys/unix"
)

// ProbeVerb is the hidden verb of the trial's helper.
const ProbeVerb = "__fuse-probe"

// Trial reports whether a fuse run works for the project at root, by
// making one: a helper, in a mount namespace of its own (and a user
// namespace for an ordinary user, as a run's), makes a whiteout and an
// opaque mark in a layer where a run's would be (overlay.TrialDir), then
// serves a view of root with that layer, writes a file into it and
// unmounts. The reason says what was tried, and why it failed.
func Trial(root string) (bool, string) {
	if ok, why := Available(); !ok {
		return false, why
	}
	if why := overlay.Uncovered(root); why != "" {
		return false, why
	}
	dir, done, err := overlay.TrialDir(root)
	if err != nil {
		return false, "cannot try a view here: " + err.Error()
	}
	defer done()
	tried := fmt.Sprintf("a trial view of %s (%s) with its layer in %s", root, overlay.FSType(root), filepath.Dir(dir))
	out, err := trial(root, dir)
	if err != nil {
		return false, fmt.Sprintf("%s failed: %v%s", tried, err, foreignIDs(root))
	}
	why := tried + " worked"
	if t := trialTransport(out); t != "" {
		why += "; " + t
	}
	return true, why
}

// trial returns what the probe printed: the line that says which
// transport its view used.
func trial(root, dir string) (string, error) {
	spec := overlay.Spec{Root: root, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), Dir: filepath.Join(dir, "mnt")}
	for _, d := range []string{spec.Upper, spec.Work, spec.Dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", err
		}
	}
	return overlay.RunTrial(ProbeVerb, spec, unix.CLONE_NEWNS, os.Geteuid() != 0)
}

// Probe is the trial helper's main: arg is its spec, whose Dir is the
// trial's mount point.
func Probe(arg string) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		return 1
	}
	var spec overlay.Spec
	if err := json.Unmarshal([]byte(arg), &spec); err != nil {
		return fail("trial", err)
	}
	// What the server writes into a layer: whiteouts and opaque marks.
	wh, op := filepath.Join(spec.Upper, "whiteout"), filepath.Join(spec.Upper, "opaque")
	if err := makeWhiteout(wh, os.Geteuid() == 0); err != nil {
		return fail("make a whiteout in the layer", err)
	}
	if err := os.Mkdir(op, 0o700); err != nil {
		return fail("make a directory in the layer", err)
	}
	if err := layer.SetOpaque(op); err != nil {
		return fail("mark a directory of the layer opaque", err)
	}
	if err := os.Remove(wh); err != nil {
		return fail("remove a whiteout", err)
	}
	if err := os.Remove(op); err != nil {
		return fail("remove a directory", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("make mounts private", err)
	}
	srv, err := Mount(spec.Root, spec.Upper, spec.Work, spec.Dir)
	if err != nil {
		return fail("mount the view", err)
	}
	f := filepath.Join(spec.Dir, layout.TempPrefix+"trial")
	werr := os.WriteFile(f, []byte("trial\n"), 0o600)
	if werr == nil {
		werr = os.Remove(f)
	}
	if err := srv.Unmount(); err != nil && werr == nil {
		werr = fmt.Errorf("unmount: %w", err)
	}
	if werr != nil {
		return fail("write into the view", werr)
	}
	fmt.Println(transportPrefix + transport(srv.Ring()))
	return 0
}

// foreignIDs explains, for an ordinary user, a root whose owner or group
// is not the user's own: its user namespace maps only the user's ids, and
// the kernel lets nothing write an entry with an unmapped id in a view.
func foreignIDs(root string) string {
	var st unix.Stat_t
	if os.Geteuid() == 0 || unix.Stat(root, &st) != nil {
		return ""
	}
	if int(st.Uid) == os.Getuid() && int(st.Gid) == os.Getgid() {
		return ""
	}
	return fmt.Sprintf(" (the root's owner:group is %d:%d: an ordinary user's view maps only its own uid %d and gid %d, and nothing whose owner or group is another's can be written in it)", st.Uid, st.Gid, os.Getuid(), os.Getgid())
}
