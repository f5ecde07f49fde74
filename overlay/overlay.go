//go:build linux

package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"golang.org/x/sys/unix"
)

// UserNS makes the helper an ordinary user's: a new user namespace that
// maps only the caller's own uid and gid (so the command does not become
// a fake root), with the capabilities the overlay mount needs raised as
// ambient ones for the helper alone; it clears them before the exec.
// CAP_SYS_ADMIN alone is not enough: overlayfs's work directory needs the
// DAC capabilities too (without them the mount fails with EACCES).
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
	if spec.Bind != "" {
		if err := unix.Mount(spec.Bind, spec.Root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount the view %s on %s: %w", spec.Bind, spec.Root, err)
		}
		// This namespace's copies of the mounts under Cover (this run's
		// clones, and other runs' made before it) go: a copy keeps its
		// filesystem mounted, and zfs would refuse to destroy a clone
		// while any namespace holds one ("dataset is busy").
		for _, p := range Submounts(spec.Cover) {
			_ = unix.Unmount(p, unix.MNT_DETACH) // one not detached is covered by the init
		}
		return nil
	}
	opts := options(spec.Root, spec.Upper, spec.Work, spec.UserNS)
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

// options are a view's mount options.
func options(lower, upper, work string, userNS bool) string {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", escape(lower), escape(upper), escape(work))
	if userNS {
		// trusted.* xattrs are root's: user.overlay.* marks instead. The
		// kernel allows no redirect_dir then ("conflicting options"):
		// rename(2) of a directory that existed before the run fails with
		// EXDEV (mv copies instead). The trial says so (renameLimit).
		return opts + ",userxattr"
	}
	// Directories renamed with rename(2) stay renames (the changeset
	// follows the redirect), instead of failing with EXDEV.
	return opts + ",redirect_dir=on"
}

// renameLimit mounts a tiny view in dir (which it fills), with a run's
// options and its layer on the run's filesystem, and renames a directory
// of its lower layer there: it returns "" when that works, else what a
// run cannot do. (Without a redirect in the layer, overlayfs refuses such
// a rename with EXDEV.)
func renameLimit(dir string, userNS bool) string {
	l, u, w := filepath.Join(dir, "rl"), filepath.Join(dir, "ru"), filepath.Join(dir, "rw")
	for _, d := range []string{l, filepath.Join(l, "d"), u, w} {
		fsutil.Mutating()
		if err := os.Mkdir(d, 0o700); err != nil {
			return "cannot try a rename of a directory: " + err.Error()
		}
	}
	if err := unix.Mount("overlay", l, "overlay", 0, options(l, u, w, userNS)); err != nil {
		return "cannot try a rename of a directory: " + err.Error()
	}
	defer unix.Unmount(l, unix.MNT_DETACH) // the probe's own namespace: gone with it anyway
	fsutil.Mutating()
	err := unix.Rename(filepath.Join(l, "d"), filepath.Join(l, "e"))
	if err == nil {
		return ""
	}
	why := "the layer's filesystem keeps no overlay redirect"
	if userNS {
		why = "the kernel allows no redirect_dir in a user namespace"
	}
	return fmt.Sprintf("rename(2) of a directory that existed before the run fails here with %v (%s): mv copies instead, but Python's os.rename, Node's fs.rename and Go's os.Rename fail", errName(err), why)
}

func errName(err error) string {
	if errno, ok := err.(unix.Errno); ok {
		if n := unix.ErrnoName(errno); n != "" {
			return n
		}
	}
	return err.Error()
}

// limitPrefix starts the line the trial's helper prints for what a view
// works without (renameLimit).
const limitPrefix = "limit: "

// hideStore makes the store's whiteout in upper (a character device 0/0,
// which needs no capability since Linux 5.8); one there already, or the
// command's own entry of a former step of the run, stays.
func hideStore(upper string) error {
	p := filepath.Join(upper, layout.StoreDir)
	fsutil.Mutating()
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("hide %s in the view: %w", layout.StoreDir, err)
	}
	return nil
}

// Available reports whether kernel overlayfs runs can work on this
// machine, and why not when they cannot. For an ordinary user it tries
// the real thing: a helper in a user namespace mounts a tiny overlay in a
// temporary directory and reports back. [Trial] tries a project's own
// filesystem.
func Available() (bool, string) {
	if why := machine(); why != "" {
		return false, why
	}
	if os.Geteuid() == 0 {
		return true, ""
	}
	dir, err := os.MkdirTemp("", "snapback-probe-")
	if err != nil {
		return false, "an overlay in a user namespace failed here: " + err.Error()
	}
	defer os.RemoveAll(dir)
	lower := filepath.Join(dir, "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		return false, "an overlay in a user namespace failed here: " + err.Error()
	}
	if _, err := trial(lower, dir); err != nil {
		return false, "an overlay in a user namespace failed here: " + err.Error()
	}
	return true, ""
}

// machine says what keeps overlayfs runs from working on this machine,
// whatever the project: "" when nothing does.
func machine() string {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return "cannot read /proc/filesystems: " + err.Error()
	}
	if !strings.Contains(string(b), "\toverlay\n") {
		return "the kernel has no overlay filesystem (modprobe overlay)"
	}
	if os.Geteuid() == 0 {
		return ""
	}
	for _, c := range []struct{ file, bad, why string }{
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "user namespaces are restricted by kernel.apparmor_restrict_unprivileged_userns=1"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0", "user namespaces are disabled by kernel.unprivileged_userns_clone=0"},
		{"/proc/sys/user/max_user_namespaces", "0", "user namespaces are disabled by user.max_user_namespaces=0"},
	} {
		if v, err := os.ReadFile(c.file); err == nil && strings.TrimSpace(string(v)) == c.bad {
			return c.why
		}
	}
	return ""
}

// Trial reports whether an overlayfs run works for the project at root,
// by making one: a helper mounts a view of root over it, in a mount (and
// PID) namespace of its own, with the layer where a run's would be
// ([TrialDir]), hides the store, writes a file into the view and mounts
// the namespace's /proc, as a run's helper and init do. The reason says
// what was tried, and why it failed. (A container's root is often
// overlayfs itself, which the kernel refuses as an upper layer.)
func Trial(root string) (bool, string) {
	ok, why, _ := TrialLimit(root)
	return ok, why
}

// TrialLimit is [Trial], and says besides what a run that works here
// cannot do ("" when nothing): rename(2) of a directory that existed
// before the run, where overlayfs records no redirect (an ordinary user's
// view).
func TrialLimit(root string) (ok bool, why, limit string) {
	if why := machine(); why != "" {
		return false, why, ""
	}
	if why := Uncovered(root); why != "" {
		return false, why, ""
	}
	if subs := Submounts(root); len(subs) > 0 {
		return false, fmt.Sprintf("%s is a mount point below the root, and an overlayfs view shows the root's own filesystem only: the command would see an empty directory there, and a commit would write into the mount (the fuse mode sees through mounts)", subs[0]), ""
	}
	dir, done, err := TrialDir(root)
	if err != nil {
		return false, "cannot try a view here: " + err.Error(), ""
	}
	defer done()
	tried := fmt.Sprintf("a trial view of %s (%s) with its layer in %s", root, FSType(root), filepath.Dir(dir))
	limit, err = trial(root, dir)
	if err != nil {
		why := fmt.Sprintf("%s failed: %v", tried, err)
		if FSType(dir) == "overlay" {
			why += " (overlayfs keeps no layer on overlayfs, as a container's root is: a volume mounted into the container, or --mode fuse or copy, works)"
		}
		return false, why, ""
	}
	return true, tried + " worked", limit
}

// Submounts lists the mount points strictly below root, but those in the
// store (hidden from the view anyway), in this process's mount namespace
// (nil if /proc/self/mountinfo cannot be read: the trial then decides
// alone).
func Submounts(root string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	root = filepath.Clean(root)
	store := filepath.Join(root, layout.StoreDir)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := UnescapeMount(f[4])
		if !strings.HasPrefix(p, root+"/") || p == store || strings.HasPrefix(p, store+"/") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func UnescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TrialDir makes an empty directory for a trial layer where a run's layer
// would be: in the store's tmp/ (swept by recovery), or, with no store
// yet, in the root itself, where the store would be made, under a name no
// snapshot holds. done removes it, and puts the root's times back when it
// was made there.
func TrialDir(root string) (dir string, done func(), err error) {
	parent, prefix := filepath.Join(root, layout.StoreDir, "tmp"), "trial-"
	if st, err := os.Lstat(parent); err != nil || !st.IsDir() {
		parent, prefix = root, layout.TempPrefix+"trial-"
	}
	var before unix.Stat_t
	if err := unix.Lstat(parent, &before); err != nil {
		return "", nil, err
	}
	fsutil.Mutating()
	if dir, err = os.MkdirTemp(parent, prefix); err != nil {
		return "", nil, err
	}
	return dir, func() {
		fsutil.Mutating()
		_ = os.RemoveAll(dir) // a leftover is swept, or held by no snapshot
		if parent == root {
			fsutil.Mutating()
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, root, []unix.Timespec{before.Atim, before.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
		}
	}, nil
}

// FSType names the filesystem p is on ("overlay", "ext4"...), or its
// magic number when it is not one of the usual.
func FSType(p string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return "unknown filesystem"
	}
	switch uint32(st.Type) {
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.V9FS_MAGIC:
		return "9p"
	case 0x2fc12fc1:
		return "zfs"
	}
	return fmt.Sprintf("filesystem 0x%x", uint32(st.Type))
}

// ProbeVerb is the hidden verb of the trial's helper.
const ProbeVerb = "__overlay-probe"

// trialSpec is what the trial's helper is told.
type trialSpec struct {
	Spec
	File string `json:"file"` // written into the view, then removed
	// Renames is an empty directory on the layer's filesystem, for
	// renameLimit's tiny view.
	Renames string `json:"renames"`
}

// trial runs the trial's helper: a view of lower, mounted over it, with
// its layer in dir (upper and work are made there).
func trial(lower, dir string) (limit string, err error) {
	spec := trialSpec{Spec: Spec{Root: lower, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), UserNS: os.Geteuid() != 0},
		File: filepath.Join(lower, layout.TempPrefix+"trial"), Renames: filepath.Join(dir, "renames")}
	for _, d := range []string{spec.Upper, spec.Work, spec.Renames} {
		fsutil.Mutating()
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", err
		}
	}
	out, err := RunTrial(ProbeVerb, spec, unix.CLONE_NEWNS|unix.CLONE_NEWPID, spec.UserNS)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if l, ok := strings.CutPrefix(line, limitPrefix); ok {
			return l, nil
		}
	}
	return "", nil
}

// RunTrial runs snapback's own binary as the hidden verb with spec (as
// JSON) in new namespaces (cloneflags; a user namespace too with
// userNS), outside the tree, and returns what it printed (as the error
// when it fails): how each mode's real trial is run.
func RunTrial(verb string, spec any, cloneflags uintptr, userNS bool) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(self, verb, string(b))
	cmd.Dir = "/"
	// The crash tests' kill points are snapback's, not the throwaway trial's.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SNAPBACK_KILL_AT=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags}
	if userNS {
		UserNS(cmd.SysProcAttr)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return "", errors.New(msg)
	}
	return string(out), nil
}

// Probe is the trial helper's main: arg is its trialSpec.
func Probe(arg string) int {
	var spec trialSpec
	if err := json.Unmarshal([]byte(arg), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "trial: %v\n", err)
		return 1
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "make mounts private: %v\n", err)
		return 1
	}
	// Before the view of the root: the layer's directory may be in the
	// store, which the view hides.
	if spec.Renames != "" {
		if limit := renameLimit(spec.Renames, spec.UserNS); limit != "" {
			fmt.Printf("%s%s\n", limitPrefix, limit)
		}
	}
	if err := mount(spec.Spec); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}
	f, err := os.OpenFile(spec.File, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.WriteString("trial\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Remove(spec.File)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "write into the view: %v\n", err)
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
