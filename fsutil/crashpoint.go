package fsutil

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Named crash points, beside [Mutating]'s numbered ones: with
// SNAPBACK_CRASH_AT=NAME the process SIGKILLs itself when it reaches the
// point NAME, and with NAME:N the N-th time it passes it, so a test can
// make the worst moment of an operation certain to be hit. Read only by
// a build that enabled the test seams (see [EnableTestSeams]).
var (
	crashAt    string
	crashCount atomic.Int64
)

// signalAt is SNAPBACK_SIGNAL_AT=NAME: at the point NAME the process
// sends itself SIGINT, as a Ctrl-C at that moment would, and waits a
// moment for its handler to see it; then it goes on.
var signalAt string

// CrashPoint marks the point name.
func CrashPoint(name string) {
	if signalAt != "" && signalAt == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		time.Sleep(200 * time.Millisecond) // the signal's handler runs meanwhile
	}
	if crashAt == "" || !strings.HasPrefix(crashAt, name) {
		return
	}
	rest := crashAt[len(name):]
	if rest == "" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // cannot be caught
	}
	if n, err := strconv.ParseInt(strings.TrimPrefix(rest, ":"), 10, 64); err == nil && rest[0] == ':' && crashCount.Add(1) == n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}
