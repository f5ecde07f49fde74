package fsutil

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// The crash tests' seam. Every system call by which snapback changes a
// file, a directory or the store (create, write, truncate, fsync, rename,
// link, symlink, unlink, rmdir, mkdir, chmod, chown, utimes, setxattr) is
// preceded by a call of [Mutating]. With SNAPBACK_KILL_AT=N in the
// environment, the process SIGKILLs itself just before the N-th of them,
// as `strace -e inject=…:signal=KILL:when=N` would: so a test can kill an
// operation at every state-changing step in turn, 1, 2, … until one run
// completes untouched. (strace itself counts per thread, and Go spreads
// system calls over threads, so its count would miss steps.) The
// variable is read only by a build that enabled the test seams (see
// [EnableTestSeams]).
var (
	killAt    int64
	killSteps atomic.Int64
)

func parseKillAt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// Mutating marks the state-changing system call about to be made.
func Mutating() {
	if killAt > 0 && killSteps.Add(1) == killAt {
		// SIGKILL to ourselves cannot be caught; nothing after it runs.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		for {
			time.Sleep(time.Second) // the signal is on its way: never return into the call
		}
	}
}
