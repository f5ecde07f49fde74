//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/overlay/fuse"
)

// cleanupM removes, after the tests, the binary snapbackBinary built.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := c.m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath)) // a temp directory of our own
	}
	return code
}

// TestMain lets the test binary act as the snapback command inside the
// scripts ("exec snapback ..." runs Main in a child process).
func TestMain(m *testing.M) {
	fsutil.EnableTestSeams() // the scripts' kill, crash and terminal switches
	testscript.Main(cleanupM{m}, map[string]func(){
		"snapback": func() { os.Exit(Main()) },
		"mksock":   mksock,
	})
}

// mksock PATH leaves a Unix socket at PATH, as a server that exits
// without removing its socket does: the scripts' commands run it (it is
// on their PATH, inside a run too).
func mksock() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mksock PATH")
		os.Exit(2)
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: os.Args[1]})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mksock:", err)
		os.Exit(1)
	}
	os.Exit(0) // the socket file stays, as an unlinked one would not
}

// TestScript runs the CLI cases in testdata/script. Besides the standard
// testscript commands they may use:
//
//	exits STATUS PROG [ARGS...]  run PROG, require that exact exit status
//	capture VAR REGEXP           set $VAR to REGEXP's first group in the last stdout
//	sleep DURATION               wait (so that the stat cache trusts what it hashed)
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("SNAPBACK_LOCK_WAIT", "2s")
			// The user's state directory (agent sessions, prune tokens)
			// inside the script's work dir: testscript's HOME, /no-home,
			// would be made by root.
			env.Setenv("XDG_STATE_HOME", env.WorkDir+"/.state")
			// The man pages go generate made (TestManPages checks them
			// against the commands), for the scripts that install them.
			man, err := filepath.Abs("../../man")
			if err != nil {
				return err
			}
			env.Setenv("MANDIR", man)
			return nil
		},
		Condition: func(cond string) (bool, error) {
			ok, why := false, ""
			switch cond {
			case "root":
				ok, why = os.Geteuid() == 0, "the tests do not run as root"
			case "fuse":
				ok, why = fuse.Available()
			case "restic":
				_, err := exec.LookPath("restic")
				ok, why = err == nil, "restic is not installed (Debian: restic)"
			case "bash-completion":
				ok, why = bashCompletionInstalled() != "", "the bash-completion package is not installed (Debian: bash-completion)"
			default:
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			if ok {
				return true, nil
			}
			// Scripts skip on [!root], [!fuse], [!restic] or [!bash-completion]; when
			// SNAPBACK_REQUIRE names the condition, that is a failure.
			for _, c := range strings.Split(os.Getenv("SNAPBACK_REQUIRE"), ",") {
				if c == cond {
					return false, fmt.Errorf("SNAPBACK_REQUIRE names %s, but %s", cond, why)
				}
			}
			return false, nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   cmdExits,
			"capture": cmdCapture,
			"sleep":   cmdSleep,
			"object":  cmdObject,
		},
	})
}

// cmdExits runs a program like exec, and checks its exact exit status:
// `! exec` only says "not zero", and the CLI's statuses carry meaning.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exits")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exits STATUS PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// cmdCapture saves part of the last command's stdout (a snapshot id, say)
// in an environment variable for the lines that follow.
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: capture VAR REGEXP")
	}
	re, err := regexp.Compile(`(?m)` + args[1])
	ts.Check(err)
	if re.NumSubexp() < 1 {
		ts.Fatalf("capture: %#q has no group", args[1])
	}
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if m == nil {
		ts.Fatalf("capture: no match for %#q in stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}

func cmdSleep(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sleep DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}
