package catalog

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Crash points for the kill tests. SNAPBACK_CRASH_AT=NAME makes the
// process SIGKILL itself when it reaches the point NAME, and NAME:N the
// N-th time it passes it (the tests also kill at random moments from
// outside; named points make the worst moments certain to be hit).
var (
	crashAt    = os.Getenv("SNAPBACK_CRASH_AT")
	crashCount atomic.Int64
)

func crashPoint(name string) {
	if crashAt == "" || !strings.HasPrefix(crashAt, name) {
		return
	}
	rest := crashAt[len(name):]
	if rest == "" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if n, err := strconv.ParseInt(strings.TrimPrefix(rest, ":"), 10, 64); err == nil && rest[0] == ':' && crashCount.Add(1) == n {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}
