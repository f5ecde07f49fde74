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

// Session is an overlayfs run; here it cannot start.
type Session struct{}

// NewSession makes a session that fails to start.
func NewSession(Spec) *Session { return &Session{} }

// Prepare fails: there is no overlayfs here.
func (*Session) Prepare(*exec.Cmd) error { return errNotLinux }

// Signal has nothing to signal.
func (*Session) Signal(os.Signal) error { return errNotLinux }

// Finish has nothing to do.
func (*Session) Finish() error { return nil }

// InitVerb is the hidden verb of the init.
const InitVerb = "__overlay-init"

// Init fails: there are no PID namespaces here.
func Init([]string) int { return Helper(nil) }

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

// Trial reports that overlayfs is not available.
func Trial(string) (bool, string) { return Available() }

// TrialLimit reports that overlayfs is not available.
func TrialLimit(string) (bool, string, string) {
	ok, why := Available()
	return ok, why, ""
}

// Pass leaves f as it is: no helper is started here ([Session.Prepare]
// fails first).
func Pass(f *os.File) (int, error) { return int(f.Fd()), nil }
