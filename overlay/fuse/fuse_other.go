//go:build !linux

package fuse

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/snapback/snapback/overlay"
)

var errNotLinux = errors.New("fuse runs are built for Linux only so far (macOS/macFUSE is not implemented)")

// Available reports that fuse runs are not available here.
func Available() (bool, string) { return false, errNotLinux.Error() }

// Session is a fuse run; here it cannot start.
type Session struct{}

// NewSession makes a session that fails to start.
func NewSession(overlay.Spec) *Session { return &Session{} }

// Prepare fails: no fuse runs here.
func (*Session) Prepare(*exec.Cmd) error { return errNotLinux }

// Signal has nothing to signal.
func (*Session) Signal(os.Signal) error { return errNotLinux }

// Finish has nothing to do.
func (*Session) Finish() error { return nil }

// Helper fails: no fuse runs here.
func Helper([]string) int {
	fmt.Fprintln(os.Stderr, "snapback:", errNotLinux)
	return 125
}

// Serve fails: no fuse runs here.
func Serve([]string) int { return Helper(nil) }

// Keep fails: no fuse runs here.
func Keep([]string) int { return Helper(nil) }

// KeepOn reports that no kept views run here.
func KeepOn() bool { return false }

// KeepCheck reports that no kept views run here.
func KeepCheck(string) error { return errors.New("no fuse views here") }

// KeptServer reports that no kept view runs here.
func KeptServer(string) (int, bool) { return 0, false }

// ProbeVerb is the hidden verb of the trial's helper.
const ProbeVerb = "__fuse-probe"

// Trial reports that fuse runs are not available here.
func Trial(string) (bool, string) { return Available() }

// Probe fails: no fuse runs here.
func Probe(string) int { return 1 }
