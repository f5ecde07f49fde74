//go:build linux

package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
	"golang.org/x/sys/unix"
)

// UserNS makes the helper an ordinary user's: a new user namespace that
// maps only the caller's own uid and gid (so the command does not become
// a fake root), with the capabilities the overlay mount needs raised as
// ambient ones for the helper alone; it clears them before the exec.
// CAP_SYS_ADMIN alone is not enough: overlayfs's work directory needs the
// DAC capabilities too (OVERLAY-NOTES.md).
func UserNS(a *syscall.SysProcAttr) {
	uid, gid := os.Getuid(), os.Getgid()
	a.Cloneflags |= unix.CLONE_NEWUSER
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	a.GidMappingsEnableSetgroups = false
	a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH,
		unix.CAP_FOWNER, unix.CAP_CHOWN, unix.CAP_MKNOD, unix.CAP_FSETID}
}

// escape quotes the characters overlayfs's option parser splits on.
func escape(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// Helper is the helper's main: args are what follows HelperVerb. It is
// the init of the run's PID namespace: it mounts the view, then runs the
// command as its child and returns its status (125 if it failed itself).
func Helper(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		return failed(errors.New("helper: bad arguments"))
	}
	var spec Spec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return failed(fmt.Errorf("helper: %w", err))
	}
	if err := mount(spec); err != nil {
		return failed(err)
	}
	return initRun(spec, args[2:])
}

func mount(spec Spec) error {
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", escape(spec.Root), escape(spec.Upper), escape(spec.Work))
	if spec.UserNS {
		// trusted.* xattrs are root's: user.overlay.* marks instead. The
		// kernel allows no redirect_dir then: rename(2) of a directory that
		// existed before the run fails with EXDEV (mv copies instead).
		opts += ",userxattr"
	} else {
		// Directories renamed with rename(2) stay renames (the changeset
		// follows the redirect), instead of failing with EXDEV.
		opts += ",redirect_dir=on"
	}
	// The store is absent inside: a whiteout in the upper layer hides it,
	// so a command cannot erase its own undo history, and it is no mount
	// point either, which `git clean -fdx` or `rm -rf` would fail on
	// (EBUSY). Whatever the command makes there stays in the layer (no
	// changeset holds the store's path) and goes with it.
	if err := hideStore(spec.Upper); err != nil {
		return err
	}
	if err := unix.Mount("overlay", spec.Root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlayfs on %s: %w", spec.Root, err)
	}
	return nil
}

// hideStore makes the store's whiteout in upper (a character device 0/0,
// which needs no capability since Linux 5.8); one there already, or the
// command's own entry of a former step of the run, stays.
func hideStore(upper string) error {
	p := filepath.Join(upper, snapshot.StoreDir)
	fsutil.Mutating()
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("hide %s in the view: %w", snapshot.StoreDir, err)
	}
	return nil
}

// Available reports whether kernel overlayfs runs can work here, and why
// not when they cannot. For an ordinary user it tries the real thing: a
// helper in a user namespace mounts a tiny overlay and reports back.
func Available() (bool, string) {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false, "cannot read /proc/filesystems: " + err.Error()
	}
	if !strings.Contains(string(b), "\toverlay\n") {
		return false, "the kernel has no overlay filesystem (modprobe overlay)"
	}
	if os.Geteuid() == 0 {
		return true, ""
	}
	for _, c := range []struct{ file, bad, why string }{
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "user namespaces are restricted by kernel.apparmor_restrict_unprivileged_userns=1"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0", "user namespaces are disabled by kernel.unprivileged_userns_clone=0"},
		{"/proc/sys/user/max_user_namespaces", "0", "user namespaces are disabled by user.max_user_namespaces=0"},
	} {
		if v, err := os.ReadFile(c.file); err == nil && strings.TrimSpace(string(v)) == c.bad {
			return false, c.why
		}
	}
	if err := probe(); err != nil {
		return false, "an overlay in a user namespace failed here: " + err.Error()
	}
	return true, ""
}

// ProbeVerb is the hidden verb of the availability probe's helper.
const ProbeVerb = "__overlay-probe"

// probe mounts a throwaway overlay and a /proc in a user and PID
// namespace, as a run would.
func probe() error {
	dir, err := os.MkdirTemp("", "snapback-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, ProbeVerb, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID}
	UserNS(cmd.SysProcAttr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return errors.New(msg)
	}
	return nil
}

// Probe is the probe helper's main.
func Probe(dir string) int {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", escape(dir+"/lower"), escape(dir+"/upper"), escape(dir+"/work"))
	if err := unix.Mount("overlay", dir+"/merged", "overlay", 0, opts); err != nil {
		fmt.Fprintf(os.Stderr, "mount overlayfs: %v\n", err)
		return 1
	}
	// A run's init mounts its PID namespace's /proc: refused in a user
	// namespace where /proc is partly covered (mask paths in containers).
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fmt.Fprintf(os.Stderr, "mount /proc in a PID namespace: %v\n", err)
		return 1
	}
	return 0
}
