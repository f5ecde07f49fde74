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

	"github.com/snapback/snapback/snapshot"
	"golang.org/x/sys/unix"
)

// Prepare makes cmd (built by the runner for the user's command) start the
// helper in a new mount namespace instead; the helper then execs the
// command with the same arguments.
func Prepare(spec Spec) func(*exec.Cmd) error {
	return func(cmd *exec.Cmd) error {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("overlay: find snapback's own binary: %w", err)
		}
		spec.Path = cmd.Path
		b, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		cmd.Args = append([]string{"snapback", HelperVerb, string(b), "--"}, cmd.Args...)
		cmd.Path = self
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS
		return nil
	}
}

// escape quotes the characters overlayfs's option parser splits on.
func escape(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// Helper is the helper's main: args are what follows HelperVerb. It
// returns only on failure, with the status to exit with (125).
func Helper(args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "snapback: overlay: %v\n", err)
		return 125
	}
	if len(args) < 3 || args[1] != "--" {
		return fail(errors.New("helper: bad arguments"))
	}
	var spec Spec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return fail(fmt.Errorf("helper: %w", err))
	}
	argv := args[2:]
	if err := mount(spec); err != nil {
		return fail(err)
	}
	if err := os.Chdir(spec.Dir); err != nil {
		return fail(fmt.Errorf("enter %s in the overlay: %w", spec.Dir, err))
	}
	env := os.Environ()
	err := syscall.Exec(spec.Path, argv, env)
	return fail(fmt.Errorf("exec %s: %w", spec.Path, err))
}

func mount(spec Spec) error {
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", escape(spec.Root), escape(spec.Upper), escape(spec.Work))
	if err := unix.Mount("overlay", spec.Root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlayfs on %s: %w", spec.Root, err)
	}
	// The store is invisible and unwritable inside: an empty read-only
	// tmpfs covers it, so a command cannot erase its own undo history.
	store := filepath.Join(spec.Root, snapshot.StoreDir)
	if err := unix.Mount("tmpfs", store, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0500"); err != nil {
		return fmt.Errorf("hide %s: %w", store, err)
	}
	return nil
}

// Available reports whether kernel overlayfs runs can work here, and why
// not when they cannot.
func Available() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "needs root for now (the unprivileged user-namespace path is not built yet)"
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false, "cannot read /proc/filesystems: " + err.Error()
	}
	if !strings.Contains(string(b), "\toverlay\n") {
		return false, "the kernel has no overlay filesystem (modprobe overlay)"
	}
	return true, ""
}
