package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exit statuses with a fixed meaning.
const (
	StatusFailed     = 125 // snapback itself failed before or after the command
	StatusNotExec    = 126 // found but not executable
	StatusNotFound   = 127 // no such command
	statusSignalBase = 128
)

// Error is a failure to start the command, with the shell's status for it.
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Command describes what to run.
type Command struct {
	Args []string // Args[0] is looked up in PATH as a shell would
	Dir  string   // working directory; "" for the current one
	Env  []string // nil for the current environment
	// Prepare, when set, adjusts the exec.Cmd before it starts (the
	// overlay modes set namespaces and credentials here).
	Prepare func(*exec.Cmd) error
	// Signal, when set, delivers a forwarded signal instead of signalling
	// the started process (the overlay modes' init takes them through a
	// pipe: signals sent to it directly are the terminal's, already
	// delivered to the command).
	Signal func(os.Signal) error
	// Outside makes snapback itself wait in / while the command runs, so
	// that its working directory leads nowhere (an overlay run's command
	// must not reach the real tree through it); Dir, or the current
	// directory, stays the command's.
	Outside bool
}

// Exec runs the command to completion, the way a shell would, and returns
// its exit status. An error means it could not be started; its *Error
// carries the status to use. When ctx ends while the command runs, the
// command gets SIGTERM, as a forwarded signal.
func Exec(ctx context.Context, c Command) (int, error) {
	if err := ctx.Err(); err != nil {
		return StatusFailed, &Error{StatusFailed, err}
	}
	if len(c.Args) == 0 {
		return StatusFailed, &Error{StatusFailed, errors.New("no command given")}
	}
	path, err := exec.LookPath(c.Args[0])
	if errors.Is(err, syscall.EISDIR) {
		// A path naming a directory: a shell says so and exits 126.
		return StatusNotExec, &Error{StatusNotExec, fmt.Errorf("%s: %w", c.Args[0], syscall.EISDIR)}
	}
	if err != nil {
		st := StatusNotFound
		if errors.Is(err, fs.ErrPermission) {
			st = StatusNotExec
		}
		return st, &Error{st, fmt.Errorf("%s: %w", c.Args[0], err)}
	}
	cmd := &exec.Cmd{Path: path, Args: c.Args, Dir: c.Dir, Env: c.Env,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	wd := ""
	if c.Outside {
		// After the lookup: a relative command or PATH entry was resolved
		// from here, and the command itself starts in Dir.
		if wd, err = os.Getwd(); err != nil {
			return StatusFailed, &Error{StatusFailed, fmt.Errorf("working directory: %w", err)}
		}
		if cmd.Dir == "" {
			cmd.Dir = wd
		}
	}
	if c.Prepare != nil {
		if err := c.Prepare(cmd); err != nil {
			return StatusFailed, &Error{StatusFailed, err}
		}
	}
	if c.Outside {
		if err := os.Chdir("/"); err != nil {
			return StatusFailed, &Error{StatusFailed, fmt.Errorf("leave the tree: %w", err)}
		}
		// Back for the code after the run; it uses absolute paths, so a
		// directory gone meanwhile is no failure.
		defer func() { _ = os.Chdir(wd) }()
	}
	deliver := func(s os.Signal) error { return cmd.Process.Signal(s) }
	if c.Signal != nil {
		deliver = c.Signal
	}
	// Catch signals before the start, so none is lost in between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		st := StatusNotExec
		if errors.Is(err, fs.ErrNotExist) {
			st = StatusNotFound
		}
		return st, &Error{st, fmt.Errorf("%s: %w", c.Args[0], err)}
	}
	tty := foregroundOfTerminal()
	done := make(chan struct{})
	go func() {
		cancel := ctx.Done()
		for {
			select {
			case <-cancel:
				_ = deliver(syscall.SIGTERM) // (as below: it may have just exited)
				cancel = nil                 // once
			case s := <-sigs:
				// A terminal sends ^C and ^\ to its whole foreground process
				// group, the command included: sending them again would
				// deliver them twice.
				if tty && (s == syscall.SIGINT || s == syscall.SIGQUIT) {
					continue
				}
				// The command may have just exited; nothing to deliver then.
				_ = deliver(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if cmd.ProcessState == nil {
		return StatusFailed, &Error{StatusFailed, err}
	}
	return StatusOf(cmd.ProcessState), nil
}

// StatusOf turns a process's end into a shell-style status.
func StatusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return statusSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// foregroundOfTerminal reports whether this process is in the foreground
// process group of its controlling terminal.
func foregroundOfTerminal() bool {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer f.Close() // read-only
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return false
	}
	return pgrp == unix.Getpgrp()
}
