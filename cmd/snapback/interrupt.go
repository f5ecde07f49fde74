package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Ctrl-C and SIGTERM. The first SIGINT or SIGTERM cancels the verb's
// context (cobra's, from ExecuteContext): the work that honours it (a
// scan of the tree, a target's backend, an archive verb) stops at its
// next safe point, before anything is half-done, and the verb ends with
// the code `interrupted`, exit 128+N (130 for SIGINT, 143 for SIGTERM).
// A verb that cannot stop half-way (an undo applying its plan, then
// restoring its targets: snapshot's restoreTargets ignores the
// cancellation) finishes, says what it did, warns that the signal came
// too late to stop it, and exits 0. A second signal ends the process at once, as the
// signal's default would have: snapback is safe against that at every
// step (the next verb finishes or rolls back what a journal holds).
//
// run and shell are left out: they forward signals to their command
// (runner), whose own exit status is theirs, as before.

// errInterrupted is the cause of the context's cancellation.
var errInterrupted = errors.New("interrupted")

// forwardsSignals are the verbs that hand signals on to a command.
var forwardsSignals = map[string]bool{"run": true, "shell": true}

// interrupts watches for SIGINT and SIGTERM while a verb runs.
type interrupts struct {
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	sig    syscall.Signal // the first received; 0: none
	stop   func()
	// now is what the second signal does: end the process.
	now func(sig syscall.Signal)
}

// trap starts watching (once); stop ends it.
func (in *interrupts) trap() {
	if in.stop != nil {
		return
	}
	ch := make(chan os.Signal, 2)
	done := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	in.stop = func() {
		signal.Stop(ch)
		close(done)
	}
	go func() {
		select {
		case s := <-ch:
			in.mu.Lock()
			in.sig = s.(syscall.Signal)
			in.mu.Unlock()
			in.cancel(errInterrupted)
		case <-done:
			return
		}
		select {
		case <-ch:
			in.now(in.received())
		case <-done:
		}
	}()
}

func (in *interrupts) end() {
	if in.stop != nil {
		in.stop()
	}
}

// received is the first signal received, 0 for none.
func (in *interrupts) received() syscall.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sig
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
