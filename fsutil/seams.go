package fsutil

import (
	"os"
	"sync/atomic"
)

// The test seams: the crash tests' SNAPBACK_KILL_AT, SNAPBACK_CRASH_AT
// and SNAPBACK_SIGNAL_AT here, and the terminal and progress switches of
// cmd/snapback. A released snapback never reads them, so a variable a user's shell
// inherits cannot make it kill itself or lie about its terminal. Only a
// build that asks for them turns them on: the test binaries (their
// TestMain calls [EnableTestSeams]) and a snapback built with
// `-tags snapback_testseams` (cmd/snapback/seams_tag.go), which is how
// the crash tests build the binary they kill.
var testSeams atomic.Bool

// EnableTestSeams reads the test switches from the environment. It is for
// test builds only; call it before the first [Mutating].
func EnableTestSeams() {
	killAt = parseKillAt(os.Getenv("SNAPBACK_KILL_AT"))
	crashAt = os.Getenv("SNAPBACK_CRASH_AT")
	signalAt = os.Getenv("SNAPBACK_SIGNAL_AT")
	testSeams.Store(true)
}

// TestSeams reports whether this build reads the test switches.
func TestSeams() bool { return testSeams.Load() }
