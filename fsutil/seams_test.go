package fsutil

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestSeamsOffInRelease: a process that did not enable the test seams
// ignores SNAPBACK_KILL_AT and SNAPBACK_CRASH_AT however its environment
// sets them (an inherited variable must not make a user's snapback kill
// itself); one that enabled them dies at the step named.
func TestSeamsOffInRelease(t *testing.T) {
	if job := os.Getenv("SNAPBACK_SEAMS_CHILD"); job != "" {
		if job == "enable" {
			EnableTestSeams()
		}
		CrashPoint("seam")
		Mutating()
		os.Exit(0)
	}
	for _, c := range []struct {
		job    string
		killed bool
	}{{"release", false}, {"enable", true}} {
		for _, env := range []string{"SNAPBACK_KILL_AT=1", "SNAPBACK_CRASH_AT=seam"} {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSeamsOffInRelease$")
			cmd.Env = append(os.Environ(), "SNAPBACK_SEAMS_CHILD="+c.job, env)
			err := cmd.Run()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			if killed != c.killed || (!killed && err != nil) {
				t.Errorf("%s with %s: killed %v (err %v), want killed %v", c.job, env, killed, err, c.killed)
			}
		}
	}
	if TestSeams() {
		t.Error("TestSeams() is true in a test binary that never enabled them")
	}
}
