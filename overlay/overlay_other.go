//go:build !linux

package overlay

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

var errNotLinux = errors.New("kernel overlayfs runs need Linux")

// Prepare fails: there is no overlayfs here.
func Prepare(Spec) func(*exec.Cmd) error {
	return func(*exec.Cmd) error { return errNotLinux }
}

// Helper fails: there is no overlayfs here.
func Helper([]string) int {
	fmt.Fprintln(os.Stderr, "snapback:", errNotLinux)
	return 125
}

// Available reports that overlayfs is not available.
func Available() (bool, string) { return false, "overlayfs is Linux-only" }

// ProbeVerb is the hidden verb of the availability probe's helper.
const ProbeVerb = "__overlay-probe"

// Probe fails: there is no overlayfs here.
func Probe(string) int { return 1 }

// UserNS does nothing here: there are no user namespaces.
func UserNS(*syscall.SysProcAttr) {}
