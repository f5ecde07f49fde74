package snapshot

import (
	"os"
	"syscall"
)

// crashAt, set from SNAPBACK_CRASH_AT, makes the process kill itself with
// SIGKILL at a named point: the crash tests use it to stop an operation at
// an exact step, besides killing it at random moments from outside.
var crashAt = os.Getenv("SNAPBACK_CRASH_AT")

func crashPoint(name string) {
	if crashAt == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}
